//! Search: vector (exact, or through an ANN index kept in step by ingest) and full text
//! (BM25 over the heading path and text), both filtered by an optional SQL predicate.

use anyhow::{Context, Result};
use lancedb::index::scalar::{FtsIndexBuilder, FullTextSearchQuery};
use lancedb::index::Index;
use lancedb::query::{QueryBase, Select};
use lancedb::table::{OptimizeAction, OptimizeOptions};
use lancedb::{DistanceType, Table};

use super::runtime::block_on;
use super::schema::{fetch, hits, Hit, SEARCH_TEXT};
use super::Store;

/// How a vector search runs when the table has an ANN index.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VectorSearch {
    /// Scan every vector anyway (`rag search --exact`).
    pub exact: bool,
    pub nprobes: usize,
    pub refine_factor: u32,
}

impl Default for VectorSearch {
    fn default() -> Self {
        VectorSearch {
            exact: false,
            nprobes: 20,
            refine_factor: 5,
        }
    }
}

impl VectorSearch {
    /// The `[index]` ANN settings; `exact` from `rag search --exact`.
    pub fn of(s: &crate::config::IndexSettings, exact: bool) -> VectorSearch {
        VectorSearch {
            exact,
            nprobes: s.ann_nprobes,
            refine_factor: s.ann_refine_factor,
        }
    }
}

/// When ingest builds and refreshes the ANN index.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AnnPolicy {
    pub min_rows: usize,
    pub kind: crate::config::AnnType,
}

/// What a search reads back: the columns a [`Hit`] is made of, and `score`, the column of
/// the search's own score (`_distance` or `_score`).
fn hit_columns(score: &str) -> Select {
    Select::columns(&[
        "id",
        "path",
        "heading",
        "line_start",
        "line_end",
        "text",
        score,
    ])
}

impl Store {
    /// Brings the full-text index up to date with the table: created on first use, then
    /// extended with new rows (deleted rows are masked without it).
    pub fn refresh_text_index(&self) -> Result<()> {
        block_on(async {
            let has_index = self
                .chunks
                .list_indices()
                .await?
                .iter()
                .any(|i| i.columns.iter().any(|c| c == SEARCH_TEXT));
            if has_index {
                self.chunks
                    .optimize(OptimizeAction::Index(OptimizeOptions::default()))
                    .await?;
            } else {
                self.chunks
                    .create_index(&[SEARCH_TEXT], Index::FTS(FtsIndexBuilder::default()))
                    .execute()
                    .await?;
            }
            Ok(())
        })
    }

    /// How vector searches on this store run (ANN probes, `--exact`).
    pub fn with_search(mut self, search: VectorSearch) -> Store {
        self.search = search;
        self
    }

    pub fn set_search(&mut self, search: VectorSearch) {
        self.search = search;
    }

    /// Nearest chunks by cosine distance: through the ANN index when the table has one
    /// (ingest builds it past `index.ann_min_rows`; rows added since are scanned exactly and
    /// merged in), else an exact scan of every vector.
    pub fn vector_search(
        &self,
        vector: &[f32],
        k: usize,
        filter: Option<&str>,
    ) -> Result<Vec<Hit>> {
        let mut q = self
            .chunks
            .query()
            .nearest_to(vector)?
            .distance_type(DistanceType::Cosine)
            .limit(k)
            .select(hit_columns("_distance"));
        match (&self.ann, self.search.exact) {
            (Some(kind), false) => {
                q = q.nprobes(self.search.nprobes)?;
                if self.search.refine_factor > 0 {
                    q = q.refine_factor(self.search.refine_factor);
                }
                tracing::info!(
                    index = %kind,
                    nprobes = self.search.nprobes,
                    refine_factor = self.search.refine_factor,
                    "vector search: ANN index"
                );
            }
            (Some(_), true) => {
                q = q.bypass_vector_index();
                tracing::info!("vector search: exact scan (--exact)");
            }
            (None, _) => tracing::info!("vector search: exact scan (no ANN index)"),
        }
        if let Some(f) = filter {
            q = q.only_if(f);
        }
        let batches = fetch(q)?;
        hits(&batches, "_distance", |d| 1.0 - d)
    }

    /// The ANN index type in use, if any.
    pub fn ann(&self) -> Option<&str> {
        self.ann.as_deref()
    }

    /// Keeps the ANN index in step with the table, after an ingest's commits: built once the
    /// table reaches `policy.min_rows`, then extended with new rows by the text index's
    /// refresh (`OptimizeAction::Index` covers every index), and retrained from scratch when
    /// fewer than half of the rows are in it (its partitions were learnt on a smaller table).
    /// Returns whether it (re)built the index.
    pub fn update_ann(&mut self, policy: AnnPolicy) -> Result<bool> {
        let due = block_on(async {
            let rows = self.chunks.count_rows(None).await?;
            if rows < policy.min_rows.max(1) {
                return Ok(false);
            }
            if self.ann.is_some() {
                let stats = self.chunks.index_stats(VECTOR_INDEX).await?;
                if stats.is_some_and(|s| s.num_indexed_rows * 2 >= rows) {
                    return Ok(false);
                }
            }
            Ok(true)
        })?;
        if due {
            self.rebuild_ann(policy.kind)?;
        }
        Ok(due)
    }

    /// Builds the ANN index of type `kind` from every row now, replacing the old one.
    pub fn rebuild_ann(&mut self, kind: crate::config::AnnType) -> Result<()> {
        use crate::config::AnnType;
        use lancedb::index::vector::{IvfHnswSqIndexBuilder, IvfPqIndexBuilder};
        let index = match kind {
            AnnType::IvfHnswSq => Index::IvfHnswSq(
                IvfHnswSqIndexBuilder::default().distance_type(DistanceType::Cosine),
            ),
            AnnType::IvfPq => {
                Index::IvfPq(IvfPqIndexBuilder::default().distance_type(DistanceType::Cosine))
            }
        };
        self.ann = block_on(async {
            self.chunks
                .create_index(&["vector"], index)
                .name(VECTOR_INDEX.to_string())
                .replace(true)
                .execute()
                .await
                .context("building the ANN vector index")?;
            vector_index(&self.chunks).await
        })?;
        Ok(())
    }

    /// Best chunks by BM25 over the heading path and text.
    pub fn text_search(&self, query: &str, k: usize, filter: Option<&str>) -> Result<Vec<Hit>> {
        if query.trim().is_empty() {
            return Ok(Vec::new());
        }
        let mut q = self
            .chunks
            .query()
            .full_text_search(FullTextSearchQuery::new(query.to_string()))
            .limit(k)
            .select(hit_columns("_score"));
        if let Some(f) = filter {
            q = q.only_if(f);
        }
        let batches = fetch(q)?;
        hits(&batches, "_score", |s| s)
    }
}

/// The name rag gives the chunks table's vector index.
pub(super) const VECTOR_INDEX: &str = "vector_idx";

/// The type of the vector index on `table`, if it has one.
pub(super) async fn vector_index(table: &Table) -> Result<Option<String>> {
    Ok(table
        .list_indices()
        .await?
        .into_iter()
        .find(|i| i.columns.iter().any(|c| c == "vector"))
        .map(|i| i.index_type.to_string()))
}

//! The tables' layout and the Arrow conversions both ways: what a chunk and a file record
//! are, the schemas they are written with, and the query results read back as hits.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, UInt32Type};
use arrow_array::{
    Array, FixedSizeListArray, Float32Array, Int64Array, RecordBatch, RecordBatchIterator,
    RecordBatchReader, StringArray, UInt32Array, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::TryStreamExt;
use lancedb::query::ExecutableQuery;
use serde::{Deserialize, Serialize};

use super::runtime::block_on;
use crate::embed::ModelInfo;

pub(super) const CHUNKS: &str = "chunks";
pub(super) const FILES: &str = "files";
pub(super) const META: &str = "index.json";
/// The column the full-text index covers.
pub(super) const SEARCH_TEXT: &str = "search_text";

/// Bumped when the table layout changes; an index of another version must be rebuilt.
pub(super) const LAYOUT_VERSION: u32 = 2;

/// How the vectors of an index were made; opening it with anything else is an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexMeta {
    pub layout: u32,
    pub embed: ModelInfo,
    pub chunk: ChunkMeta,
    /// The folder indexed paths are relative to.
    pub root: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkMeta {
    pub max_tokens: usize,
    pub min_tokens: usize,
    pub overlap_tokens: usize,
}

impl IndexMeta {
    pub fn new(embed: ModelInfo, chunk: ChunkMeta, root: PathBuf) -> IndexMeta {
        IndexMeta {
            layout: LAYOUT_VERSION,
            embed,
            chunk,
            root,
        }
    }
}

/// One stored chunk, as written.
#[derive(Debug, Clone)]
pub struct Row<'a> {
    pub id: &'a str,
    pub path: &'a str,
    pub heading: &'a str,
    pub line_start: u32,
    pub line_end: u32,
    pub text: &'a str,
    pub file_hash: &'a str,
    pub vector: &'a [f32],
}

/// A stored chunk with its vector, for reuse under another path.
#[derive(Debug, Clone)]
pub struct StoredChunk {
    pub heading: String,
    pub line_start: u32,
    pub line_end: u32,
    pub text: String,
    pub vector: Vec<f32>,
}

/// What the index knows of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileState {
    pub path: String,
    pub hash: String,
    pub size: u64,
    pub mtime_ns: i64,
    pub chunks: u32,
}

/// One search result. `score`: cosine similarity for vector search, BM25 for text search.
#[derive(Debug, Clone)]
pub struct Hit {
    pub id: String,
    pub path: String,
    pub heading: String,
    pub line_start: u32,
    pub line_end: u32,
    pub text: String,
    pub score: f32,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    pub chunks: usize,
    pub files: usize,
}

pub(super) fn chunk_schema(dim: usize) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("path", DataType::Utf8, false),
        Field::new("heading", DataType::Utf8, false),
        Field::new("line_start", DataType::UInt32, false),
        Field::new("line_end", DataType::UInt32, false),
        Field::new("text", DataType::Utf8, false),
        // What BM25 reads: the heading path (document title included) and the text, so a
        // query naming a page's subject finds chunks that never repeat it. Layout 2.
        Field::new(SEARCH_TEXT, DataType::Utf8, false),
        Field::new("file_hash", DataType::Utf8, false),
        Field::new(
            "vector",
            DataType::FixedSizeList(
                Arc::new(Field::new("item", DataType::Float32, true)),
                dim as i32,
            ),
            false,
        ),
    ]))
}

pub(super) fn file_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("path", DataType::Utf8, false),
        Field::new("hash", DataType::Utf8, false),
        Field::new("size", DataType::UInt64, false),
        Field::new("mtime_ns", DataType::Int64, false),
        Field::new("chunks", DataType::UInt32, false),
    ]))
}

/// The records of `files`, as written to the files table.
pub(super) fn file_batch(files: &[FileState]) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(
        file_schema(),
        vec![
            Arc::new(StringArray::from_iter_values(
                files.iter().map(|f| f.path.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(
                files.iter().map(|f| f.hash.as_str()),
            )),
            Arc::new(UInt64Array::from_iter_values(files.iter().map(|f| f.size))),
            Arc::new(Int64Array::from_iter_values(
                files.iter().map(|f| f.mtime_ns),
            )),
            Arc::new(UInt32Array::from_iter_values(
                files.iter().map(|f| f.chunks),
            )),
        ],
    )?)
}

/// One batch as the reader a `merge_insert` takes.
pub(super) fn reader(batch: RecordBatch) -> Box<dyn RecordBatchReader + Send> {
    let schema = batch.schema();
    Box::new(RecordBatchIterator::new(vec![Ok(batch)], schema))
}

/// A SQL string literal.
pub(super) fn sql_str(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

pub(super) fn path_in(paths: &[&str]) -> String {
    let list: Vec<String> = paths.iter().map(|p| sql_str(p)).collect();
    format!("path IN ({})", list.join(", "))
}

/// The rows of the chunks table, their vectors checked to have `dim` dimensions.
pub(super) fn chunk_batch(dim: usize, rows: &[Row<'_>]) -> Result<RecordBatch> {
    let mut flat = Vec::with_capacity(rows.len() * dim);
    for r in rows {
        if r.vector.len() != dim {
            return Err(anyhow!(
                "chunk {} has a vector of {} dims, expected {dim}",
                r.id,
                r.vector.len()
            ));
        }
        flat.extend_from_slice(r.vector);
    }
    let vectors = FixedSizeListArray::try_new(
        Arc::new(Field::new("item", DataType::Float32, true)),
        dim as i32,
        Arc::new(Float32Array::from(flat)),
        None,
    )?;
    Ok(RecordBatch::try_new(
        chunk_schema(dim),
        vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.id))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.path))),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.heading),
            )),
            Arc::new(UInt32Array::from_iter_values(
                rows.iter().map(|r| r.line_start),
            )),
            Arc::new(UInt32Array::from_iter_values(
                rows.iter().map(|r| r.line_end),
            )),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.text))),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| format!("{}\n{}", r.heading, r.text)),
            )),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.file_hash),
            )),
            Arc::new(vectors),
        ],
    )?)
}

/// Every batch a query returns.
pub(super) fn fetch(q: impl ExecutableQuery) -> Result<Vec<RecordBatch>> {
    block_on(async { Ok(q.execute().await?.try_collect().await?) })
}

/// A column of a query result, or an error naming it.
pub(super) fn column<'a>(
    b: &'a RecordBatch,
    table: &str,
    name: &str,
) -> Result<&'a arrow_array::ArrayRef> {
    b.column_by_name(name)
        .with_context(|| format!("{table}.{name} missing from a query result"))
}

pub(super) fn hits(
    batches: &[RecordBatch],
    score_col: &str,
    score: impl Fn(f32) -> f32,
) -> Result<Vec<Hit>> {
    let mut out = Vec::new();
    for b in batches {
        let col = |name: &str| column(b, "chunks", name);
        let id = col("id")?.as_string::<i32>();
        let path = col("path")?.as_string::<i32>();
        let heading = col("heading")?.as_string::<i32>();
        let ls = col("line_start")?.as_primitive::<UInt32Type>();
        let le = col("line_end")?.as_primitive::<UInt32Type>();
        let text = col("text")?.as_string::<i32>();
        let sc = col(score_col)?.as_primitive::<Float32Type>();
        for i in 0..b.num_rows() {
            out.push(Hit {
                id: id.value(i).to_string(),
                path: path.value(i).to_string(),
                heading: heading.value(i).to_string(),
                line_start: ls.value(i),
                line_end: le.value(i),
                text: text.value(i).to_string(),
                score: if sc.is_null(i) {
                    0.0
                } else {
                    score(sc.value(i))
                },
            });
        }
    }
    Ok(out)
}

/// How the vectors of `built` and `now` differ, in the terms of the settings, or `None`.
pub(super) fn embed_diff(built: &ModelInfo, now: &ModelInfo) -> Option<String> {
    let short = |h: &str| h[..12.min(h.len())].to_string();
    if (&built.name, built.dim, &built.file_hash) != (&now.name, now.dim, &now.file_hash) {
        Some(format!(
            "embedding model {} ({} dims, {}) but {} ({} dims, {}) is configured",
            built.name,
            built.dim,
            short(&built.file_hash),
            now.name,
            now.dim,
            short(&now.file_hash)
        ))
    } else if built.pooling != now.pooling {
        Some(format!(
            "embed.pooling = {:?} but {:?} is configured",
            built.pooling, now.pooling
        ))
    } else if built.passage_prefix != now.passage_prefix {
        Some(format!(
            "embed.passage_prefix = {:?} but {:?} is configured",
            built.passage_prefix, now.passage_prefix
        ))
    } else {
        None
    }
}

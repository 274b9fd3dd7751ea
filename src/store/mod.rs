//! LanceDB, and the only user of `lancedb` and `arrow`: the index folder's tables and their
//! schema, the compatibility record, per-file replace and delete, vector and full-text search.
//!
//! Layout of the index folder:
//! - `chunks.lance`: one row per chunk (id, path, heading, lines, text, file hash, vector);
//! - `files.lance`: one row per indexed file (path, content hash, size, mtime, chunk count),
//!   written only after that file's chunks, so an interrupted ingest redoes the file;
//! - `index.json`: the embedding model and chunk settings the vectors were made with.
//!
//! Every public function is synchronous: the async LanceDB and object_store calls run on the
//! store's own runtime (`runtime.rs`), so no caller deals with tokio.

mod durable;
mod lease;
mod location;
mod runtime;

pub use lease::Lease;
pub use location::{storage_error, Location, Remote};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Int64Type, UInt32Type, UInt64Type};
use arrow_array::{
    Array, FixedSizeListArray, Float32Array, Int64Array, RecordBatch, RecordBatchIterator,
    RecordBatchReader, StringArray, UInt32Array, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::TryStreamExt;
use lancedb::index::scalar::{FtsIndexBuilder, FullTextSearchQuery};
use lancedb::index::Index;
use lancedb::query::{ExecutableQuery, QueryBase, Select};
use lancedb::table::{OptimizeAction, OptimizeOptions};
use lancedb::{Connection, DistanceType, Table};
use serde::{Deserialize, Serialize};

use crate::embed::ModelInfo;
use crate::exit::ExitError;
use runtime::block_on;

const CHUNKS: &str = "chunks";
const FILES: &str = "files";
const META: &str = "index.json";
/// The column the full-text index covers.
const SEARCH_TEXT: &str = "search_text";

/// Bumped when the table layout changes; an index of another version must be rebuilt.
const LAYOUT_VERSION: u32 = 2;

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

pub struct Store {
    #[allow(dead_code)]
    db: Connection,
    chunks: Table,
    files: Table,
    pub meta: IndexMeta,
    loc: Location,
    /// The type of the chunks table's vector index, if it has one (see [`Store::update_ann`]).
    ann: Option<String>,
    search: VectorSearch,
}

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

fn chunk_schema(dim: usize) -> SchemaRef {
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

fn file_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("path", DataType::Utf8, false),
        Field::new("hash", DataType::Utf8, false),
        Field::new("size", DataType::UInt64, false),
        Field::new("mtime_ns", DataType::Int64, false),
        Field::new("chunks", DataType::UInt32, false),
    ]))
}

/// The records of `files`, as written to the files table.
fn file_batch(files: &[FileState]) -> Result<RecordBatch> {
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
fn reader(batch: RecordBatch) -> Box<dyn RecordBatchReader + Send> {
    let schema = batch.schema();
    Box::new(RecordBatchIterator::new(vec![Ok(batch)], schema))
}

/// A SQL string literal.
fn sql_str(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn path_in(paths: &[&str]) -> String {
    let list: Vec<String> = paths.iter().map(|p| sql_str(p)).collect();
    format!("path IN ({})", list.join(", "))
}

async fn connect(loc: &Location) -> Result<Connection> {
    let uri = loc.uri()?;
    let builder = match loc {
        Location::Local(_) => lancedb::connect(&uri).session(durable::session()),
        Location::Remote(r) => lancedb::connect(&uri).storage_options(r.options.clone()),
    };
    builder.execute().await.map_err(|e| match loc {
        Location::Remote(r) => location::storage_error(e, &r.uri, "opening the index at"),
        Location::Local(_) => anyhow!(e).context(format!("opening the index at {}", loc.display())),
    })
}

/// What identifies the committed state of an index: in a folder, each table's version folder
/// (a commit adds a manifest there) and the metadata file (a rebuild replaces it), by inode
/// and modification time; on object storage, the listing of the version manifests and the
/// metadata object's ETag. Equal stamps mean no ingest committed in between.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stamp {
    Local(Vec<Option<(u64, i64, i64)>>),
    Remote(Vec<String>),
}

impl Store {
    /// The index's [`Stamp`] now (three `stat` calls, or three requests).
    pub fn stamp(loc: &Location) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        let dir = match loc {
            Location::Local(dir) => dir,
            Location::Remote(r) => {
                // No runtime, no listing: the open that follows reports why.
                let names =
                    block_on(async { Ok(Location::remote_stamp(r, &[CHUNKS, FILES]).await) });
                return Stamp::Remote(names.unwrap_or_default());
            }
        };
        let paths = [
            dir.join(META),
            dir.join(format!("{CHUNKS}.lance/_versions")),
            dir.join(format!("{FILES}.lance/_versions")),
        ];
        Stamp::Local(
            paths
                .iter()
                .map(|p| {
                    let m = std::fs::metadata(p).ok()?;
                    Some((m.ino(), m.mtime(), m.mtime_nsec()))
                })
                .collect(),
        )
    }

    /// Whether `loc` holds an index.
    pub fn exists(loc: &Location) -> Result<bool> {
        match loc {
            Location::Local(dir) => Ok(dir.join(META).is_file()),
            Location::Remote(_) => Ok(block_on(loc.read(META))?.is_some()),
        }
    }

    /// Opens an existing index for reading and writing.
    pub fn open(loc: &Location) -> Result<Store> {
        let dir = loc.display();
        let Some(text) = block_on(loc.read(META))? else {
            return Err(ExitError::no_index(format!(
                "no index at {dir}; run `rag ingest DIR` first"
            )));
        };
        let meta: IndexMeta = serde_json::from_str(&text).map_err(|e| {
            ExitError::incompatible(format!(
                "{dir}/{META} is unreadable ({e}); rebuild the index with `rag ingest --rebuild DIR`"
            ))
        })?;
        if meta.layout != LAYOUT_VERSION {
            return Err(ExitError::incompatible(format!(
                "the index at {dir} has layout {} but this rag writes layout {LAYOUT_VERSION}; rebuild it with `rag ingest --rebuild DIR`",
                meta.layout
            )));
        }
        block_on(Store::open_tables(loc, meta))
    }

    /// Connects and opens the tables of an index whose `index.json` was read.
    async fn open_tables(loc: &Location, meta: IndexMeta) -> Result<Store> {
        let dir = loc.display();
        let db = connect(loc).await?;
        let damaged = |e: lancedb::Error| {
            ExitError::incompatible(format!(
                "the index at {dir} is damaged ({e}); rebuild it with `rag ingest --rebuild DIR`"
            ))
        };
        let chunks = db.open_table(CHUNKS).execute().await.map_err(damaged)?;
        let files = db.open_table(FILES).execute().await.map_err(damaged)?;
        let ann = vector_index(&chunks).await?;
        Ok(Store {
            db,
            chunks,
            files,
            meta,
            loc: loc.clone(),
            ann,
            search: VectorSearch::default(),
        })
    }

    /// Opens the index, creating it if missing. An index made with another model or other
    /// chunk settings is an error that names the difference.
    pub fn open_or_create(loc: &Location, meta: IndexMeta) -> Result<Store> {
        if Store::exists(loc)? {
            let store = Store::open(loc)?;
            store.check(&meta)?;
            return Ok(store);
        }
        if let Location::Local(dir) = loc {
            create_private_dir(dir)?;
        }
        block_on(Store::create(loc, meta))
    }

    /// Makes the empty tables, then `index.json`.
    async fn create(loc: &Location, meta: IndexMeta) -> Result<Store> {
        let db = connect(loc).await?;
        let names = db.table_names().execute().await?;
        // Tables left by an ingest killed before index.json was written are recreated.
        for name in [CHUNKS, FILES] {
            if names.iter().any(|n| n == name) {
                db.drop_table(name, &[]).await?;
            }
        }
        let chunks = db
            .create_empty_table(CHUNKS, chunk_schema(meta.embed.dim))
            .execute()
            .await?;
        // The full-text index exists from the start, so an ingest killed before its end
        // leaves an index whose text search works (rows not yet indexed are scanned).
        chunks
            .create_index(&[SEARCH_TEXT], Index::FTS(FtsIndexBuilder::default()))
            .execute()
            .await?;
        let files = db
            .create_empty_table(FILES, file_schema())
            .execute()
            .await?;
        // index.json last: its presence says the tables are complete.
        loc.write(META, &serde_json::to_vec_pretty(&meta)?).await?;
        Ok(Store {
            db,
            chunks,
            files,
            meta,
            loc: loc.clone(),
            ann: None,
            search: VectorSearch::default(),
        })
    }

    /// Fails unless the index was made with `want`'s model and chunk settings.
    pub fn check(&self, want: &IndexMeta) -> Result<()> {
        let have = &self.meta;
        let mut diffs = Vec::new();
        if let Some(d) = embed_diff(&have.embed, &want.embed) {
            diffs.push(d);
        }
        if have.chunk != want.chunk {
            diffs.push(format!(
                "chunk settings {:?} vs {:?}",
                have.chunk, want.chunk
            ));
        }
        if diffs.is_empty() {
            return Ok(());
        }
        Err(ExitError::incompatible(format!(
            "the index was built with other settings ({}); rebuild it with `rag ingest --rebuild DIR` or restore the old settings",
            diffs.join("; ")
        )))
    }

    /// Records `root` as the project root of the index (index.json rewritten atomically and
    /// durably, so a crash leaves the old or the new one).
    pub fn set_root(&mut self, root: &Path) -> Result<()> {
        self.meta.root = root.to_path_buf();
        let bytes = serde_json::to_vec_pretty(&self.meta)?;
        block_on(self.loc.write(META, &bytes))
    }

    /// Checks only the embedding model and how it was used (what search needs).
    pub fn check_model(&self, model: &ModelInfo) -> Result<()> {
        let Some(what) = embed_diff(&self.meta.embed, model) else {
            return Ok(());
        };
        Err(ExitError::incompatible(format!(
            "the index was built with {what}: its vectors and the question's would not compare; restore the setting or rebuild with `rag ingest --rebuild DIR`"
        )))
    }

    pub fn file_states(&self) -> Result<HashMap<String, FileState>> {
        let batches = fetch(self.files.query())?;
        let mut out = HashMap::new();
        for b in &batches {
            let path = column(b, "files", "path")?.as_string::<i32>();
            let hash = column(b, "files", "hash")?.as_string::<i32>();
            let size = column(b, "files", "size")?.as_primitive::<UInt64Type>();
            let mtime = column(b, "files", "mtime_ns")?.as_primitive::<Int64Type>();
            let chunks = column(b, "files", "chunks")?.as_primitive::<UInt32Type>();
            for i in 0..b.num_rows() {
                let s = FileState {
                    path: path.value(i).to_string(),
                    hash: hash.value(i).to_string(),
                    size: size.value(i),
                    mtime_ns: mtime.value(i),
                    chunks: chunks.value(i),
                };
                out.insert(s.path.clone(), s);
            }
        }
        Ok(out)
    }

    /// Replaces everything stored for `files` with `rows`. For files that had a record
    /// (`recorded`: changed files) the chunks change in one commit, a `merge_insert` that adds
    /// the new chunks and deletes the old ones of those paths, so a kill at any moment leaves
    /// the old or the new version of each file, never neither. Before it, their records are
    /// forgotten, and after it the files are recorded again: a crash in between leaves a file
    /// without a record, so the next ingest indexes it again whatever its content is then
    /// (keeping the old record was not enough: a file reverted to its old content matched it
    /// and kept the new version's chunks). New files take a delete-by-path (leftovers of a
    /// killed run) and an add. Chunk ids are content hashes, so nothing is ever duplicated.
    pub fn replace_files(
        &self,
        files: &[FileState],
        recorded: &[&str],
        rows: &[Row<'_>],
    ) -> Result<()> {
        if files.is_empty() {
            return Ok(());
        }
        block_on(async {
            for group in recorded.chunks(500) {
                self.files.delete(path_in(group).as_str()).await?;
                fault_point();
            }
            let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
            if !recorded.is_empty() && !rows.is_empty() && paths.len() <= 500 {
                let mut merge = self.chunks.merge_insert(&["id"]);
                merge
                    .when_matched_update_all(None)
                    .when_not_matched_insert_all()
                    .when_not_matched_by_source_delete(Some(path_in(&paths)));
                merge.execute(reader(self.chunk_batch(rows)?)).await?;
                fault_point();
            } else {
                for group in paths.chunks(500) {
                    self.chunks.delete(path_in(group).as_str()).await?;
                    fault_point();
                }
                if !rows.is_empty() {
                    self.chunks.add(self.chunk_batch(rows)?).execute().await?;
                    fault_point();
                }
            }
            let mut merge = self.files.merge_insert(&["path"]);
            merge
                .when_matched_update_all(None)
                .when_not_matched_insert_all();
            merge.execute(reader(file_batch(files)?)).await?;
            fault_point();
            Ok(())
        })
    }

    /// Forgets files: their chunks first, then their records.
    pub fn remove_files(&self, paths: &[&str]) -> Result<u64> {
        block_on(async {
            let mut deleted = 0;
            for group in paths.chunks(500) {
                deleted += self
                    .chunks
                    .delete(path_in(group).as_str())
                    .await?
                    .num_deleted_rows;
                fault_point();
                self.files.delete(path_in(group).as_str()).await?;
                fault_point();
            }
            Ok(deleted)
        })
    }

    fn chunk_batch(&self, rows: &[Row<'_>]) -> Result<RecordBatch> {
        let dim = self.meta.embed.dim;
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

    /// Keeps the index small. Every ingest adds versions (a few commits per batch), each
    /// keeping the data it replaced, and small files: without a cleanup an index edited and
    /// ingested 30 times grew 15-fold. So versions older than `keep` are deleted with their
    /// files after every ingest (cheap), and a table is compacted when it has more than
    /// `SMALL_FRAGMENTS` small files or a tenth of its rows are deleted ones (rewriting).
    /// Runs under the ingest lock; a reader holding a version younger than `keep` is safe.
    /// Returns whether anything was compacted.
    pub fn cleanup(&self, keep: std::time::Duration) -> Result<bool> {
        block_on(async {
            use lancedb::table::optimize::{CompactionOptions, Duration};
            const SMALL_FRAGMENTS: usize = 8;
            let mut compacted = false;
            for table in [&self.chunks, &self.files] {
                let stats = table.stats().await?;
                let deleted = stats.num_deleted_rows.unwrap_or(0);
                if stats.fragment_stats.num_small_fragments > SMALL_FRAGMENTS
                    || deleted * 10 > stats.num_rows.max(1)
                {
                    table
                        .optimize(OptimizeAction::Compact {
                            options: CompactionOptions::default(),
                            remap_options: None,
                        })
                        .await?;
                    compacted = true;
                }
                table
                    .optimize(OptimizeAction::Prune {
                        older_than: Duration::from_std(keep).ok(),
                        delete_unverified: Some(true),
                        error_if_tagged_old_versions: Some(false),
                    })
                    .await?;
            }
            Ok(compacted)
        })
    }

    /// Table versions of the chunks and files tables (for `rag status` and the tests).
    pub fn version_count(&self) -> Result<usize> {
        block_on(async {
            Ok(self.chunks.list_versions().await?.len() + self.files.list_versions().await?.len())
        })
    }

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

    /// The paths of the files with a chunk that `scope` (a filter as `retrieve::filter`
    /// writes it) admits, sorted.
    pub fn paths_within(&self, scope: &str) -> Result<Vec<String>> {
        let batches = fetch(
            self.chunks
                .query()
                .only_if(scope)
                .select(Select::columns(&["path"])),
        )?;
        let mut paths = std::collections::BTreeSet::new();
        for b in &batches {
            let col = column(b, "chunks", "path")?.as_string::<i32>();
            paths.extend(col.iter().flatten().map(String::from));
        }
        Ok(paths.into_iter().collect())
    }

    /// The chunks stored for `path` that `scope` admits (all of them without one), in line
    /// order, with their vectors.
    pub fn chunks_of(&self, path: &str, scope: Option<&str>) -> Result<Vec<StoredChunk>> {
        let only = match scope {
            Some(s) => format!("path = {} AND ({s})", sql_str(path)),
            None => format!("path = {}", sql_str(path)),
        };
        let batches = fetch(self.chunks.query().only_if(only).select(Select::columns(&[
            "heading",
            "line_start",
            "line_end",
            "text",
            "vector",
        ])))?;
        let mut out = Vec::new();
        for b in &batches {
            let col = |name: &str| column(b, "chunks", name);
            let heading = col("heading")?.as_string::<i32>();
            let ls = col("line_start")?.as_primitive::<UInt32Type>();
            let le = col("line_end")?.as_primitive::<UInt32Type>();
            let text = col("text")?.as_string::<i32>();
            let vectors = col("vector")?.as_fixed_size_list();
            for i in 0..b.num_rows() {
                let v = vectors.value(i);
                out.push(StoredChunk {
                    heading: heading.value(i).to_string(),
                    line_start: ls.value(i),
                    line_end: le.value(i),
                    text: text.value(i).to_string(),
                    vector: v.as_primitive::<Float32Type>().values().to_vec(),
                });
            }
        }
        out.sort_by_key(|c| (c.line_start, c.line_end));
        Ok(out)
    }

    /// Every chunk id, sorted (for consistency checks).
    pub fn chunk_ids(&self) -> Result<Vec<String>> {
        let batches = fetch(self.chunks.query().select(Select::columns(&["id"])))?;
        let mut ids: Vec<String> = batches
            .iter()
            .filter_map(|b| {
                b.column_by_name("id").map(|c| {
                    c.as_string::<i32>()
                        .iter()
                        .flatten()
                        .map(String::from)
                        .collect::<Vec<_>>()
                })
            })
            .flatten()
            .collect();
        ids.sort();
        Ok(ids)
    }

    pub fn stats(&self) -> Result<Stats> {
        block_on(async {
            Ok(Stats {
                chunks: self.chunks.count_rows(None).await?,
                files: self.files.count_rows(None).await?,
            })
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
            .select(Select::columns(&[
                "id",
                "path",
                "heading",
                "line_start",
                "line_end",
                "text",
                "_distance",
            ]));
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
            .select(Select::columns(&[
                "id",
                "path",
                "heading",
                "line_start",
                "line_end",
                "text",
                "_score",
            ]));
        if let Some(f) = filter {
            q = q.only_if(f);
        }
        let batches = fetch(q)?;
        hits(&batches, "_score", |s| s)
    }
}

/// The name rag gives the chunks table's vector index.
const VECTOR_INDEX: &str = "vector_idx";

/// The type of the vector index on `table`, if it has one.
async fn vector_index(table: &Table) -> Result<Option<String>> {
    Ok(table
        .list_indices()
        .await?
        .into_iter()
        .find(|i| i.columns.iter().any(|c| c == "vector"))
        .map(|i| i.index_type.to_string()))
}

/// Every batch a query returns.
fn fetch(q: impl ExecutableQuery) -> Result<Vec<RecordBatch>> {
    block_on(async { Ok(q.execute().await?.try_collect().await?) })
}

/// A column of a query result, or an error naming it.
fn column<'a>(b: &'a RecordBatch, table: &str, name: &str) -> Result<&'a arrow_array::ArrayRef> {
    b.column_by_name(name)
        .with_context(|| format!("{table}.{name} missing from a query result"))
}

fn hits(batches: &[RecordBatch], score_col: &str, score: impl Fn(f32) -> f32) -> Result<Vec<Hit>> {
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

/// The sorted chunk ids of the index at `dir` (tests, tools).
pub fn chunk_ids_blocking(dir: &Path) -> Result<Vec<String>> {
    Store::open(&Location::Local(dir.to_path_buf()))?.chunk_ids()
}

/// Fault injection for the crash tests: with `RAG_TEST_CRASH_AT=N`, the process aborts
/// right after its Nth commit to a table, as a power cut or `kill -9` would stop it there.
fn fault_point() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static COMMITS: AtomicUsize = AtomicUsize::new(0);
    let n = COMMITS.fetch_add(1, Ordering::SeqCst) + 1;
    let at = std::env::var("RAG_TEST_CRASH_AT")
        .ok()
        .and_then(|v| v.parse::<usize>().ok());
    if at == Some(n) {
        std::process::abort();
    }
}

/// Creates the index folder (and missing parents) readable by its owner only: it holds a
/// copy of the documents, which may be private. An existing folder keeps its mode.
pub fn create_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating the index folder {}", dir.display()))
}

/// The project root recorded in the index at `loc`, read leniently (any layout, even one
/// this rag cannot open), so the check works before a `--rebuild` too.
pub fn recorded_root(loc: &Location) -> Option<PathBuf> {
    let text = block_on(loc.read(META)).ok()??;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get("root")?.as_str().map(PathBuf::from)
}

/// How the vectors of `built` and `now` differ, in the terms of the settings, or `None`.
fn embed_diff(built: &ModelInfo, now: &ModelInfo) -> Option<String> {
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

#[cfg(test)]
mod tests {
    //! The store on its own, against a temporary local table with 4-dimensional vectors: the
    //! writes an ingest makes (replace, remove), both searches, and the checks that keep
    //! vectors of different models apart.
    use super::*;

    fn meta() -> IndexMeta {
        IndexMeta::new(
            ModelInfo {
                name: "test-model".into(),
                dim: 4,
                file_hash: "abc".into(),
                pooling: "mean".into(),
                passage_prefix: String::new(),
            },
            ChunkMeta {
                max_tokens: 200,
                min_tokens: 120,
                overlap_tokens: 0,
            },
            PathBuf::from("/project"),
        )
    }

    fn state(path: &str, hash: &str, chunks: u32) -> FileState {
        FileState {
            path: path.into(),
            hash: hash.into(),
            size: 10,
            mtime_ns: 1,
            chunks,
        }
    }

    fn row<'a>(id: &'a str, path: &'a str, text: &'a str, vector: &'a [f32]) -> Row<'a> {
        Row {
            id,
            path,
            heading: "Guide",
            line_start: 1,
            line_end: 2,
            text,
            file_hash: "h",
            vector,
        }
    }

    fn open() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let loc = Location::Local(dir.path().join(".rag"));
        let store = Store::open_or_create(&loc, meta()).unwrap();
        (dir, store)
    }

    #[test]
    fn files_written_replaced_and_removed_keep_one_copy_of_each_chunk() {
        let (_dir, s) = open();
        let (x, y) = ([1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]);
        s.replace_files(
            &[state("a.md", "h1", 2), state("b.md", "h2", 1)],
            &[],
            &[
                row("a1", "a.md", "otters hold hands", &x),
                row("a2", "a.md", "otters sleep", &x),
                row("b1", "b.md", "kestrel valve pressure", &y),
            ],
        )
        .unwrap();
        assert_eq!(s.chunk_ids().unwrap(), vec!["a1", "a2", "b1"]);
        let states = s.file_states().unwrap();
        assert_eq!(states["a.md"], state("a.md", "h1", 2));
        // A changed file: its old chunks go, the new ones come, the other file stays.
        s.replace_files(
            &[state("a.md", "h3", 1)],
            &["a.md"],
            &[row("a3", "a.md", "otters float", &x)],
        )
        .unwrap();
        assert_eq!(s.chunk_ids().unwrap(), vec!["a3", "b1"]);
        assert_eq!(s.file_states().unwrap()["a.md"].hash, "h3");
        assert_eq!(s.remove_files(&["b.md"]).unwrap(), 1);
        assert_eq!(s.chunk_ids().unwrap(), vec!["a3"]);
        assert!(!s.file_states().unwrap().contains_key("b.md"));
        let st = s.stats().unwrap();
        assert_eq!((st.chunks, st.files), (1, 1));
    }

    #[test]
    fn vector_and_text_search_rank_and_filter() {
        let (_dir, s) = open();
        let v = |a: f32, b: f32| [a, b, 0.0, 0.0];
        let (near, mid, far) = (v(1.0, 0.1), v(0.6, 0.8), v(0.0, 1.0));
        s.replace_files(
            &[state("a.md", "h1", 2), state("b.md", "h2", 1)],
            &[],
            &[
                row("near", "a.md", "the relief valve opens at 8 bar", &near),
                row("mid", "a.md", "bread dough rises overnight", &mid),
                row("far", "b.md", "lighthouse first lit in 1871", &far),
            ],
        )
        .unwrap();
        let hits = s.vector_search(&[1.0, 0.0, 0.0, 0.0], 3, None).unwrap();
        let ids: Vec<&str> = hits.iter().map(|h| h.id.as_str()).collect();
        assert_eq!(ids, ["near", "mid", "far"]);
        assert!(
            hits[0].score > 0.99 && hits[2].score.abs() < 1e-6,
            "{hits:?}"
        );
        let only_b = s
            .vector_search(&[1.0, 0.0, 0.0, 0.0], 3, Some("path = 'b.md'"))
            .unwrap();
        assert_eq!(only_b.len(), 1);
        assert_eq!(only_b[0].path, "b.md");
        s.refresh_text_index().unwrap();
        let text = s.text_search("lighthouse", 5, None).unwrap();
        assert_eq!(text.len(), 1);
        assert_eq!((text[0].id.as_str(), text[0].line_start), ("far", 1));
        assert_eq!(s.paths_within("path = 'a.md'").unwrap(), vec!["a.md"]);
        let chunks = s.chunks_of("a.md", None).unwrap();
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0].vector.len(), 4);
    }

    #[test]
    fn an_index_refuses_other_models_and_chunk_settings_and_reopens_as_written() {
        let (dir, s) = open();
        let loc = Location::Local(dir.path().join(".rag"));
        assert!(Store::exists(&loc).unwrap());
        assert_eq!(s.check(&meta()).ok(), Some(()));
        let mut other = meta();
        other.embed.name = "other-model".into();
        let e = s.check(&other).unwrap_err();
        assert!(format!("{e:#}").contains("--rebuild"), "{e:#}");
        assert!(s.check_model(&other.embed).is_err());
        let mut chunked = meta();
        chunked.chunk.max_tokens = 100;
        assert!(s.check(&chunked).is_err());
        drop(s);
        let again = Store::open(&loc).unwrap();
        assert_eq!(again.meta, meta());
        let none = Location::Local(dir.path().join("nothing"));
        let e = Store::open(&none).err().expect("no index there");
        assert!(format!("{e:#}").contains("rag ingest"), "{e:#}");
    }
}

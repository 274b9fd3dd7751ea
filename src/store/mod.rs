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
mod schema;
mod search;

pub use lease::Lease;
pub use location::{storage_error, Location, Remote};

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Int64Type, UInt32Type, UInt64Type};
use lancedb::index::scalar::FtsIndexBuilder;
use lancedb::index::Index;
use lancedb::query::{QueryBase, Select};
use lancedb::table::OptimizeAction;
use lancedb::{Connection, Table};

use crate::embed::ModelInfo;
use crate::exit::ExitError;
use runtime::block_on;
use schema::{
    chunk_batch, chunk_schema, column, embed_diff, fetch, file_batch, file_schema, path_in, reader,
    sql_str, CHUNKS, FILES, LAYOUT_VERSION, META, SEARCH_TEXT,
};
pub use schema::{ChunkMeta, FileState, Hit, IndexMeta, Row, Stats, StoredChunk};
use search::vector_index;
pub use search::{AnnPolicy, VectorSearch};

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
                merge
                    .execute(reader(chunk_batch(self.meta.embed.dim, rows)?))
                    .await?;
                fault_point();
            } else {
                for group in paths.chunks(500) {
                    self.chunks.delete(path_in(group).as_str()).await?;
                    fault_point();
                }
                if !rows.is_empty() {
                    self.chunks
                        .add(chunk_batch(self.meta.embed.dim, rows)?)
                        .execute()
                        .await?;
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

#[cfg(test)]
mod tests;

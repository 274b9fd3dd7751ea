//! Writing a planned run: removals, then new and changed files parsed (in the isolated
//! worker), chunked, embedded and committed in bounded batches, then the text and ANN indexes
//! and the cleanup. Renamed or copied files reuse their stored chunks and vectors.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};

use super::chunk::{self, ChunkOptions, HEADING_BUDGET};
use super::plan::Todo;
use super::target::Target;
use super::{chunk_meta, failed, isolate, FileError, OnProgress, Progress, Report};
use crate::config::Settings;
use crate::embed::Embedder;
use crate::store::{AnnPolicy, FileState, IndexMeta, Row, Store, StoredChunk};

/// Chunks embedded and written per commit: bounds memory and the work an interruption loses.
const COMMIT_CHUNKS: usize = 64;

/// What a run writes: the index as it was (if kept), its file records, the files to index
/// and the paths to forget.
pub(super) struct Work {
    pub(super) existing: Option<Store>,
    pub(super) states: HashMap<String, FileState>,
    pub(super) todo: Vec<Todo>,
    pub(super) removed: Vec<String>,
    pub(super) root: PathBuf,
}

/// Loads the embedder, opens the index and writes `work`: removals, then new and changed
/// files in bounded commits, then the text and ANN indexes and the cleanup.
pub(super) fn apply(
    settings: &Settings,
    t: &Target,
    work: Work,
    failed: &mut failed::Failed,
    report: &mut Report,
    on: OnProgress<'_>,
) -> Result<()> {
    let mut embedder = Embedder::load(&settings.embed)?;
    let meta = IndexMeta::new(
        embedder.info.clone(),
        chunk_meta(&settings.chunk),
        work.root,
    );
    let mut store = open_store(work.existing, t, meta, settings)?;
    let reuse = reusable(&work.todo, &work.states, &store)?;
    if !work.removed.is_empty() {
        let removed: Vec<&str> = work.removed.iter().map(String::as_str).collect();
        t.still_locked()?;
        report.chunks_deleted += store.remove_files(&removed)?;
    }
    let mut w = Writer {
        target: t,
        store: &store,
        embedder: &mut embedder,
        failed,
        report,
    };
    w.index(work.todo, reuse, &work.states, settings, on)?;
    failed.save()?;
    if report.chunks_written > 0 || report.chunks_deleted > 0 || report.files_removed > 0 {
        t.still_locked()?;
        tidy(&mut store, &settings.index, on)?;
    }
    Ok(())
}

/// The index to write: the existing one (checked against this run's model and settings, and
/// moved to `root` if the project moved), or a new one. A remote `--rebuild` starts by
/// deleting the old tables (there is no folder to build beside them and swap in).
fn open_store(
    existing: Option<Store>,
    t: &Target,
    meta: IndexMeta,
    settings: &Settings,
) -> Result<Store> {
    if let Some(mut s) = existing {
        s.check(&meta)?;
        if s.meta.root != meta.root && !t.loc.is_remote() {
            // A moved project, or --change-root: the index now belongs here.
            s.set_root(&meta.root)?;
        }
        return Ok(s);
    }
    if t.target.is_remote() && Store::exists(&t.target)? {
        t.target.clear_remote()?;
        let cache = settings.index.state_dir().join("prompt-cache");
        if cache.exists() {
            std::fs::remove_dir_all(&cache)
                .with_context(|| format!("removing {}", cache.display()))?;
        }
    }
    Store::open_or_create(&t.target, meta)
}

/// After a run that wrote: the full-text index catches up, then old versions are cleaned
/// up (`index.cleanup`); compaction rewrites rows, so the text index catches up again.
fn tidy(store: &mut Store, s: &crate::config::IndexSettings, on: OnProgress<'_>) -> Result<()> {
    on(Progress::Step("updating the full-text index"));
    store.refresh_text_index()?;
    on(Progress::Done);
    let policy = AnnPolicy {
        min_rows: s.ann_min_rows,
        kind: s.ann_type,
    };
    on(Progress::Step("updating the ANN vector index"));
    let started = Instant::now();
    // The rows are committed either way: a failed build costs search speed, not data.
    match store.update_ann(policy) {
        Ok(true) => {
            tracing::info!(kind = ?s.ann_type, ms = started.elapsed().as_millis() as u64, "ANN index built")
        }
        Ok(false) => {}
        Err(e) => on(Progress::Warning(&format!(
            "the ANN vector index was not built ({e:#}); searches scan every vector until the next ingest builds it (index.ann_type, index.ann_min_rows)"
        ))),
    }
    on(Progress::Done);
    if s.cleanup {
        let keep = std::time::Duration::from_secs(s.keep_versions_s);
        on(Progress::Step("cleaning up old versions"));
        if store.cleanup(keep)? {
            store.refresh_text_index()?;
        }
        on(Progress::Done);
    }
    Ok(())
}

/// Files whose content is already stored under another path (renames, copies) take the
/// stored chunks and vectors instead of being embedded again. Fetched before removals,
/// since a rename's old path is among them.
fn reusable(
    todo: &[Todo],
    states: &HashMap<String, FileState>,
    store: &Store,
) -> Result<HashMap<String, Vec<StoredChunk>>> {
    let by_hash: HashMap<&str, &str> = states
        .values()
        .map(|s| (s.hash.as_str(), s.path.as_str()))
        .collect();
    let mut reuse = HashMap::new();
    for t in todo {
        if let Some(src) = by_hash
            .get(t.hash.as_str())
            .filter(|src| **src != t.file.rel)
        {
            let rows = store.chunks_of(src, None)?;
            if !rows.is_empty() {
                reuse.insert(t.file.rel.clone(), rows);
            }
        }
    }
    Ok(reuse)
}

/// What the indexing loop writes to.
struct Writer<'a> {
    target: &'a Target,
    store: &'a Store,
    embedder: &'a mut Embedder,
    failed: &'a mut failed::Failed,
    report: &'a mut Report,
}

impl Writer<'_> {
    /// Parses, chunks, embeds and commits `todo` in bounded batches.
    fn index(
        &mut self,
        todo: Vec<Todo>,
        mut reuse: HashMap<String, Vec<StoredChunk>>,
        states: &HashMap<String, FileState>,
        settings: &Settings,
        on: OnProgress<'_>,
    ) -> Result<()> {
        let old_chunks: HashMap<&str, u32> = states
            .values()
            .map(|s| (s.path.as_str(), s.chunks))
            .collect();
        let chunk_opts = chunk_options(settings, self.embedder);
        let mut parser = isolate::Parser::new(isolate::Limits {
            timeout: std::time::Duration::from_secs_f64(settings.chunk.parse_timeout_s),
            memory_mb: settings.chunk.parse_memory_mb,
            max_bytes: settings.chunk.max_file_bytes,
        })?;
        let total = todo.len() as u64;
        let mut tok_per_s = None;
        let mut pending: Vec<Pending> = Vec::new();
        for (i, t) in todo.into_iter().enumerate() {
            on(Progress::Embedding {
                done: i as u64,
                total,
                tok_per_s,
            });
            let next = match reuse.remove(&t.file.rel) {
                Some(rows) => reused(&t, rows),
                None => match prepare(&t, &mut parser, self.embedder, chunk_opts, on) {
                    Ok(p) => p,
                    Err(error) => {
                        self.failed.record(&t.file.rel, &t.hash, &error);
                        self.failed.save()?;
                        self.report.files_failed.push(FileError {
                            path: t.file.rel.clone(),
                            error,
                        });
                        continue;
                    }
                },
            };
            self.failed.forget(&t.file.rel);
            if next.vectors.is_some() {
                self.report.chunks_reused += next.chunks.len();
            }
            pending.push(next);
            if pending.iter().map(|p| p.chunks.len()).sum::<usize>() >= COMMIT_CHUNKS {
                self.flush(&mut pending, &old_chunks)?;
                let secs = (self.report.embed_ms as f64 / 1e3).max(1e-9);
                tok_per_s = Some(self.report.embed_tokens as f64 / secs);
            }
        }
        if !pending.is_empty() {
            self.flush(&mut pending, &old_chunks)?;
        }
        on(Progress::Done);
        Ok(())
    }

    /// Commits the pending files and adds what it did to the report.
    fn flush(&mut self, pending: &mut Vec<Pending>, old_chunks: &HashMap<&str, u32>) -> Result<()> {
        // Embedding took a while: a lock lost meanwhile stops the ingest before it writes.
        let c = commit(self.store, self.embedder, pending, old_chunks, self.target)?;
        let r = &mut *self.report;
        r.embed_tokens += c.tokens;
        r.embed_padding_tokens += c.padding.0;
        r.embed_padding_tokens_unsorted += c.padding.1;
        r.chunks_written += c.written;
        r.chunks_deleted += c.replaced;
        r.embed_ms += c.embed_ms;
        Ok(())
    }
}

/// The chunk settings capped so the embedder never silently truncates a chunk.
fn chunk_options(settings: &Settings, embedder: &Embedder) -> ChunkOptions {
    let chunk_opts = ChunkOptions {
        max_tokens: settings.chunk.max_tokens.min(
            embedder
                .max_length
                .saturating_sub(2 + embedder.prefix_tokens()),
        ),
        min_tokens: settings.chunk.min_tokens,
        overlap_tokens: settings.chunk.overlap_tokens,
    };
    debug_assert!(chunk_opts.max_tokens > HEADING_BUDGET);
    chunk_opts
}

/// A file ready to be written: its record, its chunks, and their vectors when they were
/// reused rather than embedded.
struct Pending {
    state: FileState,
    chunks: Vec<chunk::Chunk>,
    vectors: Option<Vec<Vec<f32>>>,
}

/// A file whose content is stored under another path: its chunks and vectors, re-keyed
/// to the new path.
fn reused(t: &Todo, rows: Vec<StoredChunk>) -> Pending {
    let chunks: Vec<chunk::Chunk> = rows
        .iter()
        .map(|r| chunk::Chunk {
            id: chunk::chunk_id(&t.file.rel, &r.heading, &r.text),
            path: t.file.rel.clone(),
            heading: r.heading.clone(),
            line_start: r.line_start,
            line_end: r.line_end,
            text: r.text.clone(),
        })
        .collect();
    Pending {
        state: file_state(t, t.hash.clone(), chunks.len()),
        chunks,
        vectors: Some(rows.into_iter().map(|r| r.vector).collect()),
    }
}

/// Reads and parses a file (in the parse worker) and chunks it; the error is the reason it
/// is reported as failed.
fn prepare(
    t: &Todo,
    parser: &mut isolate::Parser,
    embedder: &Embedder,
    opts: ChunkOptions,
    on: OnProgress<'_>,
) -> std::result::Result<Pending, String> {
    // The worker hashes the bytes it parsed: the record must describe what was indexed.
    let isolate::Parsed { doc, hash } = parser.parse(&t.file.rel, &t.file.abs)?;
    for w in &doc.warnings {
        on(Progress::Warning(&format!("{}: {w}", t.file.rel)));
    }
    // The splitter may panic on text its tokenizer cannot handle: one bad file, not a crash.
    let chunks = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        chunk::chunk(&doc, embedder.tokenizer(), opts)
    }))
    .map_err(|_| "the chunker failed on this file".to_string())?;
    Ok(Pending {
        state: file_state(t, hash, chunks.len()),
        chunks,
        vectors: None,
    })
}

fn file_state(t: &Todo, hash: String, chunks: usize) -> FileState {
    FileState {
        path: t.file.rel.clone(),
        hash,
        size: t.file.size,
        mtime_ns: t.file.mtime_ns,
        chunks: chunks as u32,
    }
}

/// What one commit of pending files did.
struct Committed {
    /// Chunks written.
    written: usize,
    /// Chunks replaced.
    replaced: u64,
    /// Embedder tokens.
    tokens: usize,
    /// Milliseconds spent embedding.
    embed_ms: u64,
    /// Pad tokens in length-sorted batches, and in file order.
    padding: (usize, usize),
}

/// Embeds what needs it and writes the pending files.
fn commit(
    store: &Store,
    embedder: &mut Embedder,
    pending: &mut Vec<Pending>,
    old_chunks: &HashMap<&str, u32>,
    target: &Target,
) -> Result<Committed> {
    let texts: Vec<String> = pending
        .iter()
        .filter(|p| p.vectors.is_none())
        .flat_map(|p| p.chunks.iter().map(chunk::Chunk::embed_text))
        .collect();
    let lens: Vec<usize> = texts.iter().map(|t| embedder.count_tokens(t)).collect();
    let tokens = lens.iter().sum();
    let bs = embedder.batch_size();
    let padding = (
        crate::embed::padding(&lens, &crate::embed::batch_order(&texts), bs),
        crate::embed::padding(&lens, &(0..lens.len()).collect::<Vec<_>>(), bs),
    );
    let started = Instant::now();
    let embedded = embedder.embed(&texts)?;
    let embed_ms = started.elapsed().as_millis() as u64;
    let rows = rows_of(pending, &embedded);
    let files: Vec<FileState> = pending.iter().map(|p| p.state.clone()).collect();
    let recorded: Vec<&str> = files
        .iter()
        .map(|f| f.path.as_str())
        .filter(|p| old_chunks.contains_key(p))
        .collect();
    target.still_locked()?;
    store.replace_files(&files, &recorded, &rows)?;
    let replaced = files
        .iter()
        .map(|f| u64::from(old_chunks.get(f.path.as_str()).copied().unwrap_or(0)))
        .sum();
    let written = rows.len();
    pending.clear();
    Ok(Committed {
        written,
        replaced,
        tokens,
        embed_ms,
        padding,
    })
}

/// The pending files' rows, reused vectors kept and fresh ones taken in embedding order.
fn rows_of<'a>(pending: &'a [Pending], embedded: &'a [Vec<f32>]) -> Vec<Row<'a>> {
    let mut fresh = embedded.iter();
    let mut rows = Vec::new();
    for p in pending {
        for (j, c) in p.chunks.iter().enumerate() {
            let vector = match &p.vectors {
                Some(v) => v.get(j).map(Vec::as_slice),
                None => fresh.next().map(Vec::as_slice),
            };
            rows.push(Row {
                id: &c.id,
                path: &c.path,
                heading: &c.heading,
                line_start: c.line_start,
                line_end: c.line_end,
                text: &c.text,
                file_hash: &p.state.hash,
                vector: vector.unwrap_or(&[]),
            });
        }
    }
    rows
}

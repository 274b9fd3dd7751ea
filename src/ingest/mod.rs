//! The ingest pipeline: walk → plan (added, changed, unchanged, removed) → parse → chunk →
//! embed → store, in bounded batches so memory does not grow with the corpus and an
//! interrupted run loses at most the batch in flight. One bad file is reported and counted,
//! never fatal.

pub mod chunk;
pub mod failed;
pub mod isolate;
pub mod parse;
pub mod rebuild;
pub mod walk;
pub mod watch;

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::config::Settings;
use crate::embed::Embedder;
use crate::exit::ExitError;
use crate::store::{AnnPolicy, ChunkMeta, FileState, IndexMeta, Lease, Location, Row, Store};
use crate::ui::Ui;
use chunk::{ChunkOptions, HEADING_BUDGET};
use walk::SourceFile;

/// Chunks embedded and written per commit: bounds memory and the work an interruption loses.
const COMMIT_CHUNKS: usize = 64;

#[derive(Debug, Clone)]
pub struct IngestOptions {
    pub rebuild: bool,
    pub dry_run: bool,
    pub prune: bool,
    /// Parse files that failed before even when their content has not changed.
    pub retry_failed: bool,
    /// Remove more than half of the indexed files if that is what the walk says.
    pub prune_all: bool,
    /// Make this project the index's root although the index was made for another one.
    pub change_root: bool,
    /// Listed files that no longer exist (`--files-from`): removed from the index.
    pub gone: Vec<PathBuf>,
}

/// `--files-from FILE|-`: the listed paths (plus any given as arguments) that exist, and
/// those that do not, which the ingest removes from the index.
pub fn files_from(list: &Path, extra: &[PathBuf]) -> Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    let text = if list == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading the file list on stdin")?
    } else {
        std::fs::read_to_string(list).map_err(|e| {
            ExitError::usage(format!(
                "cannot read the file list {} ({e}); give a file with one path per line, or - for stdin",
                list.display()
            ))
        })?
    };
    let listed = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(PathBuf::from)
        .chain(extra.iter().cloned());
    Ok(listed.partition(|p| p.symlink_metadata().is_ok()))
}

/// The files to consider: the walk of `inputs`, plus listed files that are gone (each a
/// scope of its own, so pruning removes exactly it), minus the settings file.
fn walk_inputs(
    settings: &Settings,
    root: &Path,
    inputs: &[PathBuf],
    opts: &IngestOptions,
    filter: &walk::Filter,
) -> Result<walk::Walked> {
    let mut walked = walk::walk(root, inputs, settings.chunk.max_file_bytes, filter)?;
    // A listed file that is gone is a scope of its own: pruning removes exactly it.
    walked
        .scopes
        .extend(opts.gone.iter().filter_map(|g| gone_relative(root, g)));
    // The settings file is not a document: `rag init && rag ingest .` must not index it.
    if let Some(config) = settings
        .file
        .as_ref()
        .and_then(|f| std::fs::canonicalize(f).ok())
    {
        walked.files.retain(|f| f.abs != config);
    }
    Ok(walked)
}

/// A path that no longer exists, relative to the root: its nearest existing folder,
/// canonicalised, plus the rest, so `docs/gone.md` of a deleted folder still names it.
fn gone_relative(root: &Path, path: &Path) -> Option<String> {
    let abs = std::env::current_dir().ok()?.join(path);
    let base = abs.ancestors().find(|a| a.exists())?;
    let rest = abs.strip_prefix(base).ok()?;
    let canonical = std::fs::canonicalize(base).ok()?.join(rest);
    canonical
        .starts_with(root)
        .then(|| walk::relative(root, &canonical))
}

#[derive(Debug, Default, Serialize)]
pub struct FileError {
    pub path: String,
    pub error: String,
}

/// The `--json` report (field names are part of the CLI contract).
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub files_seen: usize,
    pub files_added: usize,
    pub files_changed: usize,
    pub files_unchanged: usize,
    pub files_removed: usize,
    /// Files that failed in this run (exit 7).
    pub files_failed: Vec<FileError>,
    /// Files that failed in an earlier run and have not changed since: not parsed again
    /// (`--retry-failed`), reported, and not a reason for exit 7.
    pub files_failed_before: Vec<FileError>,
    /// Files left out by policy: symbolic links, files over `chunk.max_file_bytes`,
    /// unsupported types named on the command line.
    pub files_skipped: Vec<FileError>,
    pub chunks_written: usize,
    /// Of those, chunks copied with their vectors from a stored file with identical content
    /// (a rename or a copy), not embedded again.
    pub chunks_reused: usize,
    pub chunks_deleted: u64,
    pub elapsed_ms: u64,
    /// Embedder tokens (special tokens included) and the time spent embedding them.
    pub embed_tokens: usize,
    pub embed_ms: u64,
    /// Padding tokens the length-sorted batches added, and what batches in file order would
    /// have added: the saving of sorting, measured on this run's texts.
    pub embed_padding_tokens: usize,
    pub embed_padding_tokens_unsorted: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<Plan>,
}

/// What an ingest would do, by path.
#[derive(Debug, Default, Serialize)]
pub struct Plan {
    pub added: Vec<String>,
    pub changed: Vec<String>,
    pub removed: Vec<String>,
    pub unchanged: usize,
}

/// A file that needs (re)indexing. Its bytes are read again when it is processed, so the
/// plan holds no file contents: memory stays bounded by the commit size, not the corpus.
struct Todo {
    file: SourceFile,
    hash: String,
}

/// Holds the index's ingest lock for the life of the value. The OS drops an flock with its
/// process, so a lock left by a killed ingest is free again: no stale-lock heuristics needed.
struct IngestLock {
    _file: File,
}

fn lock(dir: &Path) -> Result<IngestLock> {
    crate::store::create_private_dir(dir)?;
    let path = dir.join("ingest.lock");
    // O_NOFOLLOW: a cloned repository can ship `.rag/ingest.lock` as a symlink to a file of
    // the user's, which the pid written below would overwrite.
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => ExitError::usage(format!(
                "{} is a symbolic link; rag does not write a lock through a link: remove it (`rm {}`) and run again",
                path.display(),
                path.display()
            )),
            _ => anyhow::Error::new(e).context(format!("opening {}", path.display())),
        })?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            return Err(ExitError::usage(format!(
                "another `rag ingest` is writing the index at {} (pid {}); wait for it to finish",
                dir.display(),
                holder.trim()
            )));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).context(format!("locking {}", path.display()))
        }
    }
    file.set_len(0)?;
    write!(file, "{}", std::process::id())?;
    Ok(IngestLock { _file: file })
}

/// Where an ingest writes, and the locks that make it the only writer.
struct Target {
    /// The index as it is (`index.dir`).
    loc: Location,
    /// Where this run writes it: the same place, or for a `--rebuild` of a folder a new
    /// folder beside it that is swapped in at the end. A remote index is rebuilt in place.
    target: Location,
    /// The local folder for failure records (the new one, in a folder rebuild).
    records: PathBuf,
    _lock: Option<IngestLock>,
    lease: Option<Lease>,
}

impl Target {
    /// Fails when a remote index's lock was lost to another machine: nothing more may be
    /// written (a folder's flock cannot be lost).
    fn still_locked(&self) -> Result<()> {
        self.lease.as_ref().map_or(Ok(()), Lease::check)
    }
}

fn target(settings: &Settings, opts: &IngestOptions, ui: &Ui) -> Result<Target> {
    let loc = Location::of(&settings.index)?;
    let state = settings.index.state_dir();
    let lock = if opts.dry_run {
        None
    } else {
        Some(lock(&state)?)
    };
    // A remote index is shared by machines: its lock is an object beside the tables.
    let lease = match (&loc, opts.dry_run) {
        (Location::Remote(r), false) => Some(Lease::acquire(r, &|m: &str| ui.warn(m))?),
        _ => None,
    };
    let (target, records) = match (&loc, opts.rebuild) {
        (Location::Local(dir), rebuild) => {
            if !opts.dry_run {
                rebuild::recover(dir)?;
            }
            let t = if rebuild {
                rebuild::next_dir(dir)
            } else {
                dir.clone()
            };
            (Location::Local(t.clone()), t)
        }
        (Location::Remote(_), _) => (loc.clone(), state),
    };
    Ok(Target {
        loc,
        target,
        records,
        _lock: lock,
        lease,
    })
}

pub fn run(
    settings: &Settings,
    inputs: &[PathBuf],
    opts: &IngestOptions,
    ui: &Ui,
) -> Result<Report> {
    let started = Instant::now();
    let t = target(settings, opts, ui)?;
    let root = std::fs::canonicalize(&settings.root).unwrap_or_else(|_| settings.root.clone());
    // An index in a bucket is shared by design: each machine's checkout is its root.
    if !t.loc.is_remote() {
        check_root(&t.loc, &root, opts.change_root)?;
    }

    let filter = walk::Filter::new(&settings.chunk.include, &settings.chunk.exclude)?;
    let walked = walk_inputs(settings, &root, inputs, opts, &filter)?;
    let mut report = walk_report(&walked);
    let mut failed = failed::Failed::load(&t.records);
    let existing = if !opts.rebuild && Store::exists(&t.loc)? {
        Some(Store::open(&t.loc)?)
    } else {
        None
    };
    let states = match &existing {
        Some(s) => s.file_states()?,
        None => HashMap::new(),
    };

    let (todo, plan, seen) = make_plan(
        &walked,
        settings.chunk.max_file_bytes,
        &states,
        &failed,
        opts,
        &mut report,
    );
    count_plan(&mut report, &plan);
    if opts.dry_run {
        report.elapsed_ms = started.elapsed().as_millis() as u64;
        report.dry_run = Some(plan);
        return Ok(report);
    }
    guard_prune(&plan.removed, states.len(), opts)?;
    // Records of files that are gone from the walked folders go with them.
    failed.retain(|p| seen.contains(p) || !walk::in_scope(p, &walked.scopes));
    if opts.rebuild {
        // Always written, so a rebuild never keeps the old index's records.
        failed.touch();
    }

    let work = Work {
        existing,
        states,
        todo,
        removed: plan.removed,
        root,
    };
    apply(settings, &t, work, &mut failed, &mut report, ui)?;
    if let (true, Location::Local(dir)) = (opts.rebuild, &t.loc) {
        rebuild::finish(dir)?;
    }
    report.elapsed_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

/// What a run writes: the index as it was (if kept), its file records, the files to index
/// and the paths to forget.
struct Work {
    existing: Option<Store>,
    states: HashMap<String, FileState>,
    todo: Vec<Todo>,
    removed: Vec<String>,
    root: PathBuf,
}

/// Loads the embedder, opens the index and writes `work`: removals, then new and changed
/// files in bounded commits, then the text and ANN indexes and the cleanup.
fn apply(
    settings: &Settings,
    t: &Target,
    work: Work,
    failed: &mut failed::Failed,
    report: &mut Report,
    ui: &Ui,
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
    w.index(work.todo, reuse, &work.states, settings, ui)?;
    failed.save()?;
    if report.chunks_written > 0 || report.chunks_deleted > 0 || report.files_removed > 0 {
        t.still_locked()?;
        tidy(&mut store, &settings.index, ui)?;
    }
    Ok(())
}

/// The report's start: what the walk saw, skipped and could not read.
fn walk_report(walked: &walk::Walked) -> Report {
    let errors = |list: &[(String, String)]| -> Vec<FileError> {
        list.iter()
            .map(|(path, error)| FileError {
                path: path.clone(),
                error: error.clone(),
            })
            .collect()
    };
    Report {
        files_seen: walked.files.len(),
        files_skipped: errors(&walked.skipped),
        files_failed: errors(&walked.failed),
        ..Report::default()
    }
}

fn count_plan(report: &mut Report, plan: &Plan) {
    report.files_added = plan.added.len();
    report.files_changed = plan.changed.len();
    report.files_unchanged = plan.unchanged;
    report.files_removed = plan.removed.len();
    tracing::info!(
        seen = report.files_seen,
        add = plan.added.len(),
        change = plan.changed.len(),
        remove = plan.removed.len(),
        unchanged = plan.unchanged,
        "ingest plan"
    );
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
fn tidy(store: &mut Store, s: &crate::config::IndexSettings, ui: &Ui) -> Result<()> {
    let spin = ui.spinner("updating the full-text index");
    store.refresh_text_index()?;
    spin.finish_and_clear();
    let policy = AnnPolicy {
        min_rows: s.ann_min_rows,
        kind: s.ann_type,
    };
    let spin = ui.spinner("updating the ANN vector index");
    let started = Instant::now();
    // The rows are committed either way: a failed build costs search speed, not data.
    match store.update_ann(policy) {
        Ok(true) => {
            tracing::info!(kind = ?s.ann_type, ms = started.elapsed().as_millis() as u64, "ANN index built")
        }
        Ok(false) => {}
        Err(e) => ui.warn(&format!(
            "the ANN vector index was not built ({e:#}); searches scan every vector until the next ingest builds it (index.ann_type, index.ann_min_rows)"
        )),
    }
    spin.finish_and_clear();
    if s.cleanup {
        let keep = std::time::Duration::from_secs(s.keep_versions_s);
        let spin = ui.spinner("cleaning up old versions");
        if store.cleanup(keep)? {
            store.refresh_text_index()?;
        }
        spin.finish_and_clear();
    }
    Ok(())
}

/// Refuses (exit 2) an ingest into an index that belongs to another project root that
/// still exists: its paths would mix with this project's, and pruning would remove the
/// other project's files. A root that is gone is a moved project (paths are relative, so
/// the index still fits); `--change-root` says the new root is meant.
fn check_root(loc: &Location, root: &Path, change_root: bool) -> Result<()> {
    let Some(recorded) = crate::store::recorded_root(loc) else {
        return Ok(());
    };
    let same = std::fs::canonicalize(&recorded).is_ok_and(|r| r == root) || recorded == root;
    if same || change_root || !recorded.is_dir() {
        return Ok(());
    }
    Err(ExitError::usage(format!(
        "the index at {} belongs to the project at {}, not {}: an ingest from here would mix the two and prune the other project's files. Run rag from {}, give this project its own index (--index DIR or index.dir), or pass --change-root to make {} the index's project",
        loc.display(),
        recorded.display(),
        root.display(),
        recorded.display(),
        root.display()
    )))
}

/// Share of the indexed files one run may remove without `--prune-all`.
const PRUNE_LIMIT: f64 = 0.5;

/// Refuses a run that would remove more than half of the indexed files (a mistyped folder,
/// a half-mounted disk): pruning by mistake loses the index's copy of the documents.
fn guard_prune(removed: &[String], indexed: usize, opts: &IngestOptions) -> Result<()> {
    if opts.prune_all || removed.len() < 2 || (removed.len() as f64) <= PRUNE_LIMIT * indexed as f64
    {
        return Ok(());
    }
    let shown: Vec<&str> = removed.iter().take(10).map(String::as_str).collect();
    let more = removed.len().saturating_sub(shown.len());
    Err(ExitError::usage(format!(
        "this ingest would remove {} of the {indexed} indexed files, which are gone from the walked folders ({}{}); if that is right, run it again with --prune-all; --no-prune keeps them, --dry-run shows the whole plan",
        removed.len(),
        shown.join(", "),
        if more > 0 { format!(", and {more} more") } else { String::new() }
    )))
}

/// Plans the run: which walked files need (re)indexing, which stored files are gone.
/// Size and mtime equal to the record means unchanged without reading the file; otherwise
/// the content hash decides. Returns the work, the plan and every walked path.
fn make_plan(
    walked: &walk::Walked,
    max_bytes: u64,
    states: &HashMap<String, FileState>,
    failed: &failed::Failed,
    opts: &IngestOptions,
    report: &mut Report,
) -> (Vec<Todo>, Plan, std::collections::HashSet<String>) {
    let mut todo = Vec::new();
    let mut plan = Plan::default();
    let mut seen = std::collections::HashSet::new();
    for file in &walked.files {
        seen.insert(file.rel.clone());
        let old = states.get(&file.rel);
        if old.is_some_and(|o| o.size == file.size && o.mtime_ns == file.mtime_ns) {
            plan.unchanged += 1;
            continue;
        }
        let hash = match walk::read_file(&file.abs, max_bytes) {
            Ok(bytes) => parse::content_hash(&bytes),
            Err(e) => {
                report.files_failed.push(FileError {
                    path: file.rel.clone(),
                    error: format!("unreadable: {e}"),
                });
                continue;
            }
        };
        if let Some(f) = failed
            .known(&file.rel, &hash)
            .filter(|_| !opts.retry_failed)
        {
            report.files_failed_before.push(FileError {
                path: file.rel.clone(),
                error: f.error.clone(),
            });
            continue;
        }
        let file = file.clone();
        match old {
            Some(o) if o.hash == hash => plan.unchanged += 1,
            Some(_) => {
                plan.changed.push(file.rel.clone());
                todo.push(Todo { file, hash });
            }
            None => {
                plan.added.push(file.rel.clone());
                todo.push(Todo { file, hash });
            }
        }
    }
    if opts.prune {
        plan.removed = prunable(states.keys(), &seen, &walked.scopes, &walked.unreadable);
    }
    (todo, plan, seen)
}

/// Stored paths to remove: inside a walked scope, not seen, and not under a folder the walk
/// could not read (its files' absence proves nothing).
fn prunable<'a>(
    stored: impl Iterator<Item = &'a String>,
    seen: &std::collections::HashSet<String>,
    scopes: &[String],
    unreadable: &[String],
) -> Vec<String> {
    let mut out: Vec<String> = stored
        .filter(|p| {
            !seen.contains(*p) && walk::in_scope(p, scopes) && !walk::in_scope(p, unreadable)
        })
        .cloned()
        .collect();
    out.sort();
    out
}

/// Files whose content is already stored under another path (renames, copies) take the
/// stored chunks and vectors instead of being embedded again. Fetched before removals,
/// since a rename's old path is among them.
fn reusable(
    todo: &[Todo],
    states: &HashMap<String, FileState>,
    store: &Store,
) -> Result<HashMap<String, Vec<crate::store::StoredChunk>>> {
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
        mut reuse: HashMap<String, Vec<crate::store::StoredChunk>>,
        states: &HashMap<String, FileState>,
        settings: &Settings,
        ui: &Ui,
    ) -> Result<()> {
        let old_chunks: HashMap<&str, u32> = states
            .values()
            .map(|s| (s.path.as_str(), s.chunks))
            .collect();
        let chunk_opts = ChunkOptions {
            max_tokens: settings.chunk.max_tokens.min(
                self.embedder
                    .max_length
                    .saturating_sub(2 + self.embedder.prefix_tokens()),
            ),
            min_tokens: settings.chunk.min_tokens,
            overlap_tokens: settings.chunk.overlap_tokens,
        };
        debug_assert!(chunk_opts.max_tokens > HEADING_BUDGET);
        let mut parser = isolate::Parser::new(isolate::Limits {
            timeout: std::time::Duration::from_secs_f64(settings.chunk.parse_timeout_s),
            memory_mb: settings.chunk.parse_memory_mb,
            max_bytes: settings.chunk.max_file_bytes,
        })?;
        let bar = ui.progress(todo.len() as u64, "embedding");
        let mut pending: Vec<Pending> = Vec::new();
        for (i, t) in todo.into_iter().enumerate() {
            bar.set_position(i as u64);
            let next = match reuse.remove(&t.file.rel) {
                Some(rows) => reused(&t, rows),
                None => match prepare(&t, &mut parser, self.embedder, chunk_opts, ui) {
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
                bar.set_message(format!(
                    "{:.0} tok/s",
                    self.report.embed_tokens as f64 / secs
                ));
            }
        }
        if !pending.is_empty() {
            self.flush(&mut pending, &old_chunks)?;
        }
        bar.finish_and_clear();
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

/// A file ready to be written: its record, its chunks, and their vectors when they were
/// reused rather than embedded.
struct Pending {
    state: FileState,
    chunks: Vec<chunk::Chunk>,
    vectors: Option<Vec<Vec<f32>>>,
}

/// A file whose content is stored under another path: its chunks and vectors, re-keyed
/// to the new path.
fn reused(t: &Todo, rows: Vec<crate::store::StoredChunk>) -> Pending {
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
    ui: &Ui,
) -> std::result::Result<Pending, String> {
    // The worker hashes the bytes it parsed: the record must describe what was indexed.
    let isolate::Parsed { doc, hash } = parser.parse(&t.file.rel, &t.file.abs)?;
    for w in &doc.warnings {
        ui.warn(&format!("{}: {w}", t.file.rel));
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
    let mut fresh = embedded.iter();
    let mut rows = Vec::new();
    for p in pending.iter() {
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

/// The chunk settings an index records: other values make its chunks incomparable.
pub fn chunk_meta(s: &crate::config::ChunkSettings) -> ChunkMeta {
    ChunkMeta {
        max_tokens: s.max_tokens,
        min_tokens: s.min_tokens,
        overlap_tokens: s.overlap_tokens,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_ingest_lock_is_not_written_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("bashrc");
        std::fs::write(&victim, "keep me").unwrap();
        let index = dir.path().join(".rag");
        std::fs::create_dir(&index).unwrap();
        std::os::unix::fs::symlink(&victim, index.join("ingest.lock")).unwrap();
        let err = super::lock(&index)
            .err()
            .expect("a symlinked lock is refused");
        assert!(format!("{err:#}").contains("symbolic link"), "{err:#}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
        std::fs::remove_file(index.join("ingest.lock")).unwrap();
        assert!(super::lock(&index).is_ok());
    }

    use super::*;

    fn opts(prune_all: bool) -> IngestOptions {
        IngestOptions {
            rebuild: false,
            dry_run: false,
            prune: true,
            retry_failed: false,
            prune_all,
            change_root: false,
            gone: vec![],
        }
    }

    #[test]
    fn pruning_skips_unreadable_folders_and_stops_at_half_the_index() {
        let stored: Vec<String> = ["docs/a.md", "docs/b.md", "docs/locked/c.md", "other/d.md"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let seen = std::collections::HashSet::from(["docs/a.md".to_string()]);
        let scopes = vec!["docs".to_string()];
        let gone = prunable(stored.iter(), &seen, &scopes, &["docs/locked".into()]);
        assert_eq!(
            gone,
            vec!["docs/b.md"],
            "out of scope and unreadable folders stay"
        );
        let gone = prunable(stored.iter(), &seen, &scopes, &[]);
        assert_eq!(gone, vec!["docs/b.md", "docs/locked/c.md"]);

        let three: Vec<String> = vec!["a".into(), "b".into(), "c".into()];
        assert!(
            guard_prune(&three[..2], 4, &opts(false)).is_ok(),
            "half is allowed"
        );
        let e = guard_prune(&three, 4, &opts(false)).unwrap_err();
        assert_eq!(crate::exit::exit_code_of(&e), crate::exit::Exit::Usage);
        let msg = format!("{e:#}");
        assert!(
            msg.contains("3 of the 4") && msg.contains("a, b, c") && msg.contains("--prune-all"),
            "{msg}"
        );
        assert!(guard_prune(&three, 4, &opts(true)).is_ok());
        assert!(
            guard_prune(&three[..1], 1, &opts(false)).is_ok(),
            "a lone file may go"
        );
    }
}

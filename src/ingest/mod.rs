//! The ingest pipeline: walk → plan (added, changed, unchanged, removed) → parse → chunk →
//! embed → store, in bounded batches so memory does not grow with the corpus and an
//! interrupted run loses at most the batch in flight. One bad file is reported and counted,
//! never fatal. `plan.rs` decides what changes, `target.rs` makes this run the only writer,
//! `write.rs` writes.

pub mod chunk;
pub mod failed;
#[cfg(test)]
pub(crate) mod fuzz;
pub mod isolate;
pub mod parse;
mod plan;
pub mod rebuild;
mod target;
pub mod walk;
pub mod watch;
mod write;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use serde::Serialize;

use crate::config::Settings;
use crate::store::{ChunkMeta, FileState, Location, Store};
use plan::{count_plan, guard_prune, make_plan, walk_inputs, walk_report};
pub use plan::{files_from, Plan};
use target::{check_root, target};
use write::{apply, Work};

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

/// What an ingest shows a person while it runs; the [`Report`] comes at the end.
pub enum Progress<'a> {
    /// A problem that did not stop the run: a parser's note on one file, an ANN index that
    /// could not be built, a remote index's lock taken over.
    Warning(&'a str),
    /// A note for a person, hidden by `-q` (what `--watch` is doing).
    Note(&'a str),
    /// Files parsed, embedded and written so far, of `total`, and the embedder's speed
    /// once a batch has been embedded.
    Embedding {
        done: u64,
        total: u64,
        tok_per_s: Option<f64>,
    },
    /// A step after the writes starts (the text index, the ANN index, the cleanup).
    Step(&'a str),
    /// The embedding, or the step in progress, ended.
    Done,
}

/// Where an ingest's progress goes: the front end decides how it is shown.
pub type OnProgress<'o> = &'o mut dyn FnMut(Progress);

/// Indexes `inputs` (files or folders) into the index the settings name; `on` sees the
/// progress.
pub fn run(
    settings: &Settings,
    inputs: &[PathBuf],
    opts: &IngestOptions,
    on: OnProgress<'_>,
) -> Result<Report> {
    let started = Instant::now();
    let t = target(settings, opts, on)?;
    let root = std::fs::canonicalize(&settings.root).unwrap_or_else(|_| settings.root.clone());
    // An index in a bucket is shared by design: each machine's checkout is its root.
    if !t.loc.is_remote() {
        check_root(&t.loc, &root, opts.change_root)?;
    }

    let filter = walk::Filter::new(&settings.chunk.include, &settings.chunk.exclude)?;
    let walked = walk_inputs(settings, &root, inputs, opts, &filter)?;
    let mut report = walk_report(&walked);
    let mut failed = failed::Failed::load(&t.records);
    let (existing, states) = open_existing(&t.loc, opts.rebuild)?;

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
    apply(settings, &t, work, &mut failed, &mut report, on)?;
    if let (true, Location::Local(dir)) = (opts.rebuild, &t.loc) {
        rebuild::finish(dir)?;
    }
    report.elapsed_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

/// The index as it is and its file records, for the plan to compare the walk against.
fn open_existing(
    loc: &Location,
    rebuild: bool,
) -> Result<(Option<Store>, HashMap<String, FileState>)> {
    let existing = if !rebuild && Store::exists(loc)? {
        Some(Store::open(loc)?)
    } else {
        None
    };
    let states = match &existing {
        Some(s) => s.file_states()?,
        None => HashMap::new(),
    };
    Ok((existing, states))
}

/// The chunk settings an index records: other values make its chunks incomparable.
pub fn chunk_meta(s: &crate::config::ChunkSettings) -> ChunkMeta {
    ChunkMeta {
        max_tokens: s.max_tokens,
        min_tokens: s.min_tokens,
        overlap_tokens: s.overlap_tokens,
    }
}

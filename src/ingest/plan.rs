//! The plan of a run: which walked files are added, changed or unchanged (size and mtime,
//! then the content hash), which indexed files are gone, and the guard against pruning
//! most of the index by mistake.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use super::walk::{self, SourceFile};
use super::{failed, parse, FileError, IngestOptions, Report};
use crate::config::Settings;
use crate::exit::ExitError;
use crate::store::FileState;

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
pub(super) fn walk_inputs(
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
pub(super) struct Todo {
    pub(super) file: SourceFile,
    pub(super) hash: String,
}

/// The report's start: what the walk saw, skipped and could not read.
pub(super) fn walk_report(walked: &walk::Walked) -> Report {
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

pub(super) fn count_plan(report: &mut Report, plan: &Plan) {
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

/// Share of the indexed files one run may remove without `--prune-all`.
const PRUNE_LIMIT: f64 = 0.5;

/// Refuses a run that would remove more than half of the indexed files (a mistyped folder,
/// a half-mounted disk): pruning by mistake loses the index's copy of the documents.
pub(super) fn guard_prune(removed: &[String], indexed: usize, opts: &IngestOptions) -> Result<()> {
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
pub(super) fn make_plan(
    walked: &walk::Walked,
    max_bytes: u64,
    states: &HashMap<String, FileState>,
    failed: &failed::Failed,
    opts: &IngestOptions,
    report: &mut Report,
) -> (Vec<Todo>, Plan, HashSet<String>) {
    let mut todo = Vec::new();
    let mut plan = Plan::default();
    let mut seen = HashSet::new();
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
    seen: &HashSet<String>,
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

#[cfg(test)]
mod tests {
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

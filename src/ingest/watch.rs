//! `rag ingest --watch`: keeps the index current as files change. Every folder of the
//! inputs (as the walk sees them: .gitignore, .ragignore, hidden files) is watched with
//! inotify; a burst of changes is debounced into one batch, and each batch is an ordinary
//! incremental ingest, so it gets the same crash-safe commits, filters and pruning. Files
//! whose size and mtime did not change cost a stat, so a batch of unrelated events is cheap.
//!
//! inotify is the `notify` crate's own Linux backend, used directly: `notify` turns on
//! default features of mio, which would rebuild tokio and everything above it (LanceDB,
//! DataFusion); rag already relies on Linux for its parse-worker limits and `syncfs`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use inotify::{Inotify, WatchMask};

use super::{IngestOptions, OnProgress, Progress, Report};
use crate::config::Settings;

/// Quiet time after the last event before a batch runs: an editor's save or a `git
/// checkout` arrives as a burst of events.
const DEBOUNCE: Duration = Duration::from_millis(400);
const POLL: Duration = Duration::from_millis(100);

fn mask() -> WatchMask {
    WatchMask::CLOSE_WRITE
        | WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
}

/// The folders to watch: every folder the walk would enter, and the folder of each file
/// input; never the index folder (its writes would trigger batches of their own).
fn folders(inputs: &[PathBuf], index: &Path) -> Vec<PathBuf> {
    let index = std::fs::canonicalize(index).unwrap_or_else(|_| index.to_path_buf());
    let mut out = Vec::new();
    for input in inputs {
        let Ok(abs) = std::fs::canonicalize(input) else {
            continue;
        };
        if abs.is_file() {
            out.extend(abs.parent().map(Path::to_path_buf));
            continue;
        }
        for entry in super::walk::builder(&abs).build().flatten() {
            if entry.file_type().is_some_and(|t| t.is_dir()) && !entry.path().starts_with(&index) {
                out.push(entry.into_path());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Watches every folder (again: new ones appear, removed ones go). A full watch table names
/// the kernel setting to raise.
fn watch_all(inotify: &mut Inotify, dirs: &[PathBuf]) -> Result<()> {
    for dir in dirs {
        match inotify.watches().add(dir, mask()) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                return Err(anyhow::anyhow!(
                    "cannot watch {}: the system's inotify watch limit is reached; raise it \
                     (`sudo sysctl fs.inotify.max_user_watches=524288`) or watch fewer folders",
                    dir.display()
                ))
            }
            // A folder removed since the walk: nothing to watch.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("watching {}", dir.display())),
        }
    }
    Ok(())
}

/// Whether an event names something a user edits, not an editor's swap or backup file.
fn relevant(name: Option<&std::ffi::OsStr>) -> bool {
    let Some(name) = name.and_then(|n| n.to_str()) else {
        return true; // an event on the watched folder itself
    };
    !(name.starts_with('.') || name.ends_with('~') || name.ends_with(".swp"))
}

/// Runs one ingest now, then one per batch of changes until `stop` is set (Ctrl-C, checked
/// between batches, so a batch always finishes its commits). Each batch that changed the
/// index is handed to `on_batch`; a failed batch is reported and the watch goes on.
pub fn run(
    settings: &Settings,
    inputs: &[PathBuf],
    opts: &IngestOptions,
    on: OnProgress<'_>,
    on_batch: &mut dyn FnMut(&Report) -> Result<()>,
) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    // The first Ctrl-C stops after the current batch; a second one exits at once (the
    // commits are crash-safe either way).
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 130, stop.clone())
            .context("installing the Ctrl-C handler")?;
        signal_hook::flag::register(sig, stop.clone()).context("installing the Ctrl-C handler")?;
    }
    let mut inotify = Inotify::init().context("starting inotify")?;
    watch_all(&mut inotify, &folders(inputs, &settings.index.dir))?;
    on_batch(&super::run(settings, inputs, opts, on)?)?;
    on(Progress::Note("watching for changes; Ctrl-C stops"));
    let mut buffer = vec![0u8; 64 * 1024];
    let mut pending: Option<Instant> = None;
    while !stop.load(Ordering::Relaxed) {
        match inotify.read_events(&mut buffer) {
            Ok(events) => {
                if events.into_iter().any(|e| relevant(e.name)) {
                    pending = Some(Instant::now());
                }
                continue; // drain the queue before sleeping
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e).context("reading inotify events"),
        }
        match pending {
            Some(last) if last.elapsed() >= DEBOUNCE => {
                pending = None;
                match super::run(settings, inputs, opts, on) {
                    Ok(report) if changed(&report) => on_batch(&report)?,
                    Ok(_) => {}
                    Err(e) => on(Progress::Warning(&format!(
                        "this batch failed ({e:#}); still watching"
                    ))),
                }
                watch_all(&mut inotify, &folders(inputs, &settings.index.dir))?;
            }
            _ => std::thread::sleep(POLL),
        }
    }
    on(Progress::Note(
        "stopped watching; the index is current up to the last batch",
    ));
    Ok(())
}

fn changed(r: &Report) -> bool {
    r.files_added + r.files_changed + r.files_removed > 0 || !r.files_failed.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn editor_droppings_do_not_start_a_batch() {
        for name in [".notes.md.swp", "notes.md~", ".#notes.md", "x.swp"] {
            assert!(!relevant(Some(std::ffi::OsStr::new(name))), "{name}");
        }
        assert!(relevant(Some(std::ffi::OsStr::new("notes.md"))));
        assert!(relevant(None));
    }

    #[test]
    fn the_index_folder_and_ignored_folders_are_not_watched() {
        let dir = tempfile::tempdir().unwrap();
        for d in ["docs/a", "index", "build"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        std::fs::write(dir.path().join(".gitignore"), "build/\n").unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let got = folders(std::slice::from_ref(&root), &root.join("index"));
        assert_eq!(
            got,
            vec![root.clone(), root.join("docs"), root.join("docs/a")]
        );
    }
}

//! `rag ingest`: index files or folders (incremental, crash-safe), once or `--watch`ing;
//! `--dry-run`/`--check` report what would change without writing.

use anyhow::Result;

use crate::cli::IngestArgs;
use crate::config::Settings;
use crate::exit::Exit;
use crate::ingest::{self, IngestOptions, Progress, Report};
use crate::printer::{self, IngestProgress};
use crate::ui::Ui;

pub fn run(settings: &Settings, a: &IngestArgs, ui: &Ui) -> Result<Exit> {
    let (paths, gone) = match &a.files_from {
        Some(list) => ingest::files_from(list, &a.paths)?,
        None => (a.paths.clone(), vec![]),
    };
    let opts = IngestOptions {
        rebuild: a.rebuild,
        dry_run: a.dry_run || a.check,
        prune: !a.no_prune,
        retry_failed: a.retry_failed,
        prune_all: a.prune_all,
        change_root: a.change_root,
        gone,
    };
    let mut shown = IngestProgress::default();
    let mut on = |p: Progress| shown.event(&p, ui);
    if a.watch {
        let mut print = |r: &Report| printer::ingest(r, a.json).emit(ui);
        ingest::watch::run(settings, &paths, &opts, &mut on, &mut print)?;
        return Ok(Exit::Success);
    }
    let report = ingest::run(settings, &paths, &opts, &mut on)?;
    printer::ingest(&report, a.json).emit(ui)?;
    Ok(exit(&report, a.check))
}

/// Failure when `--check` finds the index stale, PartialIngest when a file failed.
fn exit(report: &Report, check: bool) -> Exit {
    let stale = report
        .dry_run
        .as_ref()
        .is_some_and(|p| !(p.added.is_empty() && p.changed.is_empty() && p.removed.is_empty()));
    if check && stale {
        Exit::Failure
    } else if report.files_failed.is_empty() {
        Exit::Success
    } else {
        Exit::PartialIngest
    }
}

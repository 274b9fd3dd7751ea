//! The checks of the index (opens, matches the embedder, its summary, files that failed),
//! the prompt cache and free disk.

use std::path::Path;

use super::{check, dir_bytes, Check, Status};
use crate::config::Settings;
use crate::embed::Embedder;
use crate::store::{Location, Store};

pub(super) fn index(s: &Settings, embedder: Option<&Embedder>, out: &mut Vec<Check>) {
    let loc = match Location::of(&s.index) {
        Ok(l) => l,
        Err(e) => return out.push(check("index", Status::Fail, format!("{e:#}"))),
    };
    if !Store::exists(&loc).unwrap_or(false) {
        out.push(check(
            "index",
            Status::Fail,
            format!("no index at {}; run `rag ingest DIR`", loc.display()),
        ));
        return;
    }
    let store = match Store::open(&loc) {
        Ok(st) => st,
        Err(e) => {
            out.push(check("index", Status::Fail, format!("{e:#}")));
            return;
        }
    };
    out.push(summary(&loc, &store));
    if let Some(e) = embedder {
        if let Err(err) = store.check_model(&e.info) {
            out.push(check("index model", Status::Fail, format!("{err:#}")));
        }
    }
    let root = std::fs::canonicalize(&s.root).unwrap_or_else(|_| s.root.clone());
    if store.meta.root != root && !loc.is_remote() {
        out.push(check("index root", Status::Warn, format!(
            "the index was made for {}, this project is {}; `rag ingest --change-root DIR` if it now belongs here",
            store.meta.root.display(),
            root.display()
        )));
    }
    out.extend(failed_files(s));
}

/// The index's one-line summary: where it is, its size and how vector search runs, the
/// first things to know when answers look wrong.
fn summary(loc: &Location, store: &Store) -> Check {
    let stats = store.stats().ok();
    let versions = store.version_count().unwrap_or(0);
    check(
        "index",
        Status::Ok,
        format!(
            "{}: {} files, {} chunks, {} table versions{}, vector search: {}",
            loc.display(),
            stats.as_ref().map_or(0, |x| x.files),
            stats.as_ref().map_or(0, |x| x.chunks),
            versions,
            loc.local().map_or(String::new(), |d| format!(
                ", {:.1} MiB",
                dir_bytes(d) as f64 / (1 << 20) as f64
            )),
            store.ann().unwrap_or("exact scan"),
        ),
    )
}

/// A warning naming up to five files the last ingest could not index, so they are not
/// silently missing from answers; nothing when every file went in.
fn failed_files(s: &Settings) -> Option<Check> {
    let failed = crate::ingest::failed::Failed::load(&s.index.state_dir());
    if failed.files.is_empty() {
        return None;
    }
    let names: Vec<&str> = failed.files.keys().take(5).map(String::as_str).collect();
    Some(check(
        "failed files",
        Status::Warn,
        format!(
            "{} could not be indexed ({}); fix them, or `rag ingest --retry-failed DIR`",
            match failed.files.len() {
                1 => "1 file".to_string(),
                n => format!("{n} files"),
            },
            names.join(", ")
        ),
    ))
}

pub(super) fn cache_and_disk(s: &Settings, out: &mut Vec<Check>) {
    let (entries, bytes, damaged) = crate::promptcache::audit(&s.index.state_dir());
    out.push(if damaged == 0 {
        check("prompt cache", Status::Ok, format!("{entries} entries, {:.1} MiB", bytes as f64 / (1 << 20) as f64))
    } else {
        check("prompt cache", Status::Warn, format!(
            "{damaged} of {entries} entries fail their checksum; they are dropped when next chosen, or remove {}",
            s.index.state_dir().join("prompt-cache").display()
        ))
    });
    let probe = s
        .index
        .dir
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("."));
    let free = crate::fetch::free_bytes(probe);
    let gib = free as f64 / (1u64 << 30) as f64;
    out.push(if free < 1 << 30 {
        check(
            "disk",
            Status::Warn,
            format!(
                "{gib:.2} GiB free under {}; an ingest or the prompt cache may run out",
                probe.display()
            ),
        )
    } else {
        check(
            "disk",
            Status::Ok,
            format!("{gib:.1} GiB free under {}", probe.display()),
        )
    });
}

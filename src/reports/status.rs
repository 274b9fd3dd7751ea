//! What `rag status` reports: what the index holds and how stale it is, without loading a model. The
//! staleness figure is a cheap scan: each indexed file's size and mtime against what the
//! index recorded (new files need a walk of the inputs: `rag ingest --check DIR`).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use anyhow::Result;
use serde::Serialize;

use crate::config::Settings;
use crate::exit::ExitError;
use crate::store::{FileState, Location, Store};

#[derive(Debug, Serialize)]
pub struct Generator {
    pub role: &'static str,
    pub path: PathBuf,
    /// None when the file is missing.
    pub bytes: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct Status {
    pub index: PathBuf,
    pub root: PathBuf,
    pub files: usize,
    pub chunks: usize,
    /// The vector index searches go through (`IVF_HNSW_SQ`, …); none = exact scans.
    pub ann_index: Option<String>,
    pub embed_model: String,
    pub embed_dim: usize,
    pub generators: Vec<Generator>,
    /// Seconds since the Unix epoch of the newest table version.
    pub last_ingest_unix: Option<u64>,
    pub disk_bytes: u64,
    pub table_versions: usize,
    pub prompt_cache_entries: usize,
    pub prompt_cache_bytes: u64,
    /// Indexed files whose size or mtime differs from the record.
    pub files_changed: usize,
    /// Indexed files that are gone.
    pub files_missing: usize,
    pub files_failed: usize,
}

/// The newest modification time under the tables' version folders: the last commit.
fn last_commit(dir: &Path) -> Option<u64> {
    ["chunks.lance", "files.lance"]
        .iter()
        .filter_map(|t| std::fs::read_dir(dir.join(t).join("_versions")).ok())
        .flatten()
        .filter_map(|e| e.ok()?.metadata().ok()?.modified().ok())
        .max()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_secs())
}

pub fn collect(s: &Settings) -> Result<Status> {
    let loc = Location::of(&s.index)?;
    if !Store::exists(&loc)? {
        return Err(ExitError::no_index(format!(
            "no index at {}; run `rag ingest DIR` first",
            loc.display()
        )));
    }
    let store = Store::open(&loc)?;
    // What stays on this machine: the index folder itself, or a remote index's local state.
    let dir = &s.index.state_dir();
    let stats = store.stats()?;
    let states = store.file_states()?;
    // Paths are relative to the project root: the one the index records, or for an index on
    // object storage (shared by machines) this checkout's.
    let here = std::fs::canonicalize(&s.root).unwrap_or_else(|_| s.root.clone());
    let root = if loc.is_remote() {
        &here
    } else {
        &store.meta.root
    };
    let (changed, missing) = staleness(root, &states);
    let generators = configured_generators(s);
    let (entries, cache_bytes, _) = crate::promptcache::audit(dir);
    Ok(Status {
        index: s.index.dir.clone(),
        ann_index: store.ann().map(String::from),
        root: root.clone(),
        files: stats.files,
        chunks: stats.chunks,
        embed_model: store.meta.embed.name.clone(),
        embed_dim: store.meta.embed.dim,
        generators,
        last_ingest_unix: last_commit(dir),
        disk_bytes: crate::checks::dir_bytes(dir),
        table_versions: store.version_count()?,
        prompt_cache_entries: entries,
        prompt_cache_bytes: cache_bytes,
        files_changed: changed,
        files_missing: missing,
        files_failed: crate::ingest::failed::Failed::load(dir).files.len(),
    })
}

/// Indexed files whose size or mtime moved since the record, and those gone: a cheap scan
/// of the recorded files only (no walk for new ones), so status stays instant.
fn staleness(root: &Path, states: &HashMap<String, FileState>) -> (usize, usize) {
    let (mut changed, mut missing) = (0, 0);
    for st in states.values() {
        match std::fs::symlink_metadata(root.join(&st.path)) {
            Ok(m) => {
                let mtime = m.mtime() * 1_000_000_000 + m.mtime_nsec();
                if m.len() != st.size || mtime != st.mtime_ns {
                    changed += 1;
                }
            }
            Err(_) => missing += 1,
        }
    }
    (changed, missing)
}

/// Each tier's model as configured: a local file with its size (None when missing), or for a
/// remote backend the server's URL, so status shows what `--model` would use.
fn configured_generators(s: &Settings) -> Vec<Generator> {
    let l = &s.llm;
    crate::config::Tier::ALL
        .into_iter()
        .map(|t| {
            let (backend, path) = s.generator(t);
            (t.name(), backend, path)
        })
        .map(|(role, backend, path)| match backend {
            crate::config::Backend::Local => Generator {
                role,
                path: path.clone(),
                bytes: std::fs::metadata(path).ok().map(|m| m.len()),
            },
            crate::config::Backend::Openai => Generator {
                role,
                path: l.url.clone().into(),
                bytes: None,
            },
        })
        .collect()
}

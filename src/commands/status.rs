//! `rag status`: what the index holds and how stale it is, without loading a model. The
//! staleness figure is a cheap scan: each indexed file's size and mtime against what the
//! index recorded (new files need a walk of the inputs: `rag ingest --check DIR`).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Result;
use serde::Serialize;

use crate::config::Settings;
use crate::exit::{Exit, ExitError};
use crate::store::{FileState, Location, Store};
use crate::ui::Ui;

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
        disk_bytes: super::doctor::dir_bytes(dir),
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

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

fn ago(unix: Option<u64>) -> String {
    let Some(t) = unix else {
        return "unknown".into();
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(t, |d| d.as_secs());
    let s = now.saturating_sub(t);
    match s {
        0..120 => format!("{s} s ago"),
        120..7200 => format!("{} min ago", s / 60),
        7200..172_800 => format!("{} h ago", s / 3600),
        _ => format!("{} days ago", s / 86_400),
    }
}

/// `rag status`: what the index holds and whether it is up to date.
pub fn run(settings: &Settings, json: bool, ui: &Ui) -> Result<Exit> {
    print(ui, &collect(settings)?, json)?;
    Ok(Exit::Success)
}

pub fn print(ui: &Ui, st: &Status, json: bool) -> Result<()> {
    if json {
        return ui.json(st);
    }
    let mut rows = vec![
        ("index", st.index.display().to_string()),
        ("project root", st.root.display().to_string()),
        (
            "files",
            format!("{} ({} failed)", st.files, st.files_failed),
        ),
        (
            "chunks",
            format!(
                "{} (vector search: {})",
                st.chunks,
                st.ann_index.as_deref().unwrap_or("exact scan")
            ),
        ),
        (
            "embedder",
            format!("{} ({} dims)", st.embed_model, st.embed_dim),
        ),
    ];
    rows.extend(st.generators.iter().map(generator_row));
    rows.extend([
        ("last ingest", ago(st.last_ingest_unix)),
        ("on disk", on_disk(st)),
        (
            "prompt cache",
            format!(
                "{} entries, {}",
                st.prompt_cache_entries,
                mib(st.prompt_cache_bytes)
            ),
        ),
    ]);
    rows.push(("freshness", freshness(st)));
    let text: String = rows.iter().map(|(k, v)| format!("{k:<14} {v}\n")).collect();
    Ok(ui.out(&text)?)
}

/// A generator's row: a remote one has no file, so its size reads "server", not "missing".
fn generator_row(g: &Generator) -> (&'static str, String) {
    let remote = g.path.to_string_lossy().starts_with("http");
    let size = g
        .bytes
        .map_or(if remote { "server" } else { "missing" }.into(), mib);
    let label = match g.role {
        "small" => "generator",
        "medium" => "medium model",
        _ => "large model",
    };
    (label, format!("{} ({size})", g.path.display()))
}

/// The index's footprint: a size only for a local folder, which is the only one measured.
fn on_disk(st: &Status) -> String {
    if st.index.to_string_lossy().contains("://") {
        format!("object storage, {} table versions", st.table_versions)
    } else {
        format!(
            "{}, {} table versions",
            mib(st.disk_bytes),
            st.table_versions
        )
    }
}

/// Whether an ingest is due, with the command that brings the index up to date.
fn freshness(st: &Status) -> String {
    if st.files_changed + st.files_missing == 0 {
        "none of the indexed files changed (new files: `rag ingest --check DIR`)".to_string()
    } else {
        format!(
            "{} changed, {} missing since the last ingest; run `rag ingest DIR`",
            st.files_changed, st.files_missing
        )
    }
}

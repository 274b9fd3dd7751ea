//! What `rag doctor`, `rag status` and `rag init` print: a table or notes for people, one JSON
//! object for scripts.

use std::time::{SystemTime, UNIX_EPOCH};

use super::Output;
use crate::checks::{Check, Status as CheckStatus};
use crate::config::init::Init;
use crate::reports::status::{Generator, Status};

/// `rag doctor`: a line a check (`ok`, `warn`, `FAIL`, its name, what it found), or
/// `{"ok", "checks"}`.
pub fn doctor(checks: &[Check], json: bool) -> Output {
    let mut o = Output::default();
    if json {
        let failed = checks.iter().any(|c| c.status == CheckStatus::Fail);
        o.json(&serde_json::json!({ "ok": !failed, "checks": checks }));
        return o;
    }
    for c in checks {
        let tag = match c.status {
            CheckStatus::Ok => "ok  ",
            CheckStatus::Warn => "warn",
            CheckStatus::Fail => "FAIL",
        };
        o.out(&format!("{tag}  {:<18} {}", c.name, c.detail));
    }
    o
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

/// `rag status`: one row a fact, or the report as one JSON object.
pub fn status(st: &Status, json: bool) -> Output {
    let mut o = Output::default();
    if json {
        o.json(st);
        return o;
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
    for (k, v) in &rows {
        o.out(&format!("{k:<14} {v}"));
    }
    o
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

/// `rag init`: what was written and found, and the next commands (notes on stderr; a missing
/// model is a warning, shown first and with `-q`), or the `Init` as one JSON object.
pub fn init(done: &Init, json: bool) -> Output {
    let mut o = Output::default();
    if json {
        o.json(done);
        return o;
    }
    o.info.push(format!("wrote {}", done.config.display()));
    o.info
        .push(format!(".rag/ is in {}", done.gitignore.display()));
    for (key, path) in &done.models {
        o.info.push(format!("{key} = {}", path.display()));
    }
    if !done.missing.is_empty() {
        o.warn.push(format!(
            "no model file found for {}; run `rag models fetch` (models go to ~/.local/share/rag/models, where rag finds them from any folder), or set these keys in rag.toml",
            done.missing.join(", ")
        ));
    }
    o.info
        .push("next:\n  rag ingest .\n  rag ask \"a question about your documents\"".into());
    o
}

/// ` · expanded (24 tok) in 0.9 s · 10 reranked in 3.1 s`: what the generators' help to
/// retrieval cost (`retrieval.expand`, `retrieval.rerank`), or nothing.
pub fn helped(t: &crate::answer::Timings) -> String {
    let mut out = String::new();
    if t.expand_ms > 0.0 {
        out += &format!(
            " · expanded ({} tok) in {:.1} s",
            t.expand_tokens,
            t.expand_ms / 1e3
        );
    }
    if t.reranked > 0 {
        out += &format!(" · {} reranked in {:.1} s", t.reranked, t.rerank_ms / 1e3);
    }
    out
}

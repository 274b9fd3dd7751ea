//! What `rag models fetch`, `remove` and `list` print: a line or a table for people, one JSON
//! object for scripts.

use std::path::Path;

use super::Output;
use crate::fetch::inventory::{Listed, Other};
use crate::fetch::Got;

/// `rag models fetch`: the folder and how each file got there.
pub fn models_fetched(dir: &Path, got: &[(String, Got)], json: bool) -> Output {
    let mut o = Output::default();
    if json {
        let files: Vec<_> = got
            .iter()
            .map(|(name, how)| serde_json::json!({"name": name, "got": how}))
            .collect();
        o.json(&serde_json::json!({"dir": dir, "files": files}));
    } else {
        o.out(&format!(
            "ready: {} model files in {}",
            got.len(),
            dir.display()
        ));
    }
    o
}

/// `rag models fetch hf:…`: where each hub file is, how it got there, and the name that
/// answers with it.
pub fn models_hub_fetched(got: &[(String, crate::fetch::hub::Fetched)], json: bool) -> Output {
    use crate::fetch::hub::Fetched;
    let mut o = Output::default();
    let rows: Vec<_> = got
        .iter()
        .map(|(name, how)| match how {
            Fetched::Present(path) => {
                serde_json::json!({"name": name, "path": path, "got": "present"})
            }
            Fetched::Downloaded {
                path,
                bytes,
                resumed,
            } => serde_json::json!({
                "name": name, "path": path, "got": "fetched", "bytes": bytes, "resumed_at": resumed
            }),
        })
        .collect();
    if json {
        o.json(&serde_json::json!({"files": rows}));
        return o;
    }
    for r in &rows {
        let path = r["path"].as_str().unwrap_or_default();
        let how = match r["got"].as_str() {
            Some("present") => "already there, checksum ok".to_string(),
            _ => format!(
                "fetched, {} MB, checksum ok",
                r["bytes"].as_u64().unwrap_or(0) >> 20
            ),
        };
        o.out(&format!("{path}: {how}"));
        o.info.push(format!(
            "answer with it: rag ask --model {} \"…\"",
            r["name"].as_str().unwrap_or_default()
        ));
    }
    o
}

/// `rag models remove`: the files removed, with their sizes, and what the folder still holds.
pub fn models_removed(dir: &Path, gone: &[(String, u64)], json: bool) -> Output {
    let mut o = Output::default();
    if json {
        let files: Vec<_> = gone
            .iter()
            .map(|(name, bytes)| serde_json::json!({"name": name, "bytes": bytes}))
            .collect();
        o.json(&serde_json::json!({"dir": dir, "removed": files}));
        return o;
    }
    let mb = gone.iter().map(|(_, n)| n).sum::<u64>() >> 20;
    let left = if dir.exists() {
        format!("; {} still holds files rag did not fetch", dir.display())
    } else {
        String::new()
    };
    o.out(&format!(
        "removed {} model files ({mb} MB) from {}{left}",
        gone.len(),
        dir.display()
    ));
    o
}

/// `rag models list`: the catalog's models, the file each setting resolves to, and which
/// folders hold them.
pub fn models_list(
    listed: &[Listed],
    others: &[Other],
    folders: &[std::path::PathBuf],
    json: bool,
) -> Output {
    let mut o = Output::default();
    if json {
        o.json(&serde_json::json!({"folders": folders, "models": listed, "others": others}));
        return o;
    }
    for m in listed {
        let size = if m.bytes >= 1 << 20 {
            format!("{} MB", m.bytes >> 20)
        } else {
            format!("{} KB", m.bytes >> 10)
        };
        o.out(&format!("{:<10} {size:>8}  {}", m.id, m.what));
        for s in &m.settings {
            let at = match (&s.path, s.exists) {
                (Some(p), true) => p.display().to_string(),
                (Some(p), false) => format!("{} (missing: {})", p.display(), m.fetch),
                (None, _) => "(the settings could not be read: see `rag config`)".into(),
            };
            o.out(&format!("{:<20} {:<19} = {at}", "", s.key));
        }
        if !m.installed_in.is_empty() {
            let dirs: Vec<String> = m
                .installed_in
                .iter()
                .map(|d| d.display().to_string())
                .collect();
            o.out(&format!(
                "{:<20} {:<19} : {}",
                "",
                "installed in",
                dirs.join(", ")
            ));
        }
    }
    if !others.is_empty() {
        o.out("\nother GGUF models (`--model NAME`, or `llm.large_model = \"NAME\"` in rag.toml):");
    }
    for m in others {
        o.out(&format!("{}  {}", m.name, other_facts(m)));
    }
    let dirs: Vec<String> = folders.iter().map(|d| d.display().to_string()).collect();
    o.info
        .push(format!("model folders looked in: {}", dirs.join(", ")));
    o
}

/// `1065 MB · qwen2 · Q4_K_M · 1.78B parameters · 32768 context · /path`.
fn other_facts(m: &Other) -> String {
    let mut facts = vec![format!("{} MB", m.bytes >> 20)];
    match &m.meta {
        Some(g) => {
            facts.extend(g.architecture.clone());
            facts.extend(g.quantisation.clone());
            if g.parameters > 0 {
                facts.push(format!("{:.2}B parameters", g.parameters as f64 / 1e9));
            }
            facts.extend(g.context_length.map(|n| format!("{n} context")));
        }
        None => facts.push(format!("unreadable: {}", m.error.as_deref().unwrap_or("?"))),
    }
    facts.push(m.path.display().to_string());
    facts.join(" · ")
}

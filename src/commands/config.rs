//! `rag config`: every setting in force, each with where it came from (default, `rag.toml`,
//! a `RAG_*` variable or a flag).

use std::path::Path;

use anyhow::Result;
use serde::Serialize;
use toml::Value;

use crate::config::{Settings, Source};
use crate::exit::Exit;
use crate::ui::Ui;

/// One resolved setting, for `rag config --json`.
#[derive(Debug, Serialize)]
struct Entry<'a> {
    key: String,
    value: Value,
    source: &'a Source,
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    config_file: Option<&'a Path>,
    root: &'a Path,
    settings: Vec<Entry<'a>>,
}

fn entries(s: &Settings) -> Vec<Entry<'_>> {
    let table = Value::try_from(s).ok();
    let table = table.as_ref().and_then(Value::as_table);
    let mut out = vec![];
    for (section, keys) in table.into_iter().flatten() {
        for (key, value) in keys.as_table().into_iter().flatten() {
            let full = format!("{section}.{key}");
            if let Some(source) = s.sources.get(&full) {
                out.push(Entry {
                    key: full,
                    value: value.clone(),
                    source,
                });
            }
        }
    }
    out
}

/// `rag config`: every setting in force as TOML, each with where it came from.
pub fn run(ui: &Ui, s: &Settings, json: bool) -> Result<Exit> {
    let settings = entries(s);
    if json {
        ui.json(&Report {
            config_file: s.file.as_deref(),
            root: &s.root,
            settings,
        })?;
        return Ok(Exit::Success);
    }
    let file = match &s.file {
        Some(f) => f.display().to_string(),
        None => "none (built-in defaults; `rag init` writes one)".into(),
    };
    let mut text = format!(
        "# config file: {file}\n# project root: {}\n",
        s.root.display()
    );
    let mut section = "";
    for e in &settings {
        let (sec, key) = e.key.split_once('.').unwrap_or(("", &e.key));
        if sec != section {
            text.push_str(&format!("\n[{sec}]\n"));
            section = sec;
        }
        let line = format!("{key} = {}", e.value);
        text.push_str(&format!("{line:<48} # {}\n", e.source));
    }
    ui.out(&text)?;
    Ok(Exit::Success)
}

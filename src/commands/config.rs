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
                    value: tidy(value.clone()),
                    source,
                });
            }
        }
    }
    out
}

/// A value as it was written: an `f32` setting becomes an `f64` on its way into TOML
/// (`0.7` → `0.699999988079071`), so a float an `f32` holds exactly is shown as the `f32`'s
/// shortest form.
fn tidy(v: Value) -> Value {
    match v {
        Value::Float(x) if f64::from(x as f32) == x => {
            Value::Float((x as f32).to_string().parse().unwrap_or(x))
        }
        Value::Array(a) => Value::Array(a.into_iter().map(tidy).collect()),
        Value::Table(t) => Value::Table(t.into_iter().map(|(k, v)| (k, tidy(v))).collect()),
        other => other,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_f32_setting_shows_as_written() {
        let s = Settings::default();
        let shown = |key: &str| {
            let v = entries_all(&s);
            v.into_iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.to_string())
        };
        assert_eq!(shown("retrieval.text_weight").as_deref(), Some("0.7"));
        assert_eq!(shown("llm.top_p").as_deref(), Some("0.95"));
        assert_eq!(shown("llm.judge_min").as_deref(), Some("0.4"));
        // An f64 that no f32 holds is left as it is.
        assert_eq!(tidy(Value::Float(0.1)), Value::Float(0.1));
    }

    /// Every setting with its shown value, whatever its source.
    fn entries_all(s: &Settings) -> Vec<(String, Value)> {
        let table = Value::try_from(s).unwrap();
        let mut out = vec![];
        for (section, keys) in table.as_table().unwrap() {
            for (key, value) in keys.as_table().unwrap() {
                out.push((format!("{section}.{key}"), tidy(value.clone())));
            }
        }
        out
    }
}

//! What `rag init` does: writes a project's settings file, every key commented out at its
//! default and the models found by path, and keeps the index out of git.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;
use toml::Value;

use super::Settings;
use crate::exit::ExitError;

/// The commented template: the repository's own rag.toml, which shows every key with its
/// default and why (a unit test keeps it complete and true).
const TEMPLATE: &str = include_str!("../../rag.toml");

/// What `rag init` did.
#[derive(Debug, Serialize)]
pub struct Init {
    pub config: PathBuf,
    pub gitignore: PathBuf,
    /// Model keys written with the absolute path of a model found elsewhere.
    pub models: Vec<(String, PathBuf)>,
    /// Model keys left at a default that points at no file.
    pub missing: Vec<String>,
}

/// Where a model key's file is: the default under `dir`, the path the current settings
/// resolve to, or the `models/` folder of the checkout this binary was built from.
fn locate(
    dir: &Path,
    current: Option<&Settings>,
    section: &str,
    key: &str,
    default: &str,
) -> Option<PathBuf> {
    if works_as_written(dir, default) {
        return None;
    }
    let resolved = current.and_then(|s| {
        let v = Value::try_from(s).ok()?;
        Some(PathBuf::from(v.get(section)?.get(key)?.as_str()?))
    });
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join(default);
    [resolved, Some(built)]
        .into_iter()
        .flatten()
        .find(|p| p.is_absolute() && p.exists())
}

/// A default model path resolves without being written down: the file is in the project's
/// `models/` or in the user's model folder (`rag models fetch`, `make install`), or,
/// for ONNX Runtime, rag finds one on its own (the onnxruntime package a `pip install`
/// brought: writing its path down would break at pip's next upgrade of it).
fn works_as_written(dir: &Path, default: &str) -> bool {
    dir.join(default).exists()
        || default.strip_prefix("models/").is_some_and(|name| {
            crate::config::user_models_dir().is_some_and(|u| u.join(name).exists())
        })
        || (default.starts_with("models/libonnxruntime") && crate::config::found_ort().is_some())
}

/// `rag init [DIR]`: a commented rag.toml whose model paths resolve, and `.rag/` in
/// `.gitignore`. Refuses to overwrite an existing rag.toml without `force`.
pub fn init(dir: &Path, force: bool, current: Option<&Settings>) -> Result<Init> {
    if !dir.is_dir() {
        return Err(ExitError::usage(format!(
            "{} is not a folder; create it first or run `rag init` inside the project",
            dir.display()
        )));
    }
    let dir = &std::fs::canonicalize(dir).with_context(|| format!("reading {}", dir.display()))?;
    let config = dir.join("rag.toml");
    if config.exists() && !force {
        return Err(ExitError::usage(format!(
            "{} already exists; edit it, or run `rag init --force` to replace it with the template",
            config.display()
        )));
    }
    // Every key is written commented out, at its default: `rag config` then shows which
    // settings a user changed, and a new default in a later rag reaches them.
    let mut text: String = TEMPLATE
        .lines()
        .map(|l| match l.chars().next() {
            Some(c) if c.is_ascii_lowercase() => format!("# {l}\n"),
            _ => format!("{l}\n"),
        })
        .collect();
    let mut out = Init {
        config: config.clone(),
        gitignore: dir.join(".gitignore"),
        models: vec![],
        missing: vec![],
    };
    text = text.replacen(
        "Every key is shown with its default.",
        "Every key is shown, commented out, at its default:\n# uncomment one to change it.",
        1,
    );
    for (full, default) in crate::catalog::keys() {
        let (section, key) = full.split_once('.').expect("section.key");
        let line = format!("\n# {key} = \"{default}\"\n");
        match locate(dir, current, section, key, &default) {
            Some(found) => {
                let toml_path = Value::String(found.to_string_lossy().into_owned());
                text = text.replacen(&line, &format!("\n{key} = {toml_path}\n"), 1);
                out.models.push((full.to_string(), found));
            }
            None if !works_as_written(dir, &default) => out.missing.push(full.to_string()),
            None => {}
        }
    }
    crate::atomic::write(&config, text.as_bytes())?;
    ignore_index(&out.gitignore)?;
    Ok(out)
}

/// Adds `.rag/` to a `.gitignore` (created if missing) unless a line already covers it.
fn ignore_index(path: &Path) -> Result<()> {
    let old = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let covered = old
        .lines()
        .any(|l| matches!(l.trim(), ".rag" | ".rag/" | "/.rag" | "/.rag/"));
    if covered {
        return Ok(());
    }
    let sep = if old.is_empty() || old.ends_with('\n') {
        ""
    } else {
        "\n"
    };
    let new = format!(
        "{old}{sep}# rag's index (a copy of the documents; `rag ingest` rebuilds it)\n.rag/\n"
    );
    crate::atomic::write(path, new.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_names_every_key_with_its_default() {
        // deny_unknown_fields rejects a stale key; comparing keys catches a missing one.
        let parsed: Settings = toml::from_str(TEMPLATE).unwrap();
        assert_eq!(parsed, Settings::default(), "rag.toml holds the defaults");
        let template: toml::Table = toml::from_str(TEMPLATE).unwrap();
        let defaults = Value::try_from(Settings::default()).unwrap();
        let keys = |t: &toml::Table| -> Vec<String> {
            t.iter()
                .flat_map(|(s, v)| {
                    v.as_table()
                        .unwrap()
                        .keys()
                        .map(move |k| format!("{s}.{k}"))
                })
                .collect()
        };
        assert_eq!(keys(&template), keys(defaults.as_table().unwrap()));
        for (full, default) in crate::catalog::keys() {
            let key = full.split_once('.').unwrap().1;
            assert!(
                TEMPLATE.contains(&format!("\n{key} = \"{default}\"\n")),
                "{key}"
            );
        }
    }

    #[test]
    fn init_writes_a_config_that_resolves_and_ignores_the_index_once() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".gitignore"), "target").unwrap();
        let done = init(dir.path(), false, None).unwrap();
        let text = std::fs::read_to_string(&done.config).unwrap();
        let parsed: Settings = toml::from_str(&text).unwrap();
        assert_eq!(parsed.retrieval, Settings::default().retrieval);
        assert!(
            text.contains("\n# top_k = 5\n"),
            "keys are commented out at their defaults"
        );
        let e = init(dir.path(), false, None).unwrap_err();
        assert!(format!("{e:#}").contains("--force"), "{e:#}");
        init(dir.path(), true, None).unwrap();
        let ignore = std::fs::read_to_string(dir.path().join(".gitignore")).unwrap();
        assert!(ignore.starts_with("target\n"), "{ignore}");
        assert_eq!(ignore.matches(".rag/").count(), 1, "{ignore}");
        // Models from the checkout rag was built in are found by absolute path.
        let embedder = crate::catalog::default_path("embed.model").unwrap();
        let built = Path::new(env!("CARGO_MANIFEST_DIR")).join(&embedder);
        if built.exists() && !works_as_written(dir.path(), &embedder) {
            assert!(done
                .models
                .iter()
                .any(|(k, p)| k == "embed.model" && *p == built));
            assert!(text.contains(&built.display().to_string()));
        }
    }
}

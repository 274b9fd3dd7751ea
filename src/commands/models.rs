//! `rag models fetch | remove | list`: the model files of rag's catalog, into (or out of) the
//! user's model folder, where rag looks from any folder, and where each one is; the work is
//! [`crate::fetch`], the text [`crate::printer`]'s.

use std::collections::BTreeMap;

use anyhow::{Context, Result};

use crate::catalog::{self, Choice};
use crate::cli::{FetchArgs, ListArgs, ModelsAction, ModelsArgs, RemoveArgs};
use crate::config::user_models_dir;
use crate::exit::{Exit, ExitError};
use crate::fetch::{self, Fetcher};
use crate::ui::Ui;

/// `config`: the `--config` file, read by `list` only (fetch and remove work where the
/// settings are broken).
pub fn run(config: Option<&std::path::Path>, a: &ModelsArgs, ui: &Ui) -> Result<Exit> {
    match &a.action {
        ModelsAction::Fetch(f) if !f.names.is_empty() => fetch_from_hub(config, f, ui),
        ModelsAction::Fetch(f) => fetch_models(f, ui),
        ModelsAction::Remove(r) => remove_models(r, ui),
        ModelsAction::List(l) => list_models(config, l, ui),
    }
}

/// What is known and what is installed where. The settings are read when they can be (to
/// show the file each model setting resolves to); a broken rag.toml still lists the folders.
fn list_models(config: Option<&std::path::Path>, a: &ListArgs, ui: &Ui) -> Result<Exit> {
    let settings = crate::config::resolve(config, &crate::config::Flags::default()).ok();
    let value = settings
        .as_ref()
        .and_then(|s| toml::Value::try_from(s).ok());
    let project = settings
        .as_ref()
        .map(|s| s.root.clone())
        .or_else(|| std::env::current_dir().ok());
    let folders = fetch::inventory::folders(project.as_deref(), a.dir.as_deref());
    let (_, sizes) = checksums()?;
    let listed = fetch::inventory::list(&folders, value.as_ref(), &sizes);
    let mut roots = crate::config::stores::Roots::from_env();
    if let Some(p) = &project {
        roots = roots.with_project(p);
    }
    let others = fetch::inventory::others(&folders, &roots);
    crate::printer::models_list(&listed, &others, &folders, a.json).emit(ui)?;
    Ok(Exit::Success)
}

/// The model folder: `--dir`, else the user's.
fn model_dir(dir: Option<&std::path::Path>) -> Result<std::path::PathBuf> {
    dir.map(std::path::Path::to_path_buf)
        .or_else(user_models_dir)
        .ok_or_else(|| {
            ExitError::usage("no model folder: HOME is not set; name one with --dir DIR".into())
        })
}

fn remove_models(a: &RemoveArgs, ui: &Ui) -> Result<Exit> {
    let dir = model_dir(a.dir.as_deref())?;
    let gone = fetch::remove(&dir)?;
    if a.dir.is_none() {
        // The user's folder is …/rag/models: the `rag` folder goes too when nothing else is in it.
        if let Some(parent) = dir.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
    crate::printer::models_removed(&dir, &gone, a.json).emit(ui)?;
    Ok(Exit::Success)
}

fn fetch_models(a: &FetchArgs, ui: &Ui) -> Result<Exit> {
    let dir = model_dir(a.dir.as_deref())?;
    let have_large = dir.join(catalog::LARGE.path).exists();
    let (models, why) = catalog::plan(choice(a), fetch::room(&dir), have_large);
    let mut items: Vec<&catalog::File> = models.iter().flat_map(|m| m.files).collect();
    if let Some(why) = why {
        ui.warn(&why);
    }
    // A pip-installed rag has ONNX Runtime from its onnxruntime dependency, which rag finds
    // beside itself (config::find_ort): no second copy in the model folder.
    let exe = std::env::current_exe().ok();
    if let Some(ort) = crate::config::find_ort(exe.as_deref(), None, &[]) {
        items.retain(|i| i.name != catalog::RUNTIME.path);
        ui.info(&format!(
            "models: ONNX Runtime from the onnxruntime package beside rag ({})",
            ort.display()
        ));
    }
    // RAG_MODELS_SHA256 replaces the built-in checksums (tests fetch made-up files with it).
    let (sums, sizes) = checksums()?;
    let python = python(exe.as_deref());
    let say = |line: &str| ui.info(&format!("models: {line}"));
    let fetcher = Fetcher {
        dir: &dir,
        from: a.from.as_deref(),
        sums: &sums,
        sizes: &sizes,
        python: &python,
        say: &say,
    };
    let got = fetcher.fetch(&items)?;
    crate::printer::models_fetched(&dir, &got, a.json).emit(ui)?;
    Ok(Exit::Success)
}

/// `rag models fetch hf:ORG/REPO/FILE.gguf …`: GGUF files from the hub `--hub` or
/// `models.hub` names, into `DIR/hf/ORG/REPO/`.
fn fetch_from_hub(config: Option<&std::path::Path>, a: &FetchArgs, ui: &Ui) -> Result<Exit> {
    use crate::fetch::hub::{Hub, HubFile};
    let dir = model_dir(a.dir.as_deref())?;
    let files = a
        .names
        .iter()
        .map(|n| HubFile::parse(n))
        .collect::<Result<Vec<_>>>()?;
    if let Some(sum) = &a.sha256 {
        if files.len() > 1 || sum.len() != 64 || !sum.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ExitError::usage(format!(
                "--sha256 {sum:?}: give the 64 hex digits of one file's SHA-256, with that one file"
            )));
        }
    }
    let hub = match &a.hub {
        Some(h) => h.clone(),
        None => hub_setting(config)?,
    };
    let mut got = Vec::new();
    for (name, f) in a.names.iter().zip(&files) {
        let bar = ui.download(&f.file);
        let progress = |done: u64, total: u64| {
            bar.set_length(total.max(done));
            bar.set_position(done);
        };
        let say = |line: &str| ui.info(&format!("models: {}: {line}", f.file));
        let hub = Hub {
            base: &hub,
            progress: &progress,
            say: &say,
        };
        let fetched = hub.fetch(f, &dir, a.sha256.as_deref());
        bar.finish_and_clear();
        got.push((name.clone(), fetched?));
    }
    crate::printer::models_hub_fetched(&got, a.json).emit(ui)?;
    Ok(Exit::Success)
}

/// `models.hub` where rag.toml or RAG_MODELS_HUB sets it, else the mirror the Hugging Face
/// tools are pointed at (HF_ENDPOINT), else the public hub.
fn hub_setting(config: Option<&std::path::Path>) -> Result<String> {
    let s = crate::config::resolve(config, &crate::config::Flags::default())?;
    let set = s
        .sources
        .get("models.hub")
        .is_some_and(|src| *src != crate::config::Source::Default);
    Ok(match std::env::var("HF_ENDPOINT") {
        Ok(endpoint) if !set && !endpoint.trim().is_empty() => endpoint,
        _ => s.models.hub,
    })
}

fn choice(a: &FetchArgs) -> Choice {
    if a.minimal {
        Choice::Minimal
    } else if a.small {
        Choice::Small
    } else if a.large {
        Choice::Large
    } else {
        Choice::Default
    }
}

/// The Python that runs pip: RAG_PYTHON, else the venv's own python beside a pip-installed
/// rag (it has pip even when the venv is not activated), else python3 from PATH.
fn python(exe: Option<&std::path::Path>) -> String {
    let beside = exe
        .and_then(std::path::Path::parent)
        .map(|d| d.join("python3"))
        .filter(|p| p.is_file());
    std::env::var("RAG_PYTHON").unwrap_or_else(|_| {
        beside.map_or_else(|| "python3".into(), |p| p.to_string_lossy().into_owned())
    })
}

/// The catalog's checksums and sizes, or those of the list `RAG_MODELS_SHA256` names (the
/// tests fetch and list made-up files with it).
fn checksums() -> Result<(BTreeMap<String, String>, BTreeMap<String, u64>)> {
    Ok(match std::env::var_os("RAG_MODELS_SHA256") {
        Some(p) => fetch::parse_sums(
            &std::fs::read_to_string(&p)
                .with_context(|| format!("reading RAG_MODELS_SHA256={}", p.to_string_lossy()))?,
        ),
        None => catalog::checksums(),
    })
}

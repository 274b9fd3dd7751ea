//! Resolution: the layers (defaults < `rag.toml` < `RAG_*` < flags) merged into one
//! [`Settings`], each key's provenance recorded, unknown keys and variables refused with the
//! nearest valid name.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use toml::{Table, Value};

use super::file::config_file;
use super::flags::Flags;
use super::models::{found_ort, prefer_user_models, user_models_dir};
use super::settings::Settings;
use super::values::Source;
use crate::exit::ExitError;

/// Keys whose values are paths, resolved against the layer they came from.
const PATH_KEYS: &[&str] = &[
    "index.dir",
    "embed.model",
    "embed.tokenizer_dir",
    "embed.ort_lib",
    "rerank.model",
    "rerank.tokenizer_dir",
    "llm.model",
    "llm.medium_model",
    "llm.large_model",
    "llm.draft_model",
    "llm.tokenizer",
];

/// The `RAG_*` environment variables, by name.
pub type Env = BTreeMap<String, String>;

/// Variables rag reads that are not settings keys: `RAG_CONFIG`, and the hooks the fault
/// and stress tests use.
pub(super) const OTHER_VARS: &[&str] = &[
    "RAG_CONFIG",
    "RAG_LOG",
    "RAG_SERVE_TOKEN",
    "RAG_TEST_CRASH_AT",
    "RAG_TEST_LEASE_STALE_S",
    "RAG_TEST_COMMIT_DELAY_MS",
    "RAG_TEST_CLOCK_SKEW_S",
    "RAG_FUZZ_CASES",
    "RAG_STRESS_EDITS",
    // Read by `rag models`: the Python that runs pip, a checksum list in place of the
    // catalog's (tests), a fault point (tests). Set for a fetch, they must not break the rest.
    "RAG_PYTHON",
    "RAG_MODELS_SHA256",
    "RAG_FAULT_FETCH",
];

/// `RAG_LOG`: the log filter, when set (see `ui::init_logs`).
pub fn log_filter() -> Option<String> {
    std::env::var("RAG_LOG").ok().filter(|f| !f.is_empty())
}

/// Resolve settings. `config` is `--config`; without it `RAG_CONFIG`, then the nearest
/// `rag.toml` in the current folder or a parent (as git finds `.git`).
pub fn resolve(config: Option<&Path>, flags: &Flags) -> Result<Settings> {
    let mut env = Env::new();
    for (name, value) in std::env::vars_os() {
        let Some(name) = name.to_str().filter(|n| n.starts_with("RAG_")) else {
            continue;
        };
        let value = value.into_string().map_err(|_| {
            ExitError::usage(format!(
                "{name} is not valid UTF-8; unset it or fix its value"
            ))
        })?;
        env.insert(name.to_string(), value);
    }
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let ort = found_ort();
    resolve_with(
        config,
        flags,
        &env,
        &cwd,
        user_models_dir().as_deref(),
        ort.as_deref(),
    )
}

/// [`resolve`] with its inputs given: the environment, the current folder and the user's
/// model folder (None: defaults under `models/` are taken as written) and an ONNX Runtime
/// library found outside both ([`find_ort`]).
pub(super) fn resolve_with(
    config: Option<&Path>,
    flags: &Flags,
    env: &Env,
    cwd: &Path,
    user_models: Option<&Path>,
    ort: Option<&Path>,
) -> Result<Settings> {
    let file = config_file(config, env, cwd)?;
    // Defaults are relative to the config file's folder when there is one, so `rag` works
    // from any subfolder of the project.
    let base = file
        .as_deref()
        .and_then(Path::parent)
        .unwrap_or(cwd)
        .to_path_buf();

    let mut table = Value::try_from(Settings::default())?
        .as_table()
        .cloned()
        .unwrap_or_default();
    let keys = leaves(&table);
    let mut sources: BTreeMap<String, Source> =
        keys.iter().map(|k| (k.clone(), Source::Default)).collect();
    resolve_paths(&mut table, &base);
    prefer_user_models(&mut table, &base, user_models, ort);

    if let Some(path) = &file {
        let layer = file_layer(path, &keys, cwd)?;
        for k in leaves(&layer) {
            sources.insert(k, Source::File(path.clone()));
        }
        merge(&mut table, layer);
    }

    check_env_names(env, &keys)?;
    let mut env_layer = env_layer(&table, env)?;
    resolve_paths(&mut env_layer, cwd);
    for k in leaves(&env_layer) {
        sources.insert(k.clone(), Source::Env(env_var(&k)));
    }
    merge(&mut table, env_layer);

    let flag_layer = flag_layer(flags, &keys, cwd, &mut sources)?;
    merge(&mut table, flag_layer);
    let roots = super::stores::Roots::from_env().with_project(&base);
    let model_names = resolve_store_names(&mut table, &roots)?;

    let mut settings = Value::Table(table)
        .try_into::<Settings>()
        .map_err(|e| ExitError::usage(format!("settings: {}", one_line(&e))))?;
    settings.root = base;
    settings.file = file;
    settings.sources = sources;
    settings.model_names = model_names;
    settings.validate()?;
    Ok(settings)
}

/// The config file's layer, checked on its own so that every error names the file.
fn file_layer(path: &Path, keys: &[String], cwd: &Path) -> Result<Table> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut layer: Table = toml::from_str(&text)
        .map_err(|e| ExitError::usage(format!("{} is not valid TOML: {e}", path.display())))?;
    check_file_keys(&layer, keys, path)?;
    // Validate types against the schema before merging, so an error names the file.
    Value::Table(layer.clone())
        .try_into::<Settings>()
        .map_err(|e| ExitError::usage(format!("{}: {}", path.display(), one_line(&e))))?;
    resolve_paths(&mut layer, path.parent().unwrap_or(cwd));
    Ok(layer)
}

/// The command line's layer, with its keys recorded as set by flags for `rag config`.
fn flag_layer(
    flags: &Flags,
    keys: &[String],
    cwd: &Path,
    sources: &mut BTreeMap<String, Source>,
) -> Result<Table> {
    let mut flag_layer = flags.layer()?;
    let flag_keys = leaves(&flag_layer);
    if let Some(k) = flag_keys.iter().find(|k| !keys.contains(k)) {
        anyhow::bail!("internal: a flag sets {k}, which is not a settings key");
    }
    for k in flag_keys {
        sources.insert(k, Source::Flag);
    }
    resolve_paths(&mut flag_layer, cwd);
    Ok(flag_layer)
}

/// A deserialisation error on one line ("unknown variant `x` … in `retrieval.mode`").
fn one_line(e: &dyn std::fmt::Display) -> String {
    e.to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every `section.key` of a layer.
pub(super) fn leaves(layer: &Table) -> Vec<String> {
    layer
        .iter()
        .flat_map(|(section, v)| {
            let keys = v.as_table().map(|t| t.keys().collect()).unwrap_or(vec![]);
            keys.into_iter().map(move |k| format!("{section}.{k}"))
        })
        .collect()
}

/// `llm.n_ctx` -> `RAG_LLM_N_CTX`.
fn env_var(key: &str) -> String {
    format!("RAG_{}", key.replace('.', "_").to_uppercase())
}

/// The candidate closest to `name` by edit distance.
fn nearest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> &'a str {
    candidates
        .into_iter()
        .min_by_key(|c| strsim::levenshtein(name, c))
        .unwrap_or_default()
}

/// An unknown section or key in `rag.toml` is an error naming the nearest valid key, so a
/// typo never silently leaves a default in force.
fn check_file_keys(layer: &Table, keys: &[String], path: &Path) -> Result<()> {
    for (section, v) in layer {
        let Some(table) = v.as_table() else {
            let near = nearest(
                section,
                keys.iter().map(|k| k.split('.').next().unwrap_or(k)),
            );
            return Err(ExitError::usage(format!(
                "{}: `{section}` is not a [section]; settings go in sections such as [{near}]",
                path.display()
            )));
        };
        for key in table.keys() {
            let full = format!("{section}.{key}");
            if !keys.contains(&full) {
                let near = nearest(&full, keys.iter().map(String::as_str));
                return Err(ExitError::usage(format!(
                    "{}: unknown key {full}; did you mean {near}? (`rag config` lists every key)",
                    path.display()
                )));
            }
        }
    }
    Ok(())
}

/// An unknown `RAG_*` variable is an error naming the nearest one rag reads: a misspelt
/// `RAG_LLM_MAX_TOKEN` would otherwise be ignored without a word.
fn check_env_names(env: &Env, keys: &[String]) -> Result<()> {
    let known: Vec<String> = keys
        .iter()
        .map(|k| env_var(k))
        .chain(OTHER_VARS.iter().map(|v| v.to_string()))
        .collect();
    for name in env.keys() {
        if !known.contains(name) {
            let near = nearest(name, known.iter().map(String::as_str));
            return Err(ExitError::usage(format!(
                "unknown environment variable {name}; did you mean {near}? Unset it \
                 (`unset {name}`) if it is not meant for rag"
            )));
        }
    }
    Ok(())
}

/// `RAG_SECTION_KEY` for every key of the defaults, typed like the default value.
fn env_layer(defaults: &Table, env: &Env) -> Result<Table> {
    let mut out = Table::new();
    for (section, keys) in defaults {
        let Some(keys) = keys.as_table() else {
            continue;
        };
        for (key, default) in keys {
            let var = env_var(&format!("{section}.{key}"));
            let Some(raw) = env.get(&var) else { continue };

            let value = match default {
                Value::Integer(_) => raw.trim().parse::<i64>().ok().map(Value::Integer),
                Value::Float(_) => raw.trim().parse::<f64>().ok().map(Value::Float),
                Value::Boolean(_) => raw.trim().parse::<bool>().ok().map(Value::Boolean),
                // Tables: RAG_INDEX_STORAGE="aws_region=eu-west-1,allow_http=true".
                Value::Table(_) => raw
                    .split(',')
                    .map(str::trim)
                    .filter(|x| !x.is_empty())
                    .map(|kv| {
                        let (k, v) = kv.split_once('=')?;
                        Some((k.trim().to_string(), Value::String(v.trim().into())))
                    })
                    .collect::<Option<Table>>()
                    .map(Value::Table),
                // Lists: comma-separated (RAG_CHUNK_EXCLUDE="*.lock,vendor/**").
                Value::Array(_) => Some(Value::Array(
                    raw.split(',')
                        .map(str::trim)
                        .filter(|x| !x.is_empty())
                        .map(|x| Value::String(x.into()))
                        .collect(),
                )),
                _ => Some(Value::String(raw.clone())),
            };
            let Some(value) = value else {
                return Err(ExitError::usage(format!(
                    "{var}={raw:?} is not a valid {}; unset it or give a value like {default}",
                    default.type_str()
                )));
            };
            out.entry(section.clone())
                .or_insert_with(|| Value::Table(Table::new()))
                .as_table_mut()
                .expect("sections are tables")
                .insert(key.clone(), value);
        }
    }
    Ok(out)
}

/// The built-in default of `section.key`, as TOML.
pub(super) fn key_default(key: &str) -> String {
    let (section, name) = key.split_once('.').unwrap_or((key, ""));
    Value::try_from(Settings::default())
        .ok()
        .and_then(|v| v.get(section)?.get(name).map(ToString::to_string))
        .unwrap_or_default()
}

fn resolve_paths(layer: &mut Table, base: &Path) {
    for key in PATH_KEYS {
        let (section, name) = key.split_once('.').expect("section.key");
        if let Some(Value::String(s)) = layer.get_mut(section).and_then(|t| t.get_mut(name)) {
            let p = Path::new(s.as_str());
            // An empty path means "not set" (rerank.model), not "this folder"; a URI
            // (`s3://bucket/index`) is not a path, nor a store's name (`ollama:qwen2.5:7b`).
            if p.is_relative() && !s.is_empty() && !s.contains("://") && !super::stores::is_name(s)
            {
                *s = base.join(p).to_string_lossy().into_owned();
            }
        }
    }
}

/// The generator settings whose value names a model in another tool's store
/// (`ollama:qwen2.5:7b`, `hf:ORG/REPO/FILE.gguf`, `lmstudio:…`) get the file it names; a name
/// that names nothing is a usage error listing what the store holds. Returns `key → name`.
fn resolve_store_names(
    table: &mut Table,
    roots: &super::stores::Roots,
) -> Result<BTreeMap<String, String>> {
    let mut names = BTreeMap::new();
    for key in [
        "llm.model",
        "llm.medium_model",
        "llm.large_model",
        "llm.draft_model",
    ] {
        let (section, name) = key.split_once('.').expect("section.key");
        let Some(Value::String(s)) = table.get_mut(section).and_then(|t| t.get_mut(name)) else {
            continue;
        };
        if !super::stores::is_name(s) {
            continue;
        }
        let path = super::stores::resolve(s, roots)
            .map_err(|e| ExitError::usage(format!("{key}: {e}")))?;
        names.insert(
            key.to_string(),
            std::mem::replace(s, path.to_string_lossy().into_owned()),
        );
    }
    Ok(names)
}

fn merge(into: &mut Table, layer: Table) {
    for (k, v) in layer {
        match (into.get_mut(&k), v) {
            (Some(Value::Table(dst)), Value::Table(src)) => merge(dst, src),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}

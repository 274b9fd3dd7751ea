//! `rag models list`: every model of the catalog, the file each model setting resolves to
//! here, and which model folders hold it whole. Sizes are compared, not checksums (`rag
//! doctor` reads the files), so the listing takes no time whatever the models weigh.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::catalog::{self, Model, Role};

/// One model of the catalog and where it is.
#[derive(Debug, Serialize)]
pub struct Listed {
    pub id: &'static str,
    pub role: Role,
    pub what: &'static str,
    /// Its path under a model folder.
    pub path: &'static str,
    pub bytes: u64,
    /// Each setting that names it, and the file that setting resolves to here.
    pub settings: Vec<Setting>,
    /// The model folders that hold every file of it at its catalog size.
    pub installed_in: Vec<PathBuf>,
    /// What fetches it where no folder has it.
    pub fetch: &'static str,
}

#[derive(Debug, Serialize)]
pub struct Setting {
    pub key: &'static str,
    /// None where the settings could not be read (a broken rag.toml: `rag config` says why).
    pub path: Option<PathBuf>,
    pub exists: bool,
}

/// The catalog against `folders` (searched in order) and the resolved `settings`; `sizes`:
/// name → bytes of each file (the catalog's, or the list `RAG_MODELS_SHA256` names).
pub fn list(
    folders: &[PathBuf],
    settings: Option<&toml::Value>,
    sizes: &BTreeMap<String, u64>,
) -> Vec<Listed> {
    catalog::MODELS
        .into_iter()
        .map(|m| Listed {
            id: m.id,
            role: m.role,
            what: m.what,
            path: m.path,
            bytes: m.files.iter().map(|f| f.bytes).sum(),
            settings: m.keys.iter().map(|k| setting(k, settings)).collect(),
            installed_in: folders
                .iter()
                .filter(|d| whole_in(m, d, sizes))
                .cloned()
                .collect(),
            fetch: m.fetch,
        })
        .collect()
}

fn setting(key: &'static str, settings: Option<&toml::Value>) -> Setting {
    let (section, name) = key.split_once('.').expect("section.key");
    let path = settings
        .and_then(|s| s.get(section)?.get(name)?.as_str())
        .map(PathBuf::from);
    Setting {
        key,
        exists: path.as_deref().is_some_and(Path::exists),
        path,
    }
}

/// Every file of `m` is a regular file in `dir` of its size, where the list has one (a link
/// is not rag's).
fn whole_in(m: &Model, dir: &Path, sizes: &BTreeMap<String, u64>) -> bool {
    m.files.iter().all(|f| {
        let want = sizes.get(f.name).copied();
        crate::owned::link_on_the_way(dir, Path::new(f.name)).is_none()
            && std::fs::symlink_metadata(dir.join(f.name))
                .is_ok_and(|meta| meta.is_file() && want.is_none_or(|n| n == meta.len()))
    })
}

/// A GGUF file rag can answer with that is not one of the catalog's: in a model folder (by
/// path), or in another tool's store (by the name `--model` and the model settings take).
#[derive(Debug, Serialize)]
pub struct Other {
    pub name: String,
    pub path: PathBuf,
    pub bytes: u64,
    /// What the file's header says; None where it could not be read (the reason).
    pub meta: Option<crate::gguf::Meta>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The GGUF files in `folders` that the catalog does not name, then every GGUF model of the
/// stores `roots` names, each with its header read.
pub fn others(folders: &[PathBuf], roots: &crate::config::stores::Roots) -> Vec<Other> {
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    for dir in folders {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            let gguf = p
                .extension()
                .is_some_and(|x| x.eq_ignore_ascii_case("gguf"));
            let known = catalog::files().any(|f| f.name == name);
            if gguf && !known && e.file_type().is_ok_and(|t| t.is_file()) {
                found.push((p.display().to_string(), p));
            }
        }
    }
    found.extend(
        crate::config::stores::discover(roots)
            .into_iter()
            .map(|f| (f.name, f.path)),
    );
    found
        .into_iter()
        .map(|(name, path)| {
            let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
            let (meta, error) = match crate::gguf::read(&path) {
                Ok(m) => (Some(m), None),
                Err(e) => (None, Some(format!("{e:#}"))),
            };
            Other {
                name,
                path,
                bytes,
                meta,
                error,
            }
        })
        .collect()
}

/// The folders `rag models list` looks in: the project's `models/` (beside its rag.toml, else
/// in the current folder), the user's model folder, and `--dir`, each once.
pub fn folders(project: Option<&Path>, dir: Option<&Path>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let candidates = [
        project.map(|p| p.join("models")),
        crate::config::user_models_dir(),
        dir.map(Path::to_path_buf),
    ];
    for c in candidates.into_iter().flatten() {
        let same = |o: &PathBuf| {
            o == &c || std::fs::canonicalize(o).ok() == std::fs::canonicalize(&c).ok() && c.exists()
        };
        if !out.iter().any(same) {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_is_installed_where_every_file_has_its_size() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        std::fs::create_dir_all(a.join("minilm")).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        for f in catalog::TOKENIZER.files {
            let body = vec![b'x'; f.bytes as usize];
            std::fs::write(a.join(f.name), &body).unwrap();
        }
        // The right name at the wrong size is not the model.
        std::fs::write(b.join(catalog::SMALL.path), b"short").unwrap();
        let sizes = catalog::checksums().1;
        let listed = list(&[a.clone(), b.clone()], None, &sizes);
        let get = |id: &str| listed.iter().find(|l| l.id == id).unwrap();
        assert_eq!(get("tokenizer").installed_in, [a.clone()]);
        assert!(get("small").installed_in.is_empty());
        assert!(get("large").settings.iter().all(|s| s.path.is_none()));
        // One missing file of four: not whole.
        std::fs::remove_file(a.join("minilm/config.json")).unwrap();
        assert!(list(&[a], None, &sizes)[1].installed_in.is_empty());
    }

    #[test]
    fn settings_name_the_file_in_use() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("mine.gguf");
        std::fs::write(&file, b"GGUF").unwrap();
        let settings: toml::Value = toml::from_str(&format!(
            "[llm]\nlarge_model = {:?}\nmedium_model = \"/nowhere.gguf\"",
            file.display().to_string()
        ))
        .unwrap();
        let listed = list(&[], Some(&settings), &catalog::checksums().1);
        let large = &listed.iter().find(|l| l.id == "large").unwrap().settings[0];
        assert_eq!(
            (large.path.as_deref(), large.exists),
            (Some(file.as_path()), true)
        );
        let medium = &listed.iter().find(|l| l.id == "medium").unwrap().settings[0];
        assert!(!medium.exists);
    }
}

//! The GGUF models a user already has, in the stores other tools keep, by a name any model
//! setting (and `--model`) takes:
//!
//! - `ollama:NAME[:TAG]`: ollama's store (`OLLAMA_MODELS`, else `~/.ollama/models`), whose
//!   manifests (`manifests/HOST/NAMESPACE/NAME/TAG`) name the model's blob (`blobs/sha256-…`);
//! - `hf:ORG/REPO/FILE.gguf`: the Hugging Face cache (`HF_HUB_CACHE`, else `HF_HOME/hub`, else
//!   `~/.cache/huggingface/hub`), `models--ORG--REPO/snapshots/REVISION/FILE.gguf`, the
//!   revision `refs/main` names (else the newest);
//! - `lmstudio:PUBLISHER/REPO/FILE.gguf`: LM Studio's folder (`~/.lmstudio/models`, or the
//!   older `~/.cache/lm-studio/models`).
//!
//! An `hf:` name not in the cache is looked for where `rag models fetch hf:…` puts hub files:
//! `hf/ORG/REPO/FILE` under the project's `models/` and the user's model folder.
//!
//! Read only: rag never writes, moves or deletes anything in these stores, and a name is
//! checked component by component, so `ollama:../../x` names nothing outside the store.

use std::path::{Component, Path, PathBuf};

use serde::Serialize;

/// The store roots, from the environment and the home folder.
#[derive(Debug, Clone, Default)]
pub struct Roots {
    pub ollama: Option<PathBuf>,
    pub hf: Option<PathBuf>,
    pub lmstudio: Vec<PathBuf>,
    /// Where `rag models fetch hf:…` put hub files (`…/models/hf`), searched after the cache.
    pub fetched: Vec<PathBuf>,
}

impl Roots {
    pub fn from_env() -> Roots {
        let home = super::models::home_dir();
        let var = |k: &str| {
            std::env::var_os(k)
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
        };
        Roots {
            ollama: var("OLLAMA_MODELS")
                .or_else(|| home.as_ref().map(|h| h.join(".ollama/models"))),
            hf: var("HF_HUB_CACHE")
                .or_else(|| var("HF_HOME").map(|h| h.join("hub")))
                .or_else(|| home.as_ref().map(|h| h.join(".cache/huggingface/hub"))),
            lmstudio: home
                .iter()
                .flat_map(|h| {
                    [
                        h.join(".lmstudio/models"),
                        h.join(".cache/lm-studio/models"),
                    ]
                })
                .collect(),
            fetched: super::models::user_models_dir()
                .map(|d| d.join("hf"))
                .into_iter()
                .collect(),
        }
    }

    /// The same, with a project's own `models/hf` searched first among the fetched.
    pub fn with_project(mut self, root: &Path) -> Roots {
        self.fetched.insert(0, root.join("models").join("hf"));
        self
    }
}

/// A GGUF file found in a store, with the name that picks it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Found {
    pub name: String,
    pub path: PathBuf,
    pub bytes: u64,
}

/// Whether a model setting's value is a store name rather than a path.
pub fn is_name(value: &str) -> bool {
    ["ollama:", "hf:", "lmstudio:"]
        .iter()
        .any(|p| value.starts_with(p))
}

/// The file `name` picks, or a message saying why none, with the names the store holds.
pub fn resolve(name: &str, roots: &Roots) -> Result<PathBuf, String> {
    let (store, rest) = name.split_once(':').unwrap_or((name, ""));
    let found = match store {
        "ollama" => roots.ollama.as_deref().and_then(|r| ollama_one(r, rest)),
        "hf" => roots
            .hf
            .as_deref()
            .and_then(|r| hf_one(r, rest))
            .or_else(|| {
                roots
                    .fetched
                    .iter()
                    .find_map(|r| safe_join(r, rest).filter(|p| is_regular(p)))
            }),
        _ => roots
            .lmstudio
            .iter()
            .find_map(|r| safe_join(r, rest).filter(|p| is_regular(p))),
    };
    found.ok_or_else(|| {
        let have: Vec<String> = discover(roots)
            .into_iter()
            .filter(|f| f.name.starts_with(&format!("{store}:")))
            .map(|f| f.name)
            .collect();
        let listed = if have.is_empty() {
            format!("the {store} store holds no GGUF model here")
        } else {
            format!("it holds: {}", have.join(", "))
        };
        format!("{name} names no model file ({listed}); `rag models list` shows every model rag can use")
    })
}

/// Every GGUF file of every store, by name.
pub fn discover(roots: &Roots) -> Vec<Found> {
    let mut out = Vec::new();
    if let Some(r) = &roots.ollama {
        out.extend(ollama_all(r));
    }
    if let Some(r) = &roots.hf {
        out.extend(hf_all(r));
    }
    for r in &roots.fetched {
        out.extend(named_under("hf", r, 6));
    }
    for r in &roots.lmstudio {
        out.extend(named_under("lmstudio", r, 3));
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    out
}

/// The GGUF files under `root`, named `STORE:PATH/UNDER/ROOT`.
fn named_under(store: &str, root: &Path, depth: usize) -> Vec<Found> {
    ggufs_under(root, depth)
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(root).unwrap_or(&path).to_string_lossy();
            found(format!("{store}:{rel}"), path.clone())
        })
        .collect()
}

fn found(name: String, path: PathBuf) -> Found {
    let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    Found { name, path, bytes }
}

/// `root` joined with `rel`'s normal components only (no `..`, no root, no empty name).
fn safe_join(root: &Path, rel: &str) -> Option<PathBuf> {
    let rel = Path::new(rel);
    let ok =
        !rel.as_os_str().is_empty() && rel.components().all(|c| matches!(c, Component::Normal(_)));
    ok.then(|| root.join(rel))
}

/// A regular file, or a link to one (the Hugging Face cache links snapshots to blobs); never
/// a FIFO or a device.
fn is_regular(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file())
}

/// `NAME[:TAG]` → the manifest's path parts: host, namespace, name, tag (`latest`).
fn ollama_parts(name: &str) -> Option<(String, String, String, String)> {
    let (path, tag) = match name.rsplit_once(':') {
        Some((p, t)) if !t.contains('/') => (p, t),
        _ => (name, "latest"),
    };
    let parts: Vec<&str> = path.split('/').collect();
    let (host, ns, model) = match parts[..] {
        [m] => ("registry.ollama.ai", "library", m),
        [n, m] => ("registry.ollama.ai", n, m),
        [h, n, m] => (h, n, m),
        _ => return None,
    };
    Some((host.into(), ns.into(), model.into(), tag.into()))
}

fn ollama_one(root: &Path, name: &str) -> Option<PathBuf> {
    let (host, ns, model, tag) = ollama_parts(name)?;
    let manifest = safe_join(
        &root.join("manifests"),
        &format!("{host}/{ns}/{model}/{tag}"),
    )?;
    ollama_blob(root, &manifest)
}

/// The model layer's blob a manifest names (a digest of 64 hex digits, nothing else).
fn ollama_blob(root: &Path, manifest: &Path) -> Option<PathBuf> {
    let text = crate::atomic::read_bounded(manifest, 1 << 20).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&text).ok()?;
    let digest = v["layers"]
        .as_array()?
        .iter()
        .find(|l| l["mediaType"] == "application/vnd.ollama.image.model")?["digest"]
        .as_str()?;
    let hex = digest.strip_prefix("sha256:")?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let blob = root.join("blobs").join(format!("sha256-{hex}"));
    is_regular(&blob).then_some(blob)
}

fn ollama_all(root: &Path) -> Vec<Found> {
    let manifests = root.join("manifests");
    let mut out = Vec::new();
    for m in files_under(&manifests, 4) {
        let Ok(rel) = m.strip_prefix(&manifests) else {
            continue;
        };
        let parts: Vec<String> = rel
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        let [host, ns, model, tag] = &parts[..] else {
            continue;
        };
        let name = match (host.as_str(), ns.as_str()) {
            ("registry.ollama.ai", "library") => format!("{model}:{tag}"),
            ("registry.ollama.ai", _) => format!("{ns}/{model}:{tag}"),
            _ => format!("{host}/{ns}/{model}:{tag}"),
        };
        if let Some(blob) = ollama_blob(root, &m) {
            out.push(found(format!("ollama:{name}"), blob));
        }
    }
    out
}

/// `ORG/REPO/FILE` → the file in the revision `refs/main` names, else the newest snapshot.
fn hf_one(root: &Path, name: &str) -> Option<PathBuf> {
    let mut parts = name.splitn(3, '/');
    let (org, repo, file) = (parts.next()?, parts.next()?, parts.next()?);
    let repo_dir = safe_join(root, &format!("models--{org}--{repo}"))?;
    if org.contains("--") || repo.contains("--") {
        return None;
    }
    hf_snapshots(&repo_dir)
        .into_iter()
        .find_map(|s| safe_join(&s, file).filter(|p| is_regular(p)))
}

/// A repository's snapshot folders, the one `refs/main` names first, then newest first.
fn hf_snapshots(repo_dir: &Path) -> Vec<PathBuf> {
    let main = std::fs::read_to_string(repo_dir.join("refs/main")).ok();
    let mut snaps: Vec<(bool, std::time::SystemTime, PathBuf)> =
        std::fs::read_dir(repo_dir.join("snapshots"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| {
                let is_main = main.as_deref().map(str::trim) == e.file_name().to_str();
                let t = e
                    .metadata()
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH);
                (is_main, t, e.path())
            })
            .collect();
    snaps.sort_by(|a, b| (b.0, b.1).cmp(&(a.0, a.1)));
    snaps.into_iter().map(|(_, _, p)| p).collect()
}

fn hf_all(root: &Path) -> Vec<Found> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let dir = e.file_name().to_string_lossy().into_owned();
        let Some((org, repo)) = dir
            .strip_prefix("models--")
            .and_then(|r| r.split_once("--"))
        else {
            continue;
        };
        // The revision a name picks: the first snapshot holding each file.
        let mut seen = std::collections::BTreeSet::new();
        for snap in hf_snapshots(&e.path()) {
            for path in ggufs_under(&snap, 3) {
                let rel = path
                    .strip_prefix(&snap)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .into_owned();
                if seen.insert(rel.clone()) {
                    out.push(found(format!("hf:{org}/{repo}/{rel}"), path));
                }
            }
        }
    }
    out
}

/// Regular files (or links to them) named `*.gguf` under `dir`, at most `depth` folders
/// down; links to folders are not followed.
fn ggufs_under(dir: &Path, depth: usize) -> Vec<PathBuf> {
    files_under(dir, depth)
        .into_iter()
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x.eq_ignore_ascii_case("gguf"))
        })
        .collect()
}

fn files_under(dir: &Path, depth: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(t) = e.file_type() else { continue };
        let p = e.path();
        if t.is_dir() && depth > 0 {
            out.extend(files_under(&p, depth - 1));
        } else if (t.is_file() || t.is_symlink()) && is_regular(&p) {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ollama_names_and_hostile_ones() {
        assert_eq!(
            ollama_parts("qwen2.5:7b"),
            Some((
                "registry.ollama.ai".into(),
                "library".into(),
                "qwen2.5".into(),
                "7b".into()
            ))
        );
        assert_eq!(ollama_parts("me/m").unwrap().3, "latest");
        assert_eq!(ollama_parts("h.io/me/m:q4").unwrap().0, "h.io");
        assert!(ollama_parts("a/b/c/d").is_none());
        let tmp = tempfile::tempdir().unwrap();
        assert!(ollama_one(tmp.path(), "../../etc:passwd").is_none());
        assert!(safe_join(tmp.path(), "../x").is_none());
        assert!(safe_join(tmp.path(), "/etc/passwd").is_none());
        assert!(safe_join(tmp.path(), "").is_none());
    }

    #[test]
    fn a_manifest_naming_anything_but_a_digest_names_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let m = tmp
            .path()
            .join("manifests/registry.ollama.ai/library/x/latest");
        std::fs::create_dir_all(m.parent().unwrap()).unwrap();
        std::fs::create_dir_all(tmp.path().join("blobs")).unwrap();
        let layer = |d: &str| {
            format!(
                r#"{{"layers":[{{"mediaType":"application/vnd.ollama.image.model","digest":"{d}"}}]}}"#
            )
        };
        std::fs::write(&m, layer("sha256:../../../../etc/passwd")).unwrap();
        assert!(ollama_one(tmp.path(), "x").is_none());
        let hex = "a".repeat(64);
        std::fs::write(&m, layer(&format!("sha256:{hex}"))).unwrap();
        assert!(ollama_one(tmp.path(), "x").is_none(), "no blob yet");
        std::fs::write(tmp.path().join(format!("blobs/sha256-{hex}")), b"GGUF").unwrap();
        assert!(ollama_one(tmp.path(), "x:latest").is_some());
        let roots = Roots {
            ollama: Some(tmp.path().to_path_buf()),
            ..Roots::default()
        };
        assert_eq!(discover(&roots)[0].name, "ollama:x:latest");
        let e = resolve("ollama:y", &roots).unwrap_err();
        assert!(e.contains("ollama:x:latest"), "{e}");
    }
}

//! `make dist`: the release tarball and the wheel, packed once from this test build by
//! scripts/release/dist.sh, then installed and used as a person would (an empty folder, nothing of
//! the checkout on PATH, no cargo) and removed without a trace.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use crate::install::{
    check_installed, check_no_models_left, check_uninstalled, check_works_from_any_folder, Places,
};
use crate::support::{files, repo};

/// The dist folder, packed by the first test that asks (both tests use one packing: the wheel
/// and the tarball each compress the 280 MB binary). Under cargo's temporary folder for
/// integration tests, so a rerun replaces it rather than leaving one behind in /tmp.
fn dist() -> PathBuf {
    static DONE: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(d) = done.as_ref() {
        return d.clone();
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dist");
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(repo().join("scripts/release/dist.sh"))
        .arg(assert_cmd::cargo::cargo_bin("rag"))
        .arg(&dir)
        .env("DIST_NATIVE", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let check = Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let sums = text(&check.stdout);
    assert!(check.status.success(), "{sums}");
    assert_eq!(sums.lines().count(), 2, "the tarball and the wheel: {sums}");
    *done = Some(dir.clone());
    dir
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The one file in `dir` whose name ends with `suffix`.
fn artifact(dir: &Path, suffix: &str) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(suffix))
        .unwrap_or_else(|| panic!("no *{suffix} in {}", dir.display()))
}

/// The tarball's install.sh installs from the unpacked folder alone (the models copied with
/// `rag models fetch --from`, as a user with a local copy would), the installed rag answers
/// from any folder, and `install.sh --uninstall` leaves nothing.
#[test]
fn the_release_tarball_installs_and_uninstalls_without_a_trace() {
    let tmp = tempfile::tempdir().unwrap();
    let tarball = artifact(&dist(), "-x86_64-unknown-linux-gnu.tar.gz");
    let unpacked = tmp.path().join("unpacked");
    std::fs::create_dir_all(&unpacked).unwrap();
    let ok = Command::new("tar")
        .arg("xzf")
        .arg(&tarball)
        .current_dir(&unpacked)
        .status()
        .unwrap();
    assert!(ok.success());
    let name = tarball
        .file_name()
        .unwrap()
        .to_string_lossy()
        .replace(".tar.gz", "");
    let script = unpacked.join(&name).join("install.sh");
    let p = Places::in_dir(tmp.path());
    let from = format!("--from={}", repo().join("models").display());
    let run = |args: &[&str]| {
        Command::new(&script)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &p.home)
            .env("XDG_DATA_HOME", &p.data)
            .output()
            .unwrap()
    };
    let prefix = p.prefix.to_str().unwrap();
    let out = run(&[prefix, "--minimal", &from]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("./install.sh --uninstall"), "{err}");
    check_installed(&p);
    check_works_from_any_folder(&p);
    check_uninstalled(&p, || run(&["--uninstall", prefix]));
}

/// A fresh venv, as a user's: `pip` with the user's index settings (PIP_*, proxies) and
/// pip's cache, nothing of the checkout or cargo on PATH.
struct Venv {
    dir: PathBuf,
    places: Places,
}

impl Venv {
    fn new(tmp: &Path) -> Venv {
        let mut places = Places::in_dir(tmp);
        let dir = places.prefix.clone();
        places.path = format!("{}:/usr/bin:/bin", dir.join("bin").display());
        let out = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "python3 -m venv: {}",
            text(&out.stderr)
        );
        Venv { dir, places }
    }

    /// `pip ARGS` of the venv.
    fn pip(&self, args: &[&str]) -> Output {
        let mut c = Command::new(self.dir.join("bin/pip"));
        c.args(args)
            .env_clear()
            .env("PATH", &self.places.path)
            .env("HOME", &self.places.home);
        let real_home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default();
        c.env("PIP_CACHE_DIR", real_home.join(".cache/pip"));
        for (k, v) in std::env::vars_os() {
            let k = k.to_string_lossy().into_owned();
            if k.starts_with("PIP_") && k != "PIP_CACHE_DIR" || k.to_lowercase().ends_with("_proxy")
            {
                c.env(k, v);
            }
        }
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "pip {args:?}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        out
    }

    /// The venv's files, without Python's byte-code caches (pip writes some as it runs).
    fn files(&self) -> Vec<PathBuf> {
        let mut f: Vec<PathBuf> = files(&self.dir)
            .into_iter()
            .filter(|p| !p.components().any(|c| c.as_os_str() == "__pycache__"))
            .collect();
        f.sort();
        f
    }
}

/// The wheel: a manylinux tag, `pip install` into a fresh venv puts rag on PATH with its man
/// pages and completions and brings ONNX Runtime as the onnxruntime package, which rag finds
/// there (so `rag models fetch` copies no second one); rag ingests and answers in an empty
/// folder; `rag models remove` and `pip uninstall` leave the venv and the data folder as they
/// were before.
#[test]
fn the_wheel_installs_into_a_fresh_venv_answers_and_uninstalls_without_a_trace() {
    let wheel = artifact(&dist(), ".whl");
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("rag_offline-")
            && name.contains("-py3-none-manylinux_2_")
            && name.ends_with("_x86_64.whl"),
        "{name}"
    );
    let tmp = tempfile::tempdir().unwrap();
    let v = Venv::new(tmp.path());
    // The dependency first, so that what the uninstall must leave is known.
    v.pip(&["install", "-q", "onnxruntime>=1.24"]);
    let before = v.files();
    v.pip(&["install", "-q", wheel.to_str().unwrap()]);
    let show = text(&v.pip(&["show", "rag-offline"]).stdout);
    assert!(
        show.lines().any(|l| l.trim() == "Requires: onnxruntime"),
        "{show}"
    );
    let p = &v.places;
    let (code, out, err) = p.rag(&["--version"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("rag "), "{out}");

    let fetch = p.rag(&[
        "models",
        "fetch",
        "--minimal",
        &format!("--from={}", repo().join("models").display()),
    ]);
    assert_eq!(fetch.0, 0, "{}", fetch.2);
    assert!(
        fetch
            .2
            .contains("ONNX Runtime from the onnxruntime package beside rag"),
        "{}",
        fetch.2
    );
    let models = p.data.join("rag/models");
    assert!(
        !files(&models)
            .iter()
            .any(|f| f.to_string_lossy().contains("onnxruntime")),
        "no second ONNX Runtime in the model folder: {:?}",
        files(&models)
    );
    check_installed(p);
    check_works_from_any_folder(p);
    // rag finds the package's library on its own, so `rag init` leaves the key at its
    // default rather than pinning a path that pip's next upgrade of onnxruntime renames.
    let (code, _, err) = p.rag(&["init"]);
    assert_eq!(code, 0, "{err}");
    let toml = std::fs::read_to_string(p.work.join("rag.toml")).unwrap();
    assert!(toml.lines().any(|l| l.starts_with("# ort_lib")), "{toml}");
    assert!(!toml.lines().any(|l| l.starts_with("ort_lib")), "{toml}");
    let (_, doctor, _) = p.rag(&["doctor"]);
    let site = v.dir.join("lib");
    assert!(
        doctor.lines().any(|l| l.contains("ONNX Runtime")
            && l.contains(site.to_str().unwrap())
            && l.contains("onnxruntime/capi")),
        "ONNX Runtime from the venv's onnxruntime package: {doctor}"
    );

    // The models are the user's data, outside the venv: `rag models remove` takes them.
    let (code, out, err) = p.rag(&["models", "remove"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("removed "), "{out}");
    check_no_models_left(&p);
    v.pip(&["uninstall", "-y", "-q", "rag-offline"]);
    assert_eq!(v.files(), before, "pip uninstall leaves the venv as it was");
}

/// The hosted release workflow cannot run here: it parses, runs on a tag, builds with
/// `make dist` and uploads the three files scripts/release/dist.sh writes, under the names it
/// writes.
#[test]
fn the_release_workflow_builds_and_uploads_what_make_dist_writes() {
    let text = std::fs::read_to_string(repo().join(".github/workflows/release.yml")).unwrap();
    let v: serde_yaml::Value = serde_yaml::from_str(&text).expect("release.yml is YAML");
    let tags = &v["on"]["push"]["tags"];
    assert_eq!(tags[0].as_str(), Some("v*"), "{tags:?}");
    let steps = v["jobs"]["dist"]["steps"].as_sequence().expect("steps");
    let runs: Vec<&str> = steps.iter().filter_map(|s| s["run"].as_str()).collect();
    assert!(runs.iter().any(|r| r.contains("make dist")), "{runs:?}");
    let upload = steps
        .iter()
        .find(|s| {
            s["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("softprops/action-gh-release"))
        })
        .expect("an upload step");
    let files = upload["with"]["files"].as_str().unwrap();
    let dist = std::fs::read_to_string(repo().join("scripts/release/dist.sh")).unwrap();
    assert!(dist.contains("name=rag-$version-x86_64-unknown-linux-gnu"));
    assert!(dist.contains("tarball=$name.tar.gz") && dist.contains(">SHA256SUMS"));
    let wheel = std::fs::read_to_string(repo().join("scripts/release/wheel.sh")).unwrap();
    assert!(
        wheel.contains("dist=rag_offline-$version") && wheel.contains("*-manylinux_*_x86_64.whl)")
    );
    for want in [
        "dist/rag-*-x86_64-unknown-linux-gnu.tar.gz",
        "dist/rag_offline-*-manylinux_*_x86_64.whl",
        "dist/SHA256SUMS",
    ] {
        assert!(files.lines().any(|l| l.trim() == want), "{want} in {files}");
    }
}

/// cargo-binstall's metadata names the tarball and the binary inside it as dist.sh packs them.
#[test]
fn the_binstall_metadata_points_at_the_release_tarball() {
    let manifest: toml::Table = std::fs::read_to_string(repo().join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let b = &manifest["package"]["metadata"]["binstall"];
    let url = b["pkg-url"].as_str().unwrap();
    assert!(
        url.ends_with("/releases/download/v{ version }/rag-{ version }-{ target }.tar.gz"),
        "{url}"
    );
    assert_eq!(
        b["bin-dir"].as_str(),
        Some("rag-{ version }-{ target }/bin/{ bin }{ binary-ext }")
    );
    assert_eq!(b["pkg-fmt"].as_str(), Some("tgz"));
    // What dist.sh packs for target x86_64-unknown-linux-gnu: NAME/bin/rag in NAME.tar.gz.
    let dist = std::fs::read_to_string(repo().join("scripts/release/dist.sh")).unwrap();
    assert!(dist.contains("name=rag-$version-x86_64-unknown-linux-gnu"));
    assert!(dist.contains(r#"install -m 755 "$bin" "$stage/bin/rag""#));
}

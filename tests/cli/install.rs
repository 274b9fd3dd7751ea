//! `make install` and `make uninstall`: rag installed into a temporary PREFIX, its models in a
//! temporary user data folder, then used from a folder with no rag.toml anywhere above it, as
//! a person with rag on their PATH would; and uninstalled without a trace.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{copy_dir, files, repo};

fn make(target: &str, prefix: &Path, data: &Path, home: &Path) -> std::process::Output {
    Command::new("make")
        .current_dir(repo())
        .args([target, &format!("PREFIX={}", prefix.display())])
        .arg(format!(
            "BIN={}",
            assert_cmd::cargo::cargo_bin("rag").display()
        ))
        .env("XDG_DATA_HOME", data)
        .env("HOME", home)
        .env_remove("RAG_MODELS_DIR")
        .output()
        .unwrap()
}

/// The places of one install: PREFIX, the user data folder, HOME and a work folder.
pub(crate) struct Places {
    pub prefix: PathBuf,
    pub data: PathBuf,
    pub home: PathBuf,
    pub work: PathBuf,
    /// PATH for rag: this process's, or a user's plain one (the wheel's venv).
    pub path: String,
}

impl Places {
    /// Folders under `dir`; HOME and the work folder exist, PREFIX and the data folder not.
    pub fn in_dir(dir: &Path) -> Places {
        let p = Places {
            prefix: dir.join("prefix"),
            data: dir.join("data"),
            home: dir.join("home"),
            work: dir.join("work"),
            path: std::env::var("PATH").unwrap_or_default(),
        };
        for d in [&p.home, &p.work] {
            std::fs::create_dir_all(d).unwrap();
        }
        p
    }

    fn make(&self, target: &str) -> std::process::Output {
        make(target, &self.prefix, &self.data, &self.home)
    }

    /// The installed rag in the work folder, with nothing of this process's environment but
    /// PATH, HOME and XDG_DATA_HOME: exit code, stdout, stderr.
    pub fn rag(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new(self.prefix.join("bin/rag"))
            .current_dir(&self.work)
            .env_clear()
            .env("PATH", &self.path)
            .env("HOME", &self.home)
            .env("XDG_DATA_HOME", &self.data)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// The binary, man pages, completions and models are where `make install` says.
pub(crate) fn check_installed(p: &Places) {
    let installed = files(&p.prefix);
    for want in [
        "bin/rag",
        "share/man/man1/rag.1",
        "share/man/man1/rag-ask.1",
        "share/bash-completion/completions/rag",
        "share/zsh/site-functions/_rag",
        "share/fish/vendor_completions.d/rag.fish",
    ] {
        assert!(
            installed.contains(&PathBuf::from(want)),
            "{want}: {installed:?}"
        );
    }
    let models = p.data.join("rag/models");
    assert!(models.join("SmolLM2-135M-Instruct.Q4_1.gguf").is_file());
    assert!(models.join("minilm/tokenizer.json").is_file());
}

/// A folder nobody configured: no rag.toml here or above (a temporary folder), no models/
/// beside it. The installed binary finds the models in the data folder.
pub(crate) fn check_works_from_any_folder(p: &Places) {
    let models = p.data.join("rag/models");
    copy_dir(&repo().join("fixtures/docs"), &p.work.join("docs"));
    let (code, _, err) = p.rag(&["ingest", "docs"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = p.rag(&["ask", "--json", "How long should bread dough rise?"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["model"]["path"]
            .as_str()
            .unwrap()
            .starts_with(models.to_str().unwrap()),
        "the generator came from the data folder: {v}"
    );
    assert!(!v["answer"].as_str().unwrap().is_empty(), "{v}");
    let (code, out, err) = p.rag(&["doctor"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(models.to_str().unwrap()),
        "doctor says where: {out}"
    );
}

/// The data folder holds no model file and none of the folders rag made for them.
pub(crate) fn check_no_models_left(p: &Places) {
    assert_eq!(
        files(&p.data),
        Vec::<PathBuf>::new(),
        "no model left behind"
    );
    assert!(
        !p.data.join("rag").exists(),
        "the folders it made are gone too"
    );
}

/// `undo` (`make uninstall`, the tarball's `install.sh --uninstall`) removes every file and
/// folder the install made, and again is no error.
pub(crate) fn check_uninstalled(p: &Places, undo: impl Fn() -> std::process::Output) {
    let out = undo();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        files(&p.prefix),
        Vec::<PathBuf>::new(),
        "nothing left under PREFIX"
    );
    check_no_models_left(p);
    assert!(
        !p.prefix.exists(),
        "PREFIX did not exist before the install, so it goes too"
    );
    // Uninstalling again is not an error: there is nothing to remove.
    assert!(undo().status.success());
}

#[test]
fn make_install_gives_a_rag_that_works_from_any_folder_and_uninstall_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let p = Places::in_dir(tmp.path());
    let out = p.make("install");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    check_installed(&p);
    check_works_from_any_folder(&p);
    check_uninstalled(&p, || p.make("uninstall"));
}

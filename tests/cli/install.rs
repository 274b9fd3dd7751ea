//! `make install` and `make uninstall`: rag installed into a temporary PREFIX, its models in a
//! temporary user data folder, then used from a folder with no rag.toml anywhere above it, as
//! a person with rag on their PATH would; and uninstalled without a trace.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{copy_dir, repo};

/// Every file below `dir`, relative to it.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

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

#[test]
fn make_install_gives_a_rag_that_works_from_any_folder_and_uninstall_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (prefix, data, home, work) = (
        tmp.path().join("prefix"),
        tmp.path().join("data"),
        tmp.path().join("home"),
        tmp.path().join("work"),
    );
    for d in [&home, &work] {
        std::fs::create_dir_all(d).unwrap();
    }
    let out = make("install", &prefix, &data, &home);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let installed = files(&prefix);
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
    let models = data.join("rag/models");
    assert!(models.join("SmolLM2-135M-Instruct.Q4_1.gguf").is_file());
    assert!(models.join("minilm/tokenizer.json").is_file());

    // A folder nobody configured: no rag.toml here or above (a temporary folder), no
    // models/ beside it. The installed binary finds the models in the data folder.
    copy_dir(&repo().join("fixtures/docs"), &work.join("docs"));
    let rag = |args: &[&str]| {
        let out = Command::new(prefix.join("bin/rag"))
            .current_dir(&work)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("XDG_DATA_HOME", &data)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, _, err) = rag(&["ingest", "docs"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = rag(&["ask", "--json", "How long should bread dough rise?"]);
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
    let (code, out, err) = rag(&["doctor"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(models.to_str().unwrap()),
        "doctor says where: {out}"
    );

    let out = make("uninstall", &prefix, &data, &home);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        files(&prefix),
        Vec::<PathBuf>::new(),
        "nothing left under PREFIX"
    );
    assert_eq!(files(&data), Vec::<PathBuf>::new(), "no model left behind");
    assert!(
        !data.join("rag").exists(),
        "the folders it made are gone too"
    );
    assert!(
        !prefix.exists(),
        "PREFIX did not exist before the install, so it goes too"
    );
    // Uninstalling again is not an error: there is nothing to remove.
    assert!(make("uninstall", &prefix, &data, &home).status.success());
}

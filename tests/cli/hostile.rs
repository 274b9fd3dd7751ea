//! rag under a hostile file system or an edited record: links to outside and to devices,
//! FIFOs where state files were, lists naming outside paths, fetches killed at every step
//! and one that runs out of room. Whatever is in the way, no command deletes or follows a
//! link out of the folder it owns, and none hangs; each case ends in a clear error or a
//! rebuilt cache, and a later run works (docs/failure-model.md lists them).

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;

use crate::models::{fetch_small, fetch_small_with, listing, MadeUp, PARTED};
use crate::support::{repo, Project};

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
        0,
        "{}",
        p.display()
    );
}

fn remove(p: &Project, models: &Path) -> (i32, String, String) {
    p.run(&["models", "remove", "--dir", models.to_str().unwrap()])
}

/// `rag models remove` in a model folder whose entries link elsewhere: the links go, the
/// files behind them stay; a FIFO is left alone; a killed fetch's leftovers go.
#[test]
fn models_remove_takes_links_as_links_and_nothing_behind_them() {
    let p = Project::empty();
    let tmp = tempfile::tempdir().unwrap();
    let (models, outside) = (tmp.path().join("models"), tmp.path().join("outside"));
    std::fs::create_dir_all(outside.join("minilm")).unwrap();
    std::fs::create_dir_all(&models).unwrap();
    let small = "SmolLM2-135M-Instruct.Q4_1.gguf";
    std::fs::write(outside.join(small), b"GGUF theirs").unwrap();
    std::fs::write(outside.join("minilm/tokenizer.json"), b"{}").unwrap();
    symlink(outside.join(small), models.join(small)).unwrap();
    symlink(outside.join("minilm"), models.join("minilm")).unwrap();
    std::fs::write(models.join("all-MiniLM-L6-v2-int8.onnx"), b"onnx").unwrap();
    mkfifo(&models.join("libonnxruntime.so.1.31.1"));
    // What a fetch killed before the scratch folder held its partial files left.
    std::fs::write(
        models.join(".Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf.part"),
        b"half",
    )
    .unwrap();
    std::fs::create_dir_all(models.join(".fetch-999999999/x")).unwrap();

    let (code, out, err) = remove(&p, &models);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("removed 2 model files"), "{out}");
    assert_eq!(std::fs::read(outside.join(small)).unwrap(), b"GGUF theirs");
    assert!(
        outside.join("minilm/tokenizer.json").is_file(),
        "behind the link: kept"
    );
    assert!(!models.join(small).is_symlink() && !models.join("minilm").is_symlink());
    let left = listing(&models);
    assert_eq!(
        left,
        ["libonnxruntime.so.1.31.1"],
        "only the FIFO is left: {left:?}"
    );
}

/// A fetch killed at each of its steps leaves nothing that `remove` or the next fetch does
/// not clean, and the next fetch installs every file whole.
#[test]
fn a_fetch_killed_at_any_step_leaves_nothing_behind() {
    let p = Project::empty();
    let tmp = tempfile::tempdir().unwrap();
    let wheels = tmp.path().join("wheels");
    let made = MadeUp::write(&wheels);
    for step in ["scratch", "downloaded", "written", "renamed"] {
        let models = tmp.path().join(format!("models-{step}"));
        let kill = [("RAG_FAULT_FETCH", step)];
        let (code, _, err) = fetch_small_with(&p, &wheels, &made.sums, &models, &kill);
        assert_eq!(code, -1, "killed at {step}: {err}");
        let (code, _, err) = remove(&p, &models);
        assert_eq!(code, 0, "{err}");
        assert!(!models.exists(), "after {step}: {:?}", listing(&models));

        let (code, _, _) = fetch_small_with(&p, &wheels, &made.sums, &models, &kill);
        assert_eq!(code, -1, "killed at {step}");
        let (code, out, err) = fetch_small(&p, &wheels, &made.sums, &models);
        assert_eq!(code, 0, "after a kill at {step}: {err}");
        assert!(out.contains("ready: 8 model files"), "{out}");
        let left = listing(&models);
        assert!(
            left.iter()
                .all(|f| !f.contains(".part") && !f.contains(".fetch")),
            "after {step}: {left:?}"
        );
        assert_eq!(
            std::fs::read(models.join(PARTED)).unwrap(),
            made.parts.concat()
        );
    }
}

/// A file given with `--from` that fails its size or checksum is reported as such, never
/// fetched with pip instead; a link to an endless device is refused without reading it.
#[test]
fn a_from_file_that_fails_its_checksum_is_named_and_never_replaced_by_pip() {
    let p = Project::empty();
    let tmp = tempfile::tempdir().unwrap();
    let wheels = tmp.path().join("wheels");
    let made = MadeUp::write(&wheels);
    let from = tmp.path().join("from");
    std::fs::create_dir_all(from.join("minilm")).unwrap();
    for (name, data) in &made.files {
        std::fs::write(from.join(name), data).unwrap();
    }
    let small = "SmolLM2-135M-Instruct.Q4_1.gguf";
    std::fs::write(from.join(small), b"GGUF changed").unwrap();
    let models = tmp.path().join("models");
    let from_s = from.to_str().unwrap();
    let run = || {
        let sums = made.sums.to_str().unwrap();
        let env = [
            ("PIP_NO_INDEX", "1"),
            ("PIP_FIND_LINKS", wheels.to_str().unwrap()),
            ("PIP_CONFIG_FILE", "/dev/null"),
            ("RAG_MODELS_SHA256", sums),
        ];
        let dir = models.to_str().unwrap();
        p.run_env(
            &env,
            &[
                "models",
                "fetch",
                "--minimal",
                "--dir",
                dir,
                "--from",
                from_s,
            ],
        )
    };
    let (code, _, err) = run();
    assert_eq!(code, 1, "{err}");
    let want = made.files.iter().find(|(n, _)| *n == small).unwrap();
    let expected = {
        use sha2::Digest;
        format!("{:x}", sha2::Sha256::digest(&want.1))
    };
    assert!(
        err.contains(&from.join(small).display().to_string())
            && err.contains(&format!("expected {expected}"))
            && err.contains("has sha256"),
        "{err}"
    );
    assert!(!err.contains("pip could not"), "no fall back to pip: {err}");
    assert!(!models.join(small).exists());

    std::fs::remove_file(from.join(small)).unwrap();
    symlink("/dev/zero", from.join(small)).unwrap();
    let (code, _, err) = run();
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not a regular file"), "{err}");
    assert!(
        listing(&models).iter().all(|f| !f.contains(".fetch")),
        "{:?}",
        listing(&models)
    );
}

/// A fetch that runs out of room (a file-size limit stands in for a full disk: writes fail
/// as they would) fails with the reason and leaves nothing; with room it succeeds.
#[test]
fn a_fetch_that_runs_out_of_room_leaves_nothing_and_the_next_one_works() {
    let p = Project::empty();
    let tmp = tempfile::tempdir().unwrap();
    let wheels = tmp.path().join("wheels");
    let made = MadeUp::write(&wheels);
    let models = tmp.path().join("models");
    let out = Command::new("sh")
        .arg("-c")
        // SIGXFSZ ignored: a write past the limit fails with an error, as on a full disk.
        .arg("trap '' XFSZ; ulimit -f 1; exec \"$@\"")
        .arg("sh")
        .arg(assert_cmd::cargo::cargo_bin("rag"))
        .args([
            "models",
            "fetch",
            "--small",
            "--dir",
            models.to_str().unwrap(),
        ])
        .env("PIP_NO_INDEX", "1")
        .env("PIP_FIND_LINKS", &wheels)
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env("PIP_NO_CACHE_DIR", "1")
        .env("RAG_MODELS_SHA256", &made.sums)
        .current_dir(p.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("error"), "{err}");
    let left = listing(&models);
    assert!(
        left.iter()
            .all(|f| !f.contains(".part") && !f.contains(".fetch")),
        "{left:?}"
    );
    let (code, _, err) = fetch_small(&p, &wheels, &made.sums, &models);
    assert_eq!(code, 0, "{err}");
}

/// State files replaced by FIFOs: `rag ask` neither hangs nor fails; the caches are rebuilt
/// as regular files.
#[test]
fn fifos_in_place_of_state_files_are_set_aside_not_waited_on() {
    let p = Project::with_docs();
    p.ingest();
    let state = p.path().join(".rag");
    for name in ["speeds.json", "model-hashes.json"] {
        let f = state.join(name);
        let _ = std::fs::remove_file(&f);
        mkfifo(&f);
    }
    let (code, out, err) = p.run(&[
        "ask",
        "--json",
        "-k",
        "2",
        "--max-tokens",
        "8",
        "How does the lighthouse lamp rotate?",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"answer\""), "{out}");
    for name in ["speeds.json", "model-hashes.json"] {
        assert!(
            std::fs::metadata(state.join(name)).unwrap().is_file(),
            "{name} rebuilt"
        );
    }
}

/// `make uninstall` (scripts/release/install.sh --uninstall) with an edited list: an absolute path
/// outside PREFIX, a `../` path, a file in the user's home, a path through a link, a folder
/// outside. Each is refused by name and nothing at all is removed; a link listed itself goes
/// as a link.
#[test]
fn uninstall_refuses_a_list_naming_paths_outside_and_removes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let (prefix, home, outside) = (t.join("prefix"), t.join("home"), t.join("outside"));
    for d in [
        prefix.join("share/rag"),
        prefix.join("bin"),
        home.clone(),
        outside.clone(),
    ] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(outside.join("victim"), b"keep").unwrap();
    std::fs::write(home.join(".bashrc"), b"keep").unwrap();
    symlink(&outside, prefix.join("link")).unwrap();
    let list = prefix.join("share/rag/installed-files");
    let ours = format!("file:{}", prefix.join("bin/rag").display());
    let uninstall = |lines: &[String], dirs: Option<&str>| {
        std::fs::write(prefix.join("bin/rag"), b"bin").unwrap();
        std::fs::write(&list, lines.join("\n") + "\n").unwrap();
        if let Some(d) = dirs {
            std::fs::write(list.with_extension("dirs"), d).unwrap();
        }
        let out = Command::new("bash")
            .arg(repo().join("scripts/release/install.sh"))
            .arg("--uninstall")
            .arg(&prefix)
            .env("HOME", &home)
            .env_remove("XDG_DATA_HOME")
            .output()
            .unwrap();
        let _ = std::fs::remove_file(list.with_extension("dirs"));
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let p = |x: &Path| x.display().to_string();
    let hostile = [
        format!("file:{}", p(&outside.join("victim"))),
        format!("file:{}/../outside/victim", p(&prefix)),
        format!("file:{}", p(&home.join(".bashrc"))),
        format!("file:{}", p(&prefix.join("link/victim"))),
        "rm -rf /".to_string(),
    ];
    for bad in &hostile {
        let (code, err) = uninstall(&[ours.clone(), bad.clone()], None);
        assert_eq!(code, Some(1), "{bad}: {err}");
        assert!(err.contains("nothing was removed"), "{bad}: {err}");
        assert!(prefix.join("bin/rag").is_file(), "{bad}: nothing removed");
    }
    let (code, err) = uninstall(&[ours.clone()], Some(&p(&outside)));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&p(&outside)), "{err}");
    assert!(prefix.join("bin/rag").is_file());
    // A listed link goes as a link; the files behind it stay.
    let link = format!("file:{}", p(&prefix.join("link")));
    let (code, err) = uninstall(&[ours, link], None);
    assert_eq!(code, Some(0), "{err}");
    assert!(!prefix.join("link").is_symlink() && !prefix.join("bin/rag").exists());
    assert_eq!(std::fs::read(outside.join("victim")).unwrap(), b"keep");
    assert_eq!(std::fs::read(home.join(".bashrc")).unwrap(), b"keep");
}

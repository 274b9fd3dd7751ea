//! The project around the index: discovery of rag.toml, `rag init`, `rag config`,
//! `rag status`, `ingest --check` / `--files-from`, completions and man pages.

use crate::support::Project;

#[test]
fn rag_finds_the_project_config_from_a_subfolder_and_says_where_each_setting_came_from() {
    let p = Project::with_docs();
    let sub = p.path().join("docs");
    let out = p
        .rag()
        .current_dir(&sub)
        .env("RAG_RETRIEVAL_TOP_K", "7")
        .args(["config", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let root = std::fs::canonicalize(p.path()).unwrap();
    assert_eq!(
        v["config_file"],
        root.join("rag.toml").to_str().unwrap(),
        "{v}"
    );
    let find = |key: &str| {
        v["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["key"] == key)
            .cloned()
            .unwrap_or_else(|| panic!("{key} missing from {v}"))
    };
    assert_eq!(
        find("retrieval.top_k")["source"]["name"],
        "RAG_RETRIEVAL_TOP_K"
    );
    assert_eq!(find("retrieval.top_k")["value"], 7);
    assert_eq!(find("llm.max_tokens")["source"]["from"], "file");
    assert_eq!(find("llm.n_ctx")["source"]["from"], "default");
    // The index is the project's, found from the subfolder: a search there works.
    p.ingest();
    let out = p
        .rag()
        .current_dir(&sub)
        .args(["search", "--json", "-k", "1", "kneading dough"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("docs/bread.rst"));
}

#[test]
fn unknown_settings_are_errors_naming_the_nearest_key() {
    let p = Project::empty();
    let (code, _, err) = p.run_env(&[("RAG_LLM_MAX_TOKEN", "9")], &["status"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("did you mean RAG_LLM_MAX_TOKENS?"), "{err}");
    let toml = std::fs::read_to_string(p.path().join("rag.toml")).unwrap();
    std::fs::write(p.path().join("rag.toml"), format!("{toml}top_kk = 3\n")).unwrap();
    let (code, _, err) = p.run(&["status"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("unknown key llm.top_kk; did you mean"),
        "{err}"
    );
}

#[test]
fn init_writes_a_working_config_and_ignores_the_index() {
    let p = Project::with_docs();
    std::fs::remove_file(p.path().join("rag.toml")).unwrap();
    let (code, _, err) = p.run(&["init"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("rag ingest ."), "the next commands: {err}");
    let ignore = std::fs::read_to_string(p.path().join(".gitignore")).unwrap();
    assert!(ignore.lines().any(|l| l == ".rag/"), "{ignore}");
    let (code, _, err) = p.run(&["init"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--force"), "{err}");
    // The written config finds the models: ingest and search work with nothing else, and
    // the config file itself is not indexed.
    let v = p.json(&["ingest", "--json", "."]);
    assert_eq!(v["files_added"], 7, "{v}");
    let (code, out, _) = p.run(&["config"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("top_k = 5") && out.contains("# default"),
        "{out}"
    );
}

#[test]
fn status_reports_the_index_and_what_changed_since_the_last_ingest() {
    let p = Project::with_docs();
    let (code, _, err) = p.run(&["status"]);
    assert_eq!(code, 3, "no index yet: {err}");
    p.ingest();
    let v = p.json(&["status", "--json"]);
    assert_eq!(v["files"], 7, "{v}");
    assert_eq!(v["embed_dim"], 384, "{v}");
    assert_eq!(v["files_changed"], 0, "{v}");
    assert!(v["table_versions"].as_u64().unwrap() >= 1, "{v}");
    assert!(v["generators"][0]["bytes"].as_u64().unwrap() > 0, "{v}");
    std::fs::write(p.path().join("docs/gardening.txt"), "Changed.\n").unwrap();
    std::fs::remove_file(p.path().join("docs/checksum.rs")).unwrap();
    let v = p.json(&["status", "--json"]);
    assert_eq!(
        (v["files_changed"].as_u64(), v["files_missing"].as_u64()),
        (Some(1), Some(1)),
        "{v}"
    );
}

#[test]
fn ingest_check_fails_on_a_stale_index_and_writes_nothing() {
    let p = Project::with_docs();
    let (code, out, _) = p.run(&["ingest", "--check", "docs"]);
    assert_eq!(code, 1, "no index: every file is to add");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("add")).count(),
        7,
        "{out}"
    );
    assert!(
        !p.path().join(".rag/index.json").exists(),
        "--check wrote the index"
    );
    p.ingest();
    let (code, out, err) = p.run(&["ingest", "--check", "docs"]);
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    p.doc("new.md", "# New\n\nA new page.\n");
    let (code, out, _) = p.run(&["ingest", "--check", "docs"]);
    assert_eq!((code, out.trim()), (1, "add     docs/new.md"));
    p.ingest();
    std::fs::write(p.path().join("docs/gardening.txt"), "Edited.\n").unwrap();
    let (code, out, _) = p.run(&["ingest", "--check", "docs"]);
    assert_eq!((code, out.trim()), (1, "change  docs/gardening.txt"));
    p.ingest();
    std::fs::remove_file(p.path().join("docs/new.md")).unwrap();
    let (code, out, _) = p.run(&["ingest", "--check", "docs"]);
    assert_eq!((code, out.trim()), (1, "remove  docs/new.md"));
    let (code, out, _) = p.run(&["ingest", "--check", "--json", "docs"]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (code, v["dry_run"]["removed"][0].as_str()),
        (1, Some("docs/new.md"))
    );
}

#[test]
fn files_from_ingests_exactly_the_listed_paths_and_removes_listed_deletions() {
    let p = Project::with_docs();
    p.ingest();
    std::fs::write(
        p.path().join("docs/gardening.txt"),
        "Tomatoes need stakes.\n",
    )
    .unwrap();
    std::fs::write(
        p.path().join("docs/bread.rst"),
        "Bread\n=====\n\nRye needs time.\n",
    )
    .unwrap();
    std::fs::remove_file(p.path().join("docs/checksum.rs")).unwrap();
    let list = p.path().join("changed.txt");
    // bread.rst changed but is not listed: it stays as indexed.
    std::fs::write(&list, "docs/gardening.txt\ndocs/checksum.rs\n\n").unwrap();
    let v = p.json(&["ingest", "--json", "--files-from", list.to_str().unwrap()]);
    assert_eq!(
        (v["files_changed"].as_u64(), v["files_removed"].as_u64()),
        (Some(1), Some(1)),
        "{v}"
    );
    assert_eq!(v["files_seen"], 1, "{v}");
    let (_, out, _) = p.run(&["ingest", "--check", "docs"]);
    assert_eq!(out.trim(), "change  docs/bread.rst");
    // From stdin.
    let out = p
        .rag()
        .args(["ingest", "--json", "--files-from", "-"])
        .write_stdin("docs/bread.rst\n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let (code, _, _) = p.run(&["ingest", "--check", "docs"]);
    assert_eq!(code, 0);
}

#[test]
fn completions_and_man_pages_come_from_the_real_flags() {
    let p = Project::empty();
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let (code, out, err) = p.run(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        assert!(
            out.contains("files-from"),
            "{shell} completion lacks a flag"
        );
    }
    let dir = p.path().join("man");
    let (code, _, err) = p.run(&["man", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let page = std::fs::read_to_string(dir.join("rag-ingest.1")).unwrap();
    assert!(page.contains("files\\-from"), "{page}");
}

/// `rag ingest --watch --json docs` in `p`, and its batch reports as they are printed.
fn start_watch(
    p: &Project,
) -> (
    std::process::Child,
    std::sync::mpsc::Receiver<serde_json::Value>,
) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("rag"))
        .current_dir(p.path())
        .env_clear()
        .args(["ingest", "--watch", "--json", "docs"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
            let _ = tx.send(v);
        }
    });
    (child, rx)
}

/// Ctrl-C to a running `rag`: its exit status once it has stopped.
fn stop_with_ctrl_c(mut child: std::process::Child) -> std::process::ExitStatus {
    use std::time::Duration;
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let started = std::time::Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        // A watchdog against a hang, not a speed bound: generous for a loaded machine.
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "--watch did not stop"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn watch_keeps_the_index_current_and_stops_cleanly_on_ctrl_c() {
    use std::time::Duration;
    let p = Project::with_docs();
    let (child, rx) = start_watch(&p);
    let next = || {
        rx.recv_timeout(Duration::from_secs(60))
            .expect("a batch report")
    };
    let docs = |f: &str| p.path().join("docs").join(f);
    assert_eq!(
        next()["files_added"],
        7,
        "the first batch indexes everything"
    );
    // Let the watches settle, then edit: a new file in a new folder, and a deletion.
    std::thread::sleep(Duration::from_millis(300));
    p.doc(
        "new/otters.md",
        "# Otters\n\nSea otters hold hands while they sleep.\n",
    );
    let v = next();
    assert_eq!(v["files_added"], 1, "{v}");
    std::fs::remove_file(docs("checksum.rs")).unwrap();
    std::fs::write(docs(".draft.md.swp"), "editor noise").unwrap();
    let v = next();
    let counts = |v: &serde_json::Value, a: &str, b: &str| (v[a].as_u64(), v[b].as_u64());
    assert_eq!(
        counts(&v, "files_removed", "files_added"),
        (Some(1), Some(0)),
        "{v}"
    );
    std::fs::write(docs("gardening.txt"), "Leeks want deep trenches.\n").unwrap();
    let v = next();
    assert_eq!(v["files_changed"], 1, "an edit: {v}");
    std::fs::rename(docs("bread.rst"), docs("new/bread.rst")).unwrap();
    let v = next();
    assert_eq!(
        counts(&v, "files_added", "files_removed"),
        (Some(1), Some(1)),
        "a rename: {v}"
    );
    assert!(
        v["chunks_reused"].as_u64().unwrap() > 0,
        "a rename reuses its vectors: {v}"
    );
    // The index answers with the new file.
    let s = p.json(&[
        "search",
        "--json",
        "-k",
        "1",
        "otters sleeping holding hands",
    ]);
    assert_eq!(crate::support::hit_paths(&s)[0], "docs/new/otters.md");
    // Ctrl-C: a clean stop with exit 0.
    assert_eq!(stop_with_ctrl_c(child).code(), Some(0));
}

#[test]
fn verbose_logs_color_and_version() {
    let p = Project::with_docs();
    let (code, _, err) = p.run(&["-v", "ingest", "docs"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("ingest plan") && err.contains("embedder loaded"),
        "{err}"
    );
    let (code, _, err) = p.run(&["ingest", "docs"]);
    assert_eq!(code, 0);
    assert!(!err.contains("ingest plan"), "no logs without -v: {err}");
    let (code, _, err) = p.run_env(&[("RAG_LOG", "rag=info")], &["search", "x"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("retrieved"), "{err}");
    let (code, _, err) = p.run_env(&[("RAG_LOG", "rag=loud")], &["search", "x"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("RAG_LOG"), "{err}");
    // Colour only when asked (stderr is a pipe here); NO_COLOR wins over auto.
    let (_, _, err) = p.run(&["--color", "always", "status", "--index", "nowhere"]);
    assert!(err.contains("\x1b[1;31mrag: error:\x1b[0m"), "{err:?}");
    let (_, _, err) = p.run(&["status", "--index", "nowhere"]);
    assert!(err.starts_with("rag: error:"), "{err:?}");
    // --version reads no config and loads no library one names: here the project's
    // rag.toml points embed.ort_lib at a file that is no library, which an attempt to load
    // it would report.
    let bogus = p.path().join("not-a-library.so");
    std::fs::write(&bogus, b"not a library").unwrap();
    let toml = p.path().join("rag.toml");
    let before = std::fs::read_to_string(&toml).unwrap();
    let pointed: String = before
        .lines()
        .map(|l| match l.starts_with("ort_lib = ") {
            true => format!("ort_lib = {:?}\n", bogus.display().to_string()),
            false => format!("{l}\n"),
        })
        .collect();
    std::fs::write(&toml, pointed).unwrap();
    assert!(std::fs::read_to_string(&toml)
        .unwrap()
        .contains("not-a-library"));
    let (code, out, err) = p.run(&["--version"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(env!("CARGO_PKG_VERSION")), "{out}");
    assert!(out.contains("llama.cpp: llama-cpp-sys-2"), "{out}");
    assert!(out.contains("ONNX Runtime: loaded at run time"), "{out}");
    assert!(
        !out.contains("not-a-library") && !err.contains("not-a-library"),
        "{out}{err}"
    );
    std::fs::write(&toml, before).unwrap();
}

/// Paths that differ between machines and runs, replaced for snapshots.
fn redact(p: &Project, text: &str) -> String {
    let root = std::fs::canonicalize(p.path()).unwrap();
    let text = text
        .replace(root.to_str().unwrap(), "[PROJECT]")
        .replace(p.path().to_str().unwrap(), "[PROJECT]")
        .replace(crate::support::repo().to_str().unwrap(), "[REPO]");
    // `rag config` pads values to align the source column; the padding depends on the
    // length of the paths just replaced.
    text.lines()
        .map(|l| match l.rsplit_once(" # ") {
            Some((value, source)) if !l.starts_with('#') => {
                format!("{}  # {source}\n", value.trim_end())
            }
            _ => format!("{l}\n"),
        })
        .collect()
}

#[test]
fn help_of_every_command_is_stable() {
    let p = Project::empty();
    let mut all = String::new();
    for cmd in [
        "",
        "ingest",
        "ask",
        "chat",
        "mcp",
        "serve",
        "eval",
        "doctor",
        "init",
        "config",
        "status",
        "completions",
        "man",
        "search",
        "models",
    ] {
        let args: Vec<&str> = [cmd, "--help"]
            .into_iter()
            .filter(|a| !a.is_empty())
            .collect();
        let (code, out, err) = p.run(&args);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("Examples:"),
            "rag {cmd} --help has no examples"
        );
        all.push_str(&format!("===== rag {cmd} --help\n{out}\n"));
    }
    insta::assert_snapshot!(all);
}

#[test]
fn config_with_a_file_a_variable_and_a_flag() {
    let p = Project::empty();
    let out = p
        .rag()
        // Only this test's variable: not the threads every test pins (support::Project::rag).
        .env_remove("RAG_LLM_THREADS")
        .env_remove("RAG_LLM_THREADS_BATCH")
        .env("RAG_RETRIEVAL_TOP_K", "7")
        .args(["--index", "elsewhere", "config"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    insta::assert_snapshot!(redact(&p, &String::from_utf8_lossy(&out.stdout)));
}

#[test]
fn status_json_after_an_ingest() {
    let p = Project::with_docs();
    p.ingest();
    let mut v = p.json(&["status", "--json"]);
    // The commit time, and sizes that vary with LanceDB's file layout.
    for key in ["last_ingest_unix", "disk_bytes", "table_versions"] {
        assert!(v[key].as_u64().unwrap() > 0, "{key}: {v}");
        v[key] = serde_json::json!("[varies]");
    }
    let text = serde_json::to_string_pretty(&v).unwrap();
    insta::assert_snapshot!(redact(&p, &text));
}

use crate::support::Project;

#[test]
fn ingest_reports_every_format_and_reingest_is_incremental() {
    let p = Project::with_docs();
    let first = p.ingest();
    assert_eq!(first["files_seen"], 7, "{first}");
    assert_eq!(first["files_added"], 7, "{first}");
    assert!(first["chunks_written"].as_u64().unwrap() >= 7, "{first}");
    assert_eq!(
        first["files_failed"].as_array().unwrap().len(),
        0,
        "{first}"
    );

    let again = p.ingest();
    assert_eq!(again["files_unchanged"], 7, "{again}");
    assert_eq!(again["chunks_written"], 0, "{again}");

    // Edit one file, delete another.
    let garden = p.path().join("docs/gardening.txt");
    std::fs::write(&garden, "Notes on a garden\n\nPotatoes like loose soil.\n").unwrap();
    std::fs::remove_file(p.path().join("docs/checksum.rs")).unwrap();
    let third = p.ingest();
    assert_eq!(third["files_changed"], 1, "{third}");
    assert_eq!(third["files_removed"], 1, "{third}");
    assert_eq!(third["files_unchanged"], 5, "{third}");

    let v = p.json(&[
        "search",
        "--json",
        "-k",
        "10",
        "--mode",
        "text",
        "adler32 checksum",
    ]);
    let paths = crate::support::hit_paths(&v);
    assert!(
        !paths.iter().any(|p| p == "docs/checksum.rs"),
        "deleted file still indexed: {paths:?}"
    );
}

#[test]
fn dry_run_writes_nothing() {
    let p = Project::with_docs();
    let v = p.json(&["ingest", "--json", "--dry-run", "docs"]);
    assert_eq!(v["dry_run"]["added"].as_array().unwrap().len(), 7, "{v}");
    assert!(!p.path().join(".rag/index.json").exists());
}

#[test]
fn every_format_is_searchable() {
    let p = Project::with_docs();
    p.ingest();
    for (query, path) in [
        ("Kestrel relief valve pressure bar", "docs/pump-manual.pdf"),
        ("kneading dough bread", "docs/bread.rst"),
        ("adler32 checksum modulo", "docs/checksum.rs"),
        ("compost tomatoes basil", "docs/gardening.txt"),
        ("lighthouse granite Kestrel Point", "docs/lighthouse.html"),
    ] {
        let v = p.json(&["search", "--json", "-k", "1", query]);
        assert_eq!(v["hits"][0]["path"], path, "{query}: {v}");
    }
    // The HTML's script and navigation are not indexed; reST headings are.
    let v = p.json(&[
        "search",
        "--json",
        "-k",
        "10",
        "--mode",
        "text",
        "tracking console",
    ]);
    assert!(
        v["hits"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| !h["text"].as_str().unwrap().contains("tracking")),
        "{v}"
    );
    let v = p.json(&["search", "--json", "-k", "1", "proofing dough rise"]);
    assert_eq!(v["hits"][0]["heading"], "Baking bread", "{v}");
    let text = v["hits"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("\n## Method") && text.contains("\n### Proofing"),
        "reST levels: {v}"
    );
}

#[test]
fn bad_input_is_reported_and_the_rest_is_stored() {
    let p = Project::empty();
    let bad = p.path().join("bad");
    let deep = bad.join("a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p");
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(
        deep.join("deep.md"),
        "# Deep\n\nA file twenty folders down about otters.\n",
    )
    .unwrap();
    std::fs::write(bad.join("binary.txt"), b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").unwrap();
    std::fs::write(bad.join("empty.md"), b"").unwrap();
    std::fs::write(
        bad.join("latin1.txt"),
        b"Caf\xe9 cr\xe8me br\xfbl\xe9e recipe with vanilla.\n",
    )
    .unwrap();
    std::fs::write(bad.join("huge.txt"), vec![b'x'; 20 * 1024 * 1024]).unwrap();
    std::fs::write(
        bad.join("notes with spaces.md"),
        "# Spaces\n\nOtters hold hands while sleeping.\n",
    )
    .unwrap();
    std::fs::write(
        bad.join("café-ñandú.md"),
        "# Ñandú\n\nThe rhea is a flightless bird.\n",
    )
    .unwrap();
    std::fs::write(
        bad.join("broken.pdf"),
        b"%PDF-1.7\nthis is not really a pdf",
    )
    .unwrap();

    let (code, out, err) = p.run(&["ingest", "--json", "bad"]);
    assert_eq!(
        code, 7,
        "some files fail, the rest are stored: {out}\n{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let failed: Vec<&str> = v["files_failed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    for f in ["bad/binary.txt", "bad/empty.md", "bad/broken.pdf"] {
        assert!(failed.contains(&f), "{f} not reported: {v}");
    }
    // Too large is a policy, not a failure: listed as skipped.
    assert_eq!(v["files_skipped"][0]["path"], "bad/huge.txt", "{v}");
    assert!(!failed.contains(&"bad/huge.txt"), "{v}");
    assert!(
        err.contains("latin1.txt") && err.contains("UTF-8"),
        "lossy decoding is a warning: {err}"
    );
    let v = p.json(&[
        "search",
        "--json",
        "-k",
        "10",
        "--mode",
        "text",
        "otters rhea vanilla",
    ]);
    let paths = crate::support::hit_paths(&v);
    for f in [
        "bad/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/deep.md",
        "bad/notes with spaces.md",
        "bad/café-ñandú.md",
        "bad/latin1.txt",
    ] {
        assert!(paths.iter().any(|p| p == f), "{f} not stored: {paths:?}");
    }
}

#[test]
fn a_second_ingest_waits_for_the_lock() {
    let p = Project::with_docs();
    p.ingest();
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .open(p.path().join(".rag/ingest.lock"))
        .unwrap();
    lock.try_lock().unwrap();
    let (code, _, err) = p.run(&["ingest", "docs"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("another `rag ingest`"), "{err}");
    drop(lock);
    // A lock left by a dead process is free again: the OS released it.
    let (code, _, err) = p.run(&["ingest", "docs"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn changed_chunk_settings_need_a_rebuild() {
    let p = Project::with_docs();
    p.ingest();
    let out = p
        .rag()
        .env("RAG_CHUNK_MAX_TOKENS", "150")
        .args(["ingest", "docs"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("--rebuild"), "{err}");
    let out = p
        .rag()
        .env("RAG_CHUNK_MAX_TOKENS", "150")
        .args(["ingest", "--rebuild", "docs"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn kill_9_mid_ingest_then_rerun_matches_a_clean_ingest() {
    let corpus = crate::support::repo().join("corpus");
    let clean = Project::empty();
    crate::support::copy_dir(&corpus, &clean.path().join("corpus"));
    let (code, _, err) = clean.run(&["ingest", "corpus"]);
    assert_eq!(code, 0, "{err}");
    let want = rag::store::chunk_ids_blocking(&clean.path().join(".rag")).unwrap();

    let crashed = Project::empty();
    crate::support::copy_dir(&corpus, &crashed.path().join("corpus"));
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("rag"))
        .current_dir(crashed.path())
        .args(["-q", "ingest", "corpus"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed by progress, not by a guess at the time: once the chunks table holds a second
    // version (190 chunks are committed 64 at a time), while the process still runs.
    let versions = crashed.path().join(".rag/chunks.lance/_versions");
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the ingest ended ({status}) before it could be killed between commits");
        }
        let n = std::fs::read_dir(&versions).map_or(0, |d| d.count());
        if n >= 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the ingest was still running when killed: {status}"
    );

    // The interrupted index opens and answers.
    if crashed.path().join(".rag/index.json").exists() {
        let (code, _, err) = crashed.run(&["search", "--mode", "text", "KV cache"]);
        assert_eq!(code, 0, "{err}");
    }
    let (code, _, err) = crashed.run(&["ingest", "corpus"]);
    assert_eq!(code, 0, "{err}");
    let got = rag::store::chunk_ids_blocking(&crashed.path().join(".rag")).unwrap();
    assert_eq!(got.len(), want.len(), "no duplicate and no missing chunk");
    assert_eq!(got, want);
}

#[test]
fn include_and_exclude_globs_choose_files() {
    let p = Project::with_docs();
    let out = p
        .rag()
        .env("RAG_CHUNK_EXCLUDE", "docs/*.pdf, docs/*.rs")
        .args(["ingest", "--json", "docs"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["files_seen"], 5, "{v}");
    std::fs::write(
        p.path().join("rag.toml"),
        std::fs::read_to_string(p.path().join("rag.toml"))
            .unwrap()
            .replace("[embed]", "[chunk]\ninclude = [\"**/*.md\"]\n\n[embed]"),
    )
    .unwrap();
    let v = p.json(&["ingest", "--json", "--dry-run", "docs"]);
    assert_eq!(v["files_seen"], 2, "{v}");
}

/// The sweep: a changed file is being replaced when the process dies after each of
/// the commits in turn; the file is then reverted to its old content (and mtime) before the
/// next run. Every kill point must end, after one more ingest, with exactly the chunks of a
/// clean ingest of what is on disk.
#[test]
fn a_crash_at_any_commit_then_a_reverted_file_loses_nothing() {
    let clean = Project::with_docs();
    clean.ingest();
    let want = rag::store::chunk_ids_blocking(&clean.path().join(".rag")).unwrap();
    let file = "docs/orbital-station.md";
    // Commits when one changed file is replaced: forget its record, swap its chunks (one
    // merge_insert), record it. Past the last one the run completes normally.
    for crash_at in 1..=4 {
        let p = Project::with_docs();
        p.ingest();
        let path = p.path().join(file);
        let old = std::fs::read(&path).unwrap();
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        std::fs::write(&path, "# Changed\n\nEntirely new text about otters.\n").unwrap();
        let at = crash_at.to_string();
        let (code, _, err) = p.run_env(&[("RAG_TEST_CRASH_AT", at.as_str())], &["ingest", "docs"]);
        if crash_at < 4 {
            assert_eq!(
                code, -1,
                "killed at commit {crash_at} (by the signal): {err}"
            );
        }
        std::fs::write(&path, &old).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        if crash_at == 2 {
            // Killed right after the chunk swap: the new version is searchable, whole.
            let (code, out, _) = p.run(&["search", "--mode", "text", "otters"]);
            assert_eq!(code, 0);
            assert!(out.contains(file), "{out}");
        }
        let (code, _, err) = p.run(&["ingest", "docs"]);
        assert!(code == 0 || code == 7, "{err}");
        let got = rag::store::chunk_ids_blocking(&p.path().join(".rag")).unwrap();
        assert_eq!(
            got, want,
            "crash after commit {crash_at}: the index matches the disk"
        );
    }
}

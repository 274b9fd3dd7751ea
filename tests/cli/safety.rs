//! Mistakes that must not lose the index: a failed rebuild, an ingest from another project,
//! a run that would prune most of the index.

use crate::support::Project;

fn hits(p: &Project) -> usize {
    let v = p.json(&[
        "search",
        "--json",
        "--mode",
        "text",
        "-k",
        "10",
        "lighthouse",
    ]);
    v["hits"].as_array().unwrap().len()
}

#[test]
fn a_failed_rebuild_leaves_the_old_index_untouched() {
    let p = Project::with_docs();
    p.ingest();
    let before = hits(&p);
    assert!(before > 0);
    let (code, _, err) = p.run_env(
        &[("RAG_EMBED_MODEL", "no-such-model.onnx")],
        &["ingest", "--rebuild", "docs"],
    );
    assert_eq!(code, 5, "{err}");
    assert_eq!(hits(&p), before, "the old index still answers");
    assert!(
        !p.path().join(".rag/next").exists(),
        "a later run cleans up: {err}"
    );
    // A rebuild that works replaces it, and leaves no build folder behind.
    let (code, _, err) = p.run(&["ingest", "--rebuild", "docs"]);
    assert!(code == 0 || code == 7, "{err}");
    assert_eq!(hits(&p), before);
    let (code, out, _) = p.run(&["ingest", "--json", "docs"]);
    assert!(code == 0 || code == 7);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["files_added"], 0, "the rebuilt index is complete: {v}");
    assert!(!p.path().join(".rag/next").exists());
}

#[test]
fn an_index_refuses_another_project_root_but_follows_a_moved_one() {
    let a = Project::with_docs();
    a.ingest();
    let b = Project::with_docs();
    let index = a.path().join(".rag");
    let (code, _, err) = b.run(&["--index", index.to_str().unwrap(), "ingest", "docs"]);
    assert_eq!(code, 2, "{err}");
    let a_root = std::fs::canonicalize(a.path()).unwrap();
    let b_root = std::fs::canonicalize(b.path()).unwrap();
    assert!(
        err.contains(a_root.to_str().unwrap()) && err.contains(b_root.to_str().unwrap()),
        "both roots named: {err}"
    );
    assert!(err.contains("--change-root"), "{err}");
    assert!(hits(&a) > 0, "A's index is intact");
    let (code, _, err) = b.run(&[
        "--index",
        index.to_str().unwrap(),
        "ingest",
        "--change-root",
        "docs",
    ]);
    assert!(code == 0 || code == 7, "{err}");

    // A project folder that moved (its old root is gone) keeps its index.
    let moved = tempfile::tempdir().unwrap();
    let to = moved.path().join("project");
    std::fs::rename(b.path(), &to).unwrap();
    std::fs::write(
        to.join("rag.toml"),
        std::fs::read_to_string(a.path().join("rag.toml")).unwrap(),
    )
    .unwrap();
    let out = assert_cmd::Command::cargo_bin("rag")
        .unwrap()
        .current_dir(&to)
        .env_clear()
        .args([
            "--index",
            index.to_str().unwrap(),
            "ingest",
            "--json",
            "docs",
        ])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(v["files_added"], 0, "{v}");
    assert_eq!(v["files_removed"], 0, "{v}");
}

#[test]
fn removing_most_of_the_index_needs_prune_all() {
    let p = Project::with_docs();
    let v = p.ingest();
    let stored = v["files_added"].as_u64().unwrap();
    assert!(stored >= 4, "{v}");
    let docs = p.path().join("docs");
    let mut names: Vec<_> = std::fs::read_dir(&docs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    for f in &names[1..] {
        std::fs::remove_file(f).unwrap();
    }
    let (code, _, err) = p.run(&["ingest", "docs"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--prune-all") && err.contains(&format!("of the {stored} indexed files")),
        "{err}"
    );
    assert!(hits(&p) > 0 || stored > 0);
    let (code, out, _) = p.run(&["ingest", "--dry-run", "docs"]);
    assert_eq!(code, 0);
    assert_eq!(
        out.lines().filter(|l| l.starts_with("remove")).count() as u64,
        stored - 1,
        "{out}"
    );
    let (code, out, err) = p.run(&["ingest", "--json", "--prune-all", "docs"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["files_removed"].as_u64().unwrap(), stored - 1, "{v}");
}

#[test]
fn hostile_text_and_a_closed_stderr_do_not_reach_or_break_the_terminal() {
    use std::os::unix::fs::PermissionsExt;
    let p = Project::empty();
    p.doc(
        "evil.md",
        "# Otters\n\nOtters \x1b]0;pwned\x07hold \x1b[2Jhands while sleeping.\n",
    );
    p.ingest();
    let mode = std::fs::metadata(p.path().join(".rag"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o700,
        "the index holds a copy of the documents"
    );
    // And every file in it is its owner's only.
    fn modes(dir: &std::path::Path, out: &mut Vec<(String, u32)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            out.push((
                e.path().display().to_string(),
                m.permissions().mode() & 0o777,
            ));
            if m.is_dir() {
                modes(&e.path(), out);
            }
        }
    }
    let mut all = Vec::new();
    modes(&p.path().join(".rag"), &mut all);
    assert!(all.len() > 5, "{all:?}");
    for (path, mode) in &all {
        assert_eq!(mode & 0o077, 0, "{path} is {mode:o}");
    }

    let (code, out, _) = p.run(&["search", "otters sleeping"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("Otters") && !out.contains('\x1b') && !out.contains('\x07'),
        "{out:?}"
    );
    assert!(out.contains('\u{241b}'), "shown, not executed: {out:?}");
    let v = p.json(&["search", "--json", "otters sleeping"]);
    assert!(
        v["hits"][0]["text"].as_str().unwrap().contains('\x1b'),
        "JSON keeps the text exactly"
    );

    // stderr closed by the reader: no panic (exit 101), the command's own exit code.
    let closed_stderr = |args: &[&str]| {
        let (r, w) = std::io::pipe().unwrap();
        drop(r);
        std::process::Command::new(assert_cmd::cargo::cargo_bin("rag"))
            .current_dir(p.path())
            .args(args)
            .stderr(w)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap()
    };
    assert_eq!(closed_stderr(&["ingest", "docs"]).code(), Some(0));
    let status = closed_stderr(&["search", "--mode", "vector", "--where", "nonsense ===", "x"]);
    assert_eq!(
        status.code(),
        Some(1),
        "an error with nowhere to print it still exits 1"
    );
}

fn dir_size(p: &std::path::Path) -> u64 {
    std::fs::read_dir(p)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            if m.is_dir() {
                dir_size(&e.path())
            } else {
                m.len()
            }
        })
        .sum()
}

/// 25 small edits, each followed by an ingest: old versions and small files are cleaned
/// up, so the index stays within twice the size of a fresh ingest (30 edits of the fixtures:
/// 91.6 kB against 89.2 kB fresh; 889 kB without the cleanup). `make stress` runs 200.
#[test]
fn many_small_edits_leave_a_small_index() {
    let rounds: usize = std::env::var("RAG_STRESS_EDITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(25);
    let p = Project::with_docs();
    p.ingest();
    let file = p.path().join("docs/gardening.txt");
    let env = [("RAG_INDEX_KEEP_VERSIONS_S", "0")];
    for i in 0..rounds {
        let mut text = std::fs::read_to_string(&file).unwrap();
        text.push_str(&format!("Edit number {i}.\n"));
        std::fs::write(&file, text).unwrap();
        let (code, _, err) = p.run_env(&env, &["-q", "ingest", "docs"]);
        assert!(code == 0 || code == 7, "{err}");
    }
    let edited = dir_size(&p.path().join(".rag"));
    let hits = p.json(&[
        "search",
        "--json",
        "--mode",
        "text",
        "-k",
        "1",
        &format!("Edit number {}", rounds - 1),
    ]);
    assert_eq!(crate::support::hit_paths(&hits)[0], "docs/gardening.txt");
    std::fs::remove_dir_all(p.path().join(".rag")).unwrap();
    p.ingest();
    let fresh = dir_size(&p.path().join(".rag"));
    // Printed for the stress report (`--nocapture`).
    #[allow(clippy::print_stdout)]
    {
        println!(
            "index after {rounds} edit-and-ingest rounds: {edited} bytes; fresh ingest: {fresh} bytes"
        );
    }
    assert!(
        edited <= 2 * fresh,
        "{edited} bytes after {rounds} edits, {fresh} fresh"
    );
}

#[test]
fn doctor_passes_a_healthy_setup_and_names_each_problem_with_its_fix() {
    let p = Project::with_docs();
    p.ingest();
    let (code, out, err) = p.run(&["doctor"]);
    assert_eq!(code, 0, "{out}\n{err}");
    for name in [
        "embedder",
        "generator (small)",
        "checksum",
        "index",
        "prompt cache",
        "disk",
    ] {
        assert!(
            out.lines().any(|l| l.starts_with("ok") && l.contains(name)),
            "{name}: {out}"
        );
    }
    assert!(!out.contains("FAIL"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("embedder") && l.contains("ONNX Runtime 1.")),
        "doctor reports the ONNX Runtime version: {out}"
    );

    // Broken: a damaged model file, a failed file on record, a cache entry with a bad checksum.
    let (code, _, _) = p.run(&["ask", "-k", "2", "What does the chief engineer keep?"]);
    assert!(code == 0 || code == 6);
    let cache = p.path().join(".rag/prompt-cache");
    for e in std::fs::read_dir(&cache).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "state") {
            std::fs::write(&path, b"flipped").unwrap();
        }
    }
    p.doc("broken.pdf", "%PDF-1.7\nnot really");
    let (code, _, _) = p.run(&["ingest", "docs"]);
    assert_eq!(code, 7);
    let fake = p.path().join("all-MiniLM-L6-v2-int8.onnx");
    std::fs::write(&fake, b"not the model").unwrap();
    let (code, out, err) = p.run_env(
        &[("RAG_EMBED_MODEL", fake.to_str().unwrap())],
        &["doctor", "--json"],
    );
    assert_eq!(code, 1, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["ok"], false);
    let status = |name: &str| {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["name"] == name)
            .map(|c| {
                (
                    c["status"].as_str().unwrap().to_string(),
                    c["detail"].as_str().unwrap().to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(status("embedder")[0].0, "fail", "{v}");
    assert!(
        status("checksum")
            .iter()
            .any(|(s, d)| s == "fail" && d.contains("rag models fetch")),
        "{v}"
    );
    assert!(
        status("failed files")[0].1.contains("--retry-failed"),
        "{v}"
    );
    assert_eq!(status("prompt cache")[0].0, "warn", "{v}");
}

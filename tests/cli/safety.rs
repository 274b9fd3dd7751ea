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

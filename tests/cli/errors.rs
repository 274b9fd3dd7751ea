//! Bad input gives a one-line error that names the thing and the fix, with a stable exit code.

use crate::support::Project;

fn one_line_error(err: &str) -> &str {
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("rag: error:"))
        .collect();
    assert_eq!(lines.len(), 1, "expected one error line in: {err}");
    assert!(!err.contains("panicked"), "{err}");
    lines[0]
}

#[test]
fn missing_model_file() {
    let p = Project::with_docs();
    p.ingest();
    let (code, _, err) = p.run(&[
        "ask",
        "--model",
        "nope.gguf",
        "How fast does the flux regulator aboard Orbital Station Meridian hum?",
    ]);
    assert_eq!(code, 5, "{err}");
    let line = one_line_error(&err);
    assert!(
        line.contains("nope.gguf") && line.contains("rag models fetch"),
        "{line}"
    );
}

#[test]
fn model_that_is_not_gguf() {
    let p = Project::with_docs();
    p.ingest();
    std::fs::write(p.path().join("fake.gguf"), "this is not a model").unwrap();
    let (code, _, err) = p.run(&[
        "ask",
        "--model",
        "fake.gguf",
        "How fast does the flux regulator aboard Orbital Station Meridian hum?",
    ]);
    assert_eq!(code, 5, "{err}");
    let line = one_line_error(&err);
    assert!(
        line.contains("fake.gguf") && line.contains("not a GGUF"),
        "{line}"
    );
}

#[test]
fn missing_onnx_runtime() {
    let p = Project::with_docs();
    let mut cmd = p.rag();
    let out = cmd
        .env("RAG_EMBED_ORT_LIB", "/nonexistent/libonnxruntime.so")
        .args(["ingest", "docs"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    let line = one_line_error(&err);
    assert!(
        line.contains("/nonexistent/libonnxruntime.so") && line.contains("rag models fetch"),
        "{line}"
    );
}

#[test]
fn no_index_names_the_command_that_builds_one() {
    let p = Project::empty();
    let (code, _, err) = p.run(&["search", "anything"]);
    assert_eq!(code, 3, "{err}");
    assert!(one_line_error(&err).contains("rag ingest"), "{err}");
}

#[test]
fn usage_and_config_errors_exit_2() {
    let p = Project::empty();
    assert_eq!(p.run(&["frobnicate"]).0, 2);
    std::fs::write(p.path().join("rag.toml"), "[llm]\nn_ctxx = 5\n").unwrap();
    let (code, _, err) = p.run(&["search", "x"]);
    assert_eq!(code, 2, "{err}");
    assert!(one_line_error(&err).contains("rag.toml"), "{err}");
    let (code, _, err) = p.run(&["ingest", "does-not-exist"]);
    assert_eq!(code, 2, "{err}");
}

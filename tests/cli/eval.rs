//! `rag eval` end to end: the quality gate CI runs on eval/corpus.yaml, thresholds and
//! baselines deciding the exit code, the JUnit file, bad eval files, and --answers.

use crate::support::{copy_dir, repo, Project};

fn corpus_project() -> Project {
    let p = Project::empty();
    copy_dir(&repo().join("corpus"), &p.path().join("corpus"));
    p.json(&["ingest", "--json", "corpus"]);
    p
}

/// (tests, failures) of a JUnit file, parsed by Python's XML parser: a malformed file fails.
fn junit_counts(path: &std::path::Path) -> (u64, u64) {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); \
             assert r.tag == 'testsuites'; \
             n = sum(1 for _ in r.iter('testcase')); f = sum(1 for _ in r.iter('failure')); \
             assert int(r.get('tests')) == n and int(r.get('failures')) == f; print(n, f)",
        ])
        .arg(path)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8_lossy(&out.stdout);
    let mut it = s.split_whitespace().map(|x| x.parse::<u64>().unwrap());
    (it.next().unwrap(), it.next().unwrap())
}

#[test]
fn the_corpus_set_passes_its_floors_and_hybrid_is_never_worse() {
    let p = corpus_project();
    let set = repo().join("eval/corpus.yaml");
    let set = set.to_str().unwrap();
    let junit = p.path().join("eval.xml");
    let (code, out, err) = p.run(&[
        "eval",
        "--json",
        "--min",
        "hit@5=0.9,hit@1=0.75,context_recall=0.8",
        "--junit",
        junit.to_str().unwrap(),
        set,
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let m = &v["metrics"];
    for metric in ["hit@1", "hit@5", "hit@10", "mrr@10", "ndcg@10"] {
        let h = m[format!("hybrid.{metric}")].as_f64().unwrap();
        let best = m[format!("vector.{metric}")]
            .as_f64()
            .unwrap()
            .max(m[format!("text.{metric}")].as_f64().unwrap());
        #[allow(clippy::print_stderr)] // the figures, for a reader of a failed run
        {
            eprintln!("{metric}: hybrid {h:.3}, best single {best:.3}");
        }
        assert!(
            h + 1e-9 >= best.min(1.0) - 0.07,
            "hybrid {metric} {h} vs {best}: {m}"
        );
    }
    assert_eq!(v["results"].as_array().unwrap().len(), 16);
    // One suite per mode (16 cases each) and an empty gates suite.
    assert_eq!(junit_counts(&junit).0, 48);

    // A floor above what the set reaches fails with exit 8, named in the table and JUnit.
    let (code, out, _) = p.run(&[
        "eval",
        "--min",
        "hit@1=1.01",
        "--junit",
        junit.to_str().unwrap(),
        set,
    ]);
    assert_eq!(code, 8, "{out}");
    assert!(out.contains("FAIL hybrid.hit@1"), "{out}");
    let (_, failures) = junit_counts(&junit);
    assert!(failures >= 1);

    baselines_gate_and_draw(&p, set);
}

/// A baseline equal to this run passes with no change, one that was better fails; a
/// retrieval-only run draws beside its baseline.
fn baselines_gate_and_draw(p: &Project, set: &str) {
    // A baseline equal to this run passes with no change; one that was better fails.
    let base = p.path().join("base.json");
    std::fs::write(&base, out_json(p, set)).unwrap();
    let against_baseline = || {
        p.run(&[
            "eval",
            "--baseline",
            base.to_str().unwrap(),
            "--max-regression",
            "0.02",
            set,
        ])
    };
    let (code, out, err) = against_baseline();
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("(=)"), "{out}");
    // Retrieval only, drawn beside its baseline: an SVG whose speed panel says why it is empty.
    let svg = p.path().join("r.svg");
    let (code, _, err) = p.run(&[
        "eval",
        "--report",
        svg.to_str().unwrap(),
        "--baseline",
        base.to_str().unwrap(),
        set,
    ]);
    assert_eq!(code, 0, "{err}");
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("rag eval --answers"),
        "{svg}"
    );
    assert!(svg.contains("baseline: base"), "{svg}");
    let mut better: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&base).unwrap()).unwrap();
    better["metrics"]["text.mrr@10"] = serde_json::json!(2.0);
    std::fs::write(&base, better.to_string()).unwrap();
    let (code, out, _) = against_baseline();
    assert_eq!(code, 8, "{out}");
    assert!(out.contains("FAIL text.mrr@10 went from 2.000"), "{out}");
}

fn out_json(p: &Project, set: &str) -> String {
    let (code, out, err) = p.run(&["eval", "--json", set]);
    assert_eq!(code, 0, "{err}");
    out
}

#[test]
fn bad_eval_files_are_usage_errors_with_positions() {
    let p = Project::with_docs();
    p.ingest();
    let file = p.path().join("bad.yaml");
    std::fs::write(
        &file,
        "- question: a\n  expect_sources: [docs/a.md]\n- question: b\n  expected: x\n",
    )
    .unwrap();
    let (code, _, err) = p.run(&["eval", "bad.yaml"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("bad.yaml:4:3:") && err.contains("expected"),
        "{err}"
    );
    let (code, _, err) = p.run(&["eval", "missing.yaml"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("missing.yaml"), "{err}");
    let (code, _, err) = p.run(&["eval", "--min", "recall=0.5", "bad.yaml"]);
    assert_eq!(code, 2, "{err}");
    std::fs::write(&file, "- question: a\n  expect_sources: [docs/a.md]\n").unwrap();
    let (code, _, err) = p.run(&["eval", "--min", "recall=0.5", "bad.yaml"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown metric"), "{err}");
}

#[test]
fn answers_are_scored_with_the_real_model() {
    let p = Project::with_docs();
    p.ingest();
    std::fs::write(
        p.path().join("set.yaml"),
        "- id: flux\n  question: How fast does the flux regulator aboard Orbital Station Meridian hum?\n  expect_sources: orbital-station.md\n  answer_contains: ['1742']\n\
         - id: off-topic\n  question: What is the capital of Mongolia?\n  expect_sources: nothing.md\n",
    )
    .unwrap();
    // One source: SmolLM2 sometimes goes on with facts from other packed sources, which
    // would (rightly) lower the citation score this test pins at 1.0.
    let (code, out, err) = p.run(&["eval", "--answers", "--json", "-k", "1", "set.yaml"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let flux = &v["results"][0]["answer"];
    assert!(flux["text"].as_str().unwrap().contains("1742"), "{v}");
    assert_eq!(flux["keywords"], true, "{v}");
    assert!(flux["citations_correct"].as_u64().unwrap() >= 1, "{v}");
    assert_eq!(v["results"][1]["answer"]["abstained"], true, "{v}");
    let a = &v["answers"];
    assert_eq!(a["keywords"], 1.0, "{v}");
    assert_eq!(a["abstained"], 0.5, "{v}");
    assert_eq!(a["citations"], 1.0, "{v}");
    assert!(a["ttft_ms_p50"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["metrics"]["answers.keywords"].as_f64().is_some(), "{v}");
    // The routing signals are kept per case, so a rule can be replayed from saved runs.
    assert!(flux["best_similarity"].as_f64().unwrap() > 0.25, "{v}");
    let confidence = flux["confidence"].as_f64().unwrap();
    assert!(confidence > 0.0 && confidence <= 1.0, "{v}");

    // --report draws this run beside a saved one, each point labelled.
    std::fs::write(p.path().join("first.json"), &out).unwrap();
    let (code, _, err) = p.run(&[
        "eval",
        "--answers",
        "-k",
        "1",
        "--report",
        "report.html",
        "--report-with",
        "first.json",
        "--save-json",
        "second.json",
        "set.yaml",
    ]);
    assert_eq!(code, 0, "{err}");
    let page = std::fs::read_to_string(p.path().join("report.html")).unwrap();
    assert!(
        page.starts_with("<!doctype html>") && page.contains("<svg"),
        "{page}"
    );
    assert!(
        page.contains("first (1.00, "),
        "the saved run's point: {page}"
    );
    assert!(page.contains("<td>first</td>"), "{page}");
    // This run is named as it is saved, with the generator its answers came from.
    assert!(page.contains("<td>second: "), "{page}");
    // A run to draw beside that does not exist stops the eval before any answer.
    let (code, _, err) = p.run(&[
        "eval",
        "--answers",
        "--report",
        "r.svg",
        "--report-with",
        "missing.json",
        "set.yaml",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("missing.json"), "{err}");
    assert!(!p.path().join("r.svg").exists());
}

/// With `--expand --rerank`, an answer reuses what its case's retrieval had the generators
/// write and score, and its first token and whole answer count that help as a person asking
/// once would wait for it (`help_ms`).
#[test]
fn answer_times_in_eval_include_the_generators_help() {
    let p = Project::with_docs();
    p.ingest();
    std::fs::write(
        p.path().join("set.yaml"),
        "- id: flux\n  question: How fast does the flux regulator aboard Orbital Station Meridian hum?\n  expect_sources: orbital-station.md\n  answer_contains: ['1742']\n",
    )
    .unwrap();
    let env = [
        ("RAG_RETRIEVAL_EXPAND_WITH", "small"),
        ("RAG_RETRIEVAL_RERANK_WITH", "small"),
    ];
    let args = ["eval", "--answers", "--json", "--modes", "hybrid"];
    let v = p.json_env(
        &env,
        &[&args[..], &["--expand", "--rerank", "set.yaml"]].concat(),
    );
    let case = &v["results"][0];
    let helped = &case["retrieval"]["hybrid"]["helped"];
    let expand = helped["expand_ms"].as_f64().unwrap();
    assert!(
        expand > 0.0 && helped["rerank_ms"].as_f64().unwrap() > 0.0,
        "{v}"
    );
    let a = &case["answer"];
    let help = a["help_ms"].as_f64().unwrap();
    // The expansion's own time, reused whole, and the reranking's on top of it.
    assert!(help > expand, "{v}");
    assert!(a["ttft_ms"].as_f64().unwrap() >= help, "{v}");
    assert!(
        a["total_ms"].as_f64().unwrap() >= a["ttft_ms"].as_f64().unwrap(),
        "{v}"
    );
    // Without help there is none to report.
    let v = p.json_env(&env, &[&args[..], &["set.yaml"]].concat());
    assert!(v["results"][0]["answer"].get("help_ms").is_none(), "{v}");
}

/// `--cite-judge large` asks the 1.5B about each labelled sentence: of two lines of
/// eval/citations.jsonl whose words both hold, it gives the one the cited text states a far
/// higher P(yes) than the one it does not ("removes the first character" against a text on
/// `lstrip`), and reports the check with its verdict at each threshold.
#[test]
fn the_large_generator_judges_labelled_sentences() {
    let p = corpus_project();
    let all = std::fs::read_to_string(repo().join("eval/citations.jsonl")).unwrap();
    let line = |starts: &str| {
        all.lines()
            .find(|l| l.contains(&format!("\"claim\": \"{starts}")))
            .unwrap_or_else(|| panic!("no label starting {starts}"))
            .to_string()
    };
    let two = [
        line("The sqlite_sequence table is created and initialized automatically"),
        line("It will remove the first character of a string"),
    ];
    std::fs::write(p.path().join("two.jsonl"), two.join("\n")).unwrap();
    let large = repo().join("models/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf");
    let env = [("RAG_LLM_LARGE_MODEL", large.to_str().unwrap())];
    let args = [
        "eval",
        "--json",
        "--modes",
        "text",
        "corpus.yaml",
        "--cite-labels",
        "two.jsonl",
        "--cite-judge",
        "large",
    ];
    std::fs::copy(
        repo().join("eval/corpus.yaml"),
        p.path().join("corpus.yaml"),
    )
    .unwrap();
    let (code, out, err) = p.run_env(&env, &args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let check = &v["cite_check"];
    assert_eq!(check["words"], serde_json::json!([true, true]), "{check}");
    let p_yes: Vec<f64> = check["p_yes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert!(p_yes[0] > 0.8 && p_yes[1] < 0.2, "{p_yes:?}");
    let at_half = check["judged"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["threshold"] == 0.5)
        .expect("the 0.5 row");
    assert_eq!(at_half["tuning"]["false_supported"], 0, "{at_half}");
    assert_eq!(at_half["tuning"]["true_supported"], 1, "{at_half}");
}

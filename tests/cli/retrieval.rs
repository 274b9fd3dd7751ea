//! Retrieval options for users with other models: a cross-encoder reranker, and embedders
//! that pool with CLS or expect query/passage prefixes (bge, e5); and the ANN vector index
//! of large tables.

use crate::support::{repo, Project};

/// (path, line_start) of every hit, in rank order.
fn spans(v: &serde_json::Value) -> Vec<(String, u64)> {
    v["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| {
            (
                h["path"].as_str().unwrap().to_string(),
                h["line_start"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn search(p: &Project, env: &[(&str, &str)], k: &str) -> serde_json::Value {
    let (code, out, err) = p.run_env(
        env,
        &["search", "--json", "-k", k, "lighthouse lamp rotation"],
    );
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(out.trim()).unwrap()
}

/// fixtures/reranker/length.onnx (scripts/test/make_test_reranker.py) has a cross-encoder's
/// interface and scores a pair by its length in tokens, so its order is predictable.
#[test]
fn a_reranker_reorders_the_fused_candidates() {
    let p = Project::with_docs();
    p.ingest();
    let model = repo().join("fixtures/reranker/length.onnx");
    let tokenizer = repo().join("models/minilm");
    let env = [
        ("RAG_RERANK_MODEL", model.to_str().unwrap()),
        ("RAG_RERANK_TOKENIZER_DIR", tokenizer.to_str().unwrap()),
        ("RAG_RERANK_CANDIDATES", "10"),
    ];
    let plain = search(&p, &[], "10");
    let all = search(&p, &env, "10");
    let hits = all["hits"].as_array().unwrap();
    assert!(hits.len() >= 4, "{all}");
    assert!(plain["hits"][0].get("rerank_score").is_none(), "{plain}");
    // The same candidates, now in the reranker's order.
    let (mut a, mut b) = (spans(&plain), spans(&all));
    assert_ne!(a, b, "the length scorer should change the fused order");
    a.sort();
    b.sort();
    assert_eq!(a, b);
    let scores: Vec<f64> = hits
        .iter()
        .map(|h| h["rerank_score"].as_f64().expect("rerank_score"))
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    assert!(scores[0] > 5.0, "pair lengths in tokens: {scores:?}");
    // With fewer results, the best of the same 10 candidates.
    let top = search(&p, &env, "3");
    assert_eq!(spans(&top), spans(&all)[..3].to_vec());
    // And it reaches the prompt: ask packs the reranked spans.
    let (code, out, err) = p.run_env(
        &env,
        &[
            "ask",
            "--dry-run",
            "--json",
            "-k",
            "2",
            "lighthouse lamp rotation",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&spans(&all)[0].0), "{out}");
}

#[test]
fn a_reranker_that_cannot_load_is_a_model_error_naming_the_setting() {
    let p = Project::with_docs();
    p.ingest();
    let bad = p.path().join("not-a-model.onnx");
    std::fs::write(&bad, b"not onnx").unwrap();
    let tokenizer = repo().join("models/minilm");
    let (code, _, err) = p.run_env(
        &[
            ("RAG_RERANK_MODEL", bad.to_str().unwrap()),
            ("RAG_RERANK_TOKENIZER_DIR", tokenizer.to_str().unwrap()),
        ],
        &["search", "lighthouse"],
    );
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("not-a-model.onnx") && err.contains("rerank.model"),
        "{err}"
    );
    let (code, _, err) = p.run_env(&[("RAG_RERANK_MODEL", "missing.onnx")], &["search", "x"]);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("missing.onnx"), "{err}");
}

#[test]
fn pooling_and_passage_prefix_belong_to_the_index_and_the_query_prefix_does_not() {
    let p = Project::with_docs();
    p.ingest();
    for (var, value, key) in [
        ("RAG_EMBED_POOLING", "cls", "embed.pooling"),
        (
            "RAG_EMBED_PASSAGE_PREFIX",
            "passage: ",
            "embed.passage_prefix",
        ),
    ] {
        let (code, _, err) = p.run_env(&[(var, value)], &["search", "lighthouse"]);
        assert_eq!(code, 4, "{var}: {err}");
        assert!(err.contains(key) && err.contains("--rebuild"), "{err}");
    }
    // The query prefix changes the question's vector only.
    let plain = search(&p, &[], "3");
    let prefixed = search(&p, &[("RAG_EMBED_QUERY_PREFIX", "query: ")], "3");
    assert_ne!(
        plain["hits"][0]["vector_score"], prefixed["hits"][0]["vector_score"],
        "{plain}\n{prefixed}"
    );
    // Rebuilt with CLS pooling and e5-style prefixes, the index answers with them.
    let e5 = [
        ("RAG_EMBED_POOLING", "cls"),
        ("RAG_EMBED_PASSAGE_PREFIX", "passage: "),
        ("RAG_EMBED_QUERY_PREFIX", "query: "),
    ];
    let (code, _, err) = p.run_env(&e5, &["ingest", "--rebuild", "docs"]);
    assert!(code == 0 || code == 7, "{err}");
    let cls = search(&p, &e5, "3");
    assert!(!cls["hits"].as_array().unwrap().is_empty(), "{cls}");
    assert_ne!(
        cls["hits"][0]["vector_score"], prefixed["hits"][0]["vector_score"],
        "CLS vectors differ from mean-pooled ones"
    );
    let (code, _, err) = p.run(&["search", "lighthouse"]);
    assert_eq!(code, 4, "{err}");
}

#[test]
fn past_ann_min_rows_ingest_builds_an_ann_index_that_search_uses_unless_exact() {
    let p = Project::with_docs();
    let small = [("RAG_INDEX_ANN_MIN_ROWS", "5")];
    let (code, _, err) = p.run_env(&small, &["ingest", "docs"]);
    assert_eq!(code, 0, "{err}");
    let status: serde_json::Value = serde_json::from_str(&p.run(&["status", "--json"]).1).unwrap();
    assert_eq!(status["ann_index"], "IVF_HNSW_SQ", "{status}");

    let query = "how do I resume a stopped download";
    let (code, ann, log) = p.run(&["search", "-v", "--json", query]);
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("vector search: ANN index"), "{log}");
    let (code, exact, log) = p.run(&["search", "-v", "--json", "--exact", query]);
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("exact scan (--exact)"), "{log}");
    let (ann, exact): (serde_json::Value, serde_json::Value) = (
        serde_json::from_str(&ann).unwrap(),
        serde_json::from_str(&exact).unwrap(),
    );
    // Refined ANN candidates carry exact cosines: the same hits, in the same order.
    assert_eq!(spans(&ann), spans(&exact));

    // Below the threshold nothing is built, and an edit keeps an existing index current.
    let q = Project::with_docs();
    q.ingest();
    let log_small = q.run(&["search", "-v", query]).2;
    assert!(
        log_small.contains("exact scan (no ANN index)"),
        "{log_small}"
    );
    p.doc(
        "extra.md",
        "# Extra\n\nResuming a stopped download needs the partial file.\n",
    );
    let (code, _, err) = p.run_env(&small, &["ingest", "docs"]);
    assert_eq!(code, 0, "{err}");
    let hits = p.json(&["search", "--json", "resume a stopped download partial file"]);
    assert!(hits.to_string().contains("docs/extra.md"), "{hits}");
}

fn search_with(p: &Project, env: &[(&str, &str)], flags: &[&str]) -> serde_json::Value {
    let mut args = vec!["search", "--json"];
    if !flags.contains(&"-k") {
        args.extend(["-k", "3"]);
    }
    args.extend_from_slice(flags);
    args.push("How does the lighthouse lamp rotate?");
    p.json_env(env, &args)
}

/// `rag ask --json -k 3 --max-tokens 24 FLAGS` on the lighthouse question: its timings.
fn ask_timings(p: &Project, env: &[(&str, &str)], flags: &[&str]) -> serde_json::Value {
    let mut args = vec!["ask", "--json", "-k", "3", "--max-tokens", "24"];
    args.extend_from_slice(flags);
    args.push("How does the lighthouse lamp rotate?");
    p.json_env(env, &args)["timings"].clone()
}

/// `--expand` and `--rerank` with a real generator (the 135M, so the test stays short): it
/// writes for the question and judges the candidates; `rag search` still finds the page,
/// reranking only re-orders the fused candidates, and `rag ask --json` says what the help
/// cost. A rerank budget of 1 ms scores one batch and keeps the rest in fused order.
#[test]
fn generators_help_retrieval_when_asked() {
    let p = Project::with_docs();
    p.ingest();
    let small = [
        ("RAG_RETRIEVAL_EXPAND_WITH", "small"),
        ("RAG_RETRIEVAL_RERANK_WITH", "small"),
    ];
    let plain = search_with(&p, &small, &[]);
    let expanded = search_with(&p, &small, &["--expand=both"]);
    for v in [&plain, &expanded] {
        assert!(
            crate::support::hit_paths(v)
                .iter()
                .any(|h| h.contains("lighthouse")),
            "{v}"
        );
    }
    // Reranking the best 8 of the fused list and keeping 3: the same 8 candidates, so the
    // 3 kept are among the plain top 8, and each carries the generator's P(yes).
    let top8: Vec<_> = spans(&search_with(&p, &small, &["-k", "8"]));
    let reranked = search_with(&p, &small, &["--rerank"]);
    for s in spans(&reranked) {
        assert!(
            top8.contains(&s),
            "{s:?} is not a fused candidate: {top8:?}"
        );
    }
    let t = ask_timings(&p, &small, &["--expand", "--rerank"]);
    assert!(t["expand_ms"].as_f64().unwrap() > 0.0, "{t}");
    assert!(t["expand_tokens"].as_u64().unwrap() > 0, "{t}");
    assert!(t["rerank_ms"].as_f64().unwrap() > 0.0, "{t}");
    assert!(t["reranked"].as_u64().unwrap() >= 3, "{t}");
    // Out of time at once: one decode call's candidates are scored, the rest keep their
    // fused order, and the answer goes on.
    let mut hurried = small.to_vec();
    hurried.push(("RAG_RETRIEVAL_RERANK_MS", "1"));
    hurried.push(("RAG_LLM_N_BATCH", "16"));
    let t = ask_timings(&p, &hurried, &["--rerank"]);
    assert!((1..8).contains(&t["reranked"].as_u64().unwrap()), "{t}");
    // Without the flags, nothing is asked of a generator and nothing is reported.
    let t = ask_timings(&p, &small, &[]);
    assert!(t.get("expand_ms").is_none(), "{t}");
    assert!(t.get("reranked").is_none(), "{t}");
}

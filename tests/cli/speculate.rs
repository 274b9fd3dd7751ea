//! Speculative decoding changes how fast an answer comes, never what it says: at temperature 0
//! the answers drafted from the prompt (lookup) and by the medium model (draft) are byte for
//! byte the plain answers, on the real small and large generators.

use crate::support::{repo, Project};

const QUESTIONS: [&str; 2] = [
    "How fast does the flux regulator aboard Orbital Station Meridian hum?",
    "How long should bread dough rise?",
];

/// `rag ask --json` with `llm.speculative = mode` and the repository's medium and large models.
fn ask(p: &Project, route: &str, mode: &str, question: &str) -> serde_json::Value {
    let models = repo().join("models");
    let path = |f: &str| models.join(f).to_string_lossy().into_owned();
    let env = [
        ("RAG_LLM_SPECULATIVE", mode.to_string()),
        (
            "RAG_LLM_MEDIUM_MODEL",
            path("Qwen2.5-Coder-0.5B-Instruct.gguf"),
        ),
        (
            "RAG_LLM_LARGE_MODEL",
            path("Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf"),
        ),
        (
            "RAG_LLM_DRAFT_MODEL",
            path("Qwen2.5-Coder-0.5B-Instruct.gguf"),
        ),
        // The cache would hand the second run the first one's prefill: each run starts cold.
        ("RAG_LLM_PROMPT_CACHE_MB", "0".to_string()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (code, out, err) = p.run_env(
        &env,
        &["ask", "--json", "-k", "3", "--model", route, question],
    );
    assert_eq!(code, 0, "{route}/{mode}: {err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

fn check(p: &Project, route: &str, modes: &[&str]) {
    let mut drafted = 0;
    for q in QUESTIONS {
        let plain = ask(p, route, "off", q);
        assert_eq!(plain["model"]["model"], route, "{plain}");
        assert_eq!(plain["timings"]["drafted_tokens"], 0, "{plain}");
        for mode in modes {
            let fast = ask(p, route, mode, q);
            assert_eq!(fast["answer"], plain["answer"], "{route}/{mode} on {q:?}");
            let t = |v: &serde_json::Value, k: &str| v["timings"][k].as_u64().unwrap();
            assert_eq!(
                t(&fast, "generated_tokens"),
                t(&plain, "generated_tokens"),
                "{route}/{mode}"
            );
            assert_eq!(fast["stop"], plain["stop"], "{route}/{mode}");
            assert!(
                t(&fast, "accepted_tokens") <= t(&fast, "drafted_tokens"),
                "{fast}"
            );
            drafted += t(&fast, "drafted_tokens");
        }
    }
    // The drafts were there to check (a draft that proposes nothing proves nothing).
    assert!(drafted > 0, "{route}: no token was drafted");
}

#[test]
fn speculative_answers_are_the_plain_answers_byte_for_byte() {
    let p = Project::with_docs();
    p.ingest();
    check(&p, "small", &["lookup"]);
    check(&p, "large", &["lookup", "draft"]);
}

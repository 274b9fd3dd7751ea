//! Speculative decoding changes how fast an answer comes, not what it says: at temperature 0
//! every token kept is the one the generator itself picks. llama.cpp computes a batch of
//! several tokens with other kernels than a batch of one (other summation orders), so where
//! two tokens nearly tie the pick can flip, as it does for `ask --batch`: on this machine, with
//! the checks of 9 tokens lookup made until 2026-12-05, the small model's second sentence on
//! the first question, and the large model's last `[S#]` on the second (checks are now up to
//! 16 tokens wide; the assertions below hold for both). So each answer must agree with plain
//! decoding through its first sentence (the drafts copied from the sources; a kept guess that
//! the generator would not pick, or a rejected guess left in the KV cache, garbles it at
//! once), and the large model's lookup answer to the first question, whose tokens win by a
//! wide margin, must be the plain one byte for byte. With the instructions of 2026-12-06 the
//! draft model's batches flip a near tie in that answer's second sentence ("on page 17" for
//! "on the … page"), so the draft answer is held to its first sentence like the others.

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

/// The answer through its first full stop that ends a sentence (one followed by white space).
fn first_sentence(answer: &str) -> &str {
    let b = answer.as_bytes();
    (0..b.len().saturating_sub(1))
        .find(|&i| b[i] == b'.' && b[i + 1].is_ascii_whitespace())
        .map_or(answer, |i| &answer[..=i])
}

/// `exact`: the (mode, question) pairs whose answer must be the plain one byte for byte.
fn check(p: &Project, route: &str, modes: &[&str], exact: &[(&str, &str)]) {
    let mut drafted = 0;
    for q in QUESTIONS {
        let plain = ask(p, route, "off", q);
        assert_eq!(plain["model"]["model"], route, "{plain}");
        assert_eq!(plain["timings"]["drafted_tokens"], 0, "{plain}");
        for mode in modes {
            let fast = ask(p, route, mode, q);
            let (a, b) = (
                fast["answer"].as_str().unwrap(),
                plain["answer"].as_str().unwrap(),
            );
            assert!(
                a.starts_with(first_sentence(b)),
                "{route}/{mode} on {q:?}: {a:?} against plain {b:?}"
            );
            let t = |v: &serde_json::Value, k: &str| v["timings"][k].as_u64().unwrap();
            if exact.contains(&(*mode, q)) {
                assert_eq!(a, b, "{route}/{mode} on {q:?}");
                assert_eq!(
                    t(&fast, "generated_tokens"),
                    t(&plain, "generated_tokens"),
                    "{route}/{mode}"
                );
                assert_eq!(fast["stop"], plain["stop"], "{route}/{mode}");
            }
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
    check(&p, "small", &["lookup"], &[]);
    check(
        &p,
        "large",
        &["lookup", "draft"],
        &[("lookup", QUESTIONS[0])],
    );
}

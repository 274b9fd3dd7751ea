//! Remote generators (`llm.backend = "openai"`): against a real `llama-server` built from
//! llama.cpp's source by scripts/test/llama-server.sh and started here on 127.0.0.1 with the
//! project's own GGUF. Those tests are ignored in `make test` (the server build takes ten
//! minutes) and run by `make test-remote`, which sets RAG_LLAMA_SERVER. What needs no server
//! (an unreachable one) runs everywhere.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{free_port, repo, Project, Started};

const FACT: &str = "How fast does the flux regulator aboard Orbital Station Meridian hum?";

struct LlamaServer {
    _process: Started,
    url: String,
}

/// Starts llama-server on a free loopback port with `model` (4 slots of 2,048 tokens, as
/// rag's default window) and waits until `/health` says it is ready.
fn llama_server(model: &str) -> LlamaServer {
    llama_server_with(model, &[])
}

fn llama_server_with(model: &str, extra: &[&str]) -> LlamaServer {
    let bin = std::env::var("RAG_LLAMA_SERVER").expect(
        "RAG_LLAMA_SERVER names the llama-server binary: run these tests with `make test-remote`",
    );
    let port = free_port();
    let child = Command::new(&bin)
        .args(["-m", repo().join("models").join(model).to_str().unwrap()])
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["-c", "8192", "-np", "4", "-t", "2", "--no-webui"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {bin}: {e}"));
    let server = LlamaServer {
        _process: Started(child),
        url: format!("http://127.0.0.1:{port}/v1"),
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    while get_status(port, "/health") != Some(200) {
        assert!(Instant::now() < deadline, "llama-server did not get ready");
        std::thread::sleep(Duration::from_millis(200));
    }
    server
}

fn get_status(port: u16, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).ok()?;
    reply.split_whitespace().nth(1)?.parse().ok()
}

fn remote_env(url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("RAG_LLM_BACKEND", "openai".into()),
        ("RAG_LLM_URL", url.into()),
    ]
}

fn run(p: &Project, env: &[(&'static str, String)], args: &[&str]) -> (i32, String, String) {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    p.run_env(&env, args)
}

fn json_of(code: i32, out: &str, err: &str) -> Value {
    assert_eq!(code, 0, "stderr: {err}\nstdout: {out}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

#[test]
fn an_unreachable_generator_server_is_exit_5_naming_the_url_and_the_setting() {
    let p = Project::with_docs();
    p.ingest();
    // Port 9 (discard) has no listener on a test machine: the connection is refused at once.
    let env = [
        ("RAG_LLM_BACKEND", "openai".to_string()),
        ("RAG_LLM_URL", "http://127.0.0.1:9/v1".to_string()),
        ("RAG_LLM_RETRIES", "1".to_string()),
    ];
    let (code, out, err) = run(&p, &env, &["ask", FACT]);
    assert_eq!(code, 5, "stdout: {out}\nstderr: {err}");
    assert!(
        err.contains("http://127.0.0.1:9/v1") && err.contains("llm.url"),
        "{err}"
    );
    assert!(out.is_empty(), "{out}");
    // A key variable that is not set is named before any request.
    let mut env = env.to_vec();
    env.push(("RAG_LLM_API_KEY_ENV", "RAG_TEST_UNSET_KEY".into()));
    let (code, _, err) = run(&p, &env, &["ask", FACT]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("RAG_TEST_UNSET_KEY"), "{err}");
}

/// The same question through llama-server as through the in-process model: the planted fact,
/// a supported citation, evidence, the server named as the model, and its own figures; the
/// prompt rag packed is the prompt the server counted.
#[test]
#[ignore = "needs llama-server: make test-remote"]
fn a_remote_generator_answers_with_checked_citations_and_the_servers_figures() {
    let server = llama_server("SmolLM2-135M-Instruct.Q4_1.gguf");
    let p = Project::with_docs();
    p.ingest();
    let env = remote_env(&server.url);
    let (code, out, err) = run(&p, &env, &["ask", "--json", "-k", "3", FACT]);
    let v = json_of(code, &out, &err);
    assert!(v["answer"].as_str().unwrap().contains("1742"), "{v}");
    let citations = v["citations"].as_array().unwrap();
    assert!(citations.iter().any(|c| c["supported"] == true), "{v}");
    assert!(!v["evidence"].as_array().unwrap().is_empty(), "{v}");
    assert!(
        v["model"]["path"]
            .as_str()
            .unwrap()
            .starts_with(&server.url),
        "{v}"
    );
    let t = &v["timings"];
    for key in [
        "prompt_tokens",
        "generated_tokens",
        "ttft_ms",
        "decode_tok_per_s",
    ] {
        assert!(t[key].as_f64().unwrap() > 0.0, "{key}: {t}");
    }
    // rag's own count of the packed prompt (`--dry-run`, through the server's /tokenize)
    // against what the server read: within a token per packed piece.
    let (code, _, err) = run(&p, &env, &["ask", "--dry-run", "-k", "3", FACT]);
    assert_eq!(code, 0, "{err}");
    let ours: f64 = err
        .split(" prompt tokens")
        .next()
        .and_then(|s| s.split_whitespace().last())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no prompt token count: {err}"));
    let theirs = t["prompt_tokens"].as_f64().unwrap();
    assert!(
        ours >= theirs && ours - theirs <= 12.0,
        "rag {ours} vs server {theirs}"
    );
    // The same ask a second time: llama-server's own prompt cache serves the prefix.
    let (code, out, err) = run(&p, &env, &["ask", "--json", "-k", "3", FACT]);
    let again = json_of(code, &out, &err);
    assert!(
        again["timings"]["cached_tokens"].as_f64().unwrap() > 0.0,
        "{again}"
    );
    // Its answer need not be byte-identical: llama-server evaluates what follows the reused
    // prefix in batches of another shape, which moves near-ties at temperature 0 (rag's own
    // cache aligns reuse to llm.n_batch for exactly this reason). Seen here: the second
    // sentence changed.
    assert!(
        again["answer"].as_str().unwrap().contains("1742"),
        "{again}"
    );
}

/// Streaming, routing (only `--model large` goes to the server), a batch with requests in
/// flight together, and a chat whose second turn is a follow-up.
#[test]
#[ignore = "needs llama-server: make test-remote"]
fn remote_streams_routes_batches_and_chats() {
    let server = llama_server("SmolLM2-135M-Instruct.Q4_1.gguf");
    let p = Project::with_docs();
    p.ingest();
    let remote = remote_env(&server.url);
    let (code, out, err) = run(&p, &remote, &["ask", "--ndjson", FACT]);
    assert_eq!(code, 0, "{err}");
    let events: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let tokens = events.iter().filter(|e| e["event"] == "token").count();
    assert!(tokens > 2, "streamed in pieces: {out}");
    assert_eq!(events.last().unwrap()["event"], "done", "{out}");

    let routed = [
        ("RAG_LLM_LARGE_BACKEND", "openai".to_string()),
        ("RAG_LLM_URL", server.url.clone()),
    ];
    let model_of = |args: &[&str]| {
        let (code, out, err) = run(&p, &routed, args);
        json_of(code, &out, &err)["model"]["path"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(model_of(&["ask", "--json", FACT]).ends_with(".gguf"));
    assert!(model_of(&["ask", "--json", "--model", "large", FACT]).starts_with(&server.url));

    std::fs::write(
        p.path().join("q.txt"),
        format!("{FACT}\nWhen was the Kestrel Point lighthouse first lit?\nHow long should bread dough be kneaded?\n"),
    )
    .unwrap();
    let mut batch_env = remote.clone();
    batch_env.push(("RAG_LLM_PARALLEL", "3".into()));
    let (code, out, err) = run(&p, &batch_env, &["ask", "--batch", "q.txt"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{out}");
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["id"], i + 1, "input order: {out}");
        assert!(!l["answer"].as_str().unwrap().is_empty(), "{l}");
    }
    assert!(
        lines[0]["answer"].as_str().unwrap().contains("1742"),
        "{}",
        lines[0]
    );

    let env: Vec<(&str, &str)> = remote.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = p
        .rag()
        .envs(env)
        .args(["chat", "-k", "2"])
        .write_stdin(format!("{FACT}\nAnd how often is it tuned?\n"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.matches("Sources:").count(), 2, "{stdout}");
}

/// `--expand` and `--rerank` with the medium generator served by llama-server, the answer
/// from the local 135M: the server writes the passage and the terms, and judges each
/// candidate from the log-probabilities of its first token, `llm.parallel` at a time.
#[test]
#[ignore = "needs llama-server: make test-remote"]
fn a_served_generator_expands_and_reranks() {
    let server = llama_server("SmolLM2-135M-Instruct.Q4_1.gguf");
    let p = Project::with_docs();
    p.ingest();
    // Time enough to judge every candidate on a busy machine.
    let served = vec![
        ("RAG_LLM_MEDIUM_BACKEND", "openai".to_string()),
        ("RAG_LLM_URL", server.url.clone()),
        ("RAG_RETRIEVAL_RERANK_MS", "600000".to_string()),
    ];
    let search = |env: &[(&'static str, String)], flags: &[&str]| {
        let mut args = vec!["search", "--json", "-k", "8"];
        args.extend_from_slice(flags);
        args.push("How does the lighthouse lamp rotate?");
        let (code, out, err) = run(&p, env, &args);
        json_of(code, &out, &err)
    };
    let expanded = search(&served, &["--expand=both"]);
    assert!(expanded.to_string().contains("lighthouse"), "{expanded}");
    // Every candidate judged: the fused top 8, re-ordered (by fused rank and rank by
    // P(yes) together), each with a P(yes), not all undecided (0.5 is what a reply without
    // "yes" or "no" among its alternatives gives).
    let spans = |v: &Value| {
        let mut s: Vec<String> = v["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| format!("{}:{}", h["path"], h["line_start"]))
            .collect();
        s.sort();
        s
    };
    let reranked = search(&served, &["--rerank"]);
    assert_eq!(spans(&reranked), spans(&search(&served, &[])));
    let scores: Vec<f64> = reranked["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["rerank_score"].as_f64().expect("rerank_score"))
        .collect();
    assert_eq!(scores.len(), 8, "{reranked}");
    assert!(scores.iter().all(|s| (0.0..=1.0).contains(s)), "{scores:?}");
    assert!(scores.iter().any(|s| (s - 0.5).abs() > 0.01), "{scores:?}");

    let ask = |env: &[(&'static str, String)]| {
        let args = [
            "ask",
            "--json",
            "--model",
            "small",
            "-k",
            "3",
            "--max-tokens",
            "24",
            "--expand",
            "--rerank",
            FACT,
        ];
        let (code, out, err) = run(&p, env, &args);
        json_of(code, &out, &err)
    };
    let v = ask(&served);
    assert!(
        v["model"]["path"].as_str().unwrap().ends_with(".gguf"),
        "{v}"
    );
    let t = &v["timings"];
    assert!(t["expand_ms"].as_f64().unwrap() > 0.0, "{t}");
    assert!(t["expand_tokens"].as_u64().unwrap() > 0, "{t}");
    assert!(t["rerank_ms"].as_f64().unwrap() > 0.0, "{t}");
    assert_eq!(t["reranked"].as_u64(), Some(8), "{t}");
    // Out of time at once: the first round (two requests in flight) is judged, the rest
    // keep their fused order.
    let mut hurried = served.clone();
    hurried[2].1 = "1".into();
    hurried.push(("RAG_LLM_PARALLEL", "2".into()));
    assert_eq!(ask(&hurried)["timings"]["reranked"].as_u64(), Some(2));
}

/// A remote embedder: ingest and search through llama-server's `/v1/embeddings` (SmolLM2's
/// mean-pooled states: weak vectors, but real ones, with BM25 beside them); the index records
/// the remote model, so the local embedder is refused on it (exit 4) and vice versa.
#[test]
#[ignore = "needs llama-server: make test-remote"]
fn a_remote_embedder_builds_an_index_that_only_it_can_search() {
    let server = llama_server_with(
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        &["--embeddings", "--pooling", "mean"],
    );
    let p = Project::with_docs();
    let env = vec![
        ("RAG_EMBED_BACKEND", "openai".to_string()),
        ("RAG_EMBED_URL", server.url.clone()),
        ("RAG_EMBED_BATCH_SIZE", "8".to_string()),
    ];
    let (code, out, err) = run(&p, &env, &["ingest", "--json", "docs"]);
    let report = json_of(code, &out, &err);
    assert!(report["chunks_written"].as_u64().unwrap() > 0, "{report}");
    let (code, out, err) = run(&p, &env, &["search", "--json", "-k", "3", FACT]);
    let hits = json_of(code, &out, &err);
    let paths = crate::support::hit_paths(&hits);
    assert_eq!(
        paths.first().map(String::as_str),
        Some("docs/orbital-station.md"),
        "{hits}"
    );
    let (code, _, err) = p.run(&["search", FACT]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("openai:"), "{err}");
    drop(server);
    // The server gone: exit 5 naming embed.url, and the index is untouched.
    let mut gone = env.clone();
    gone.push(("RAG_EMBED_RETRIES", "0".to_string()));
    let (code, _, err) = run(&p, &gone, &["search", FACT]);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("embed.url"), "{err}");
}

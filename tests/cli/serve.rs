//! `rag serve`: HTTP with the real index and models, spoken to over plain sockets.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::{Project, Started};

pub struct Server {
    child: Started,
    pub addr: String,
}

/// Starts `rag serve --addr 127.0.0.1:0` (plus `args`) and reads the address it printed.
pub fn start(p: &Project, env: &[(&str, &str)], args: &[&str]) -> Server {
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("rag"))
        .current_dir(p.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .args(["serve", "--addr", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let _ = tx.send(rest.split_whitespace().next().unwrap().to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("rag serve printed its address");
    Server {
        child: Started(child),
        addr,
    }
}

fn send(addr: &str, method: &str, path: &str, body: &str, headers: &[(&str, &str)]) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    s.write_all(format!("{head}\r\n{body}").as_bytes()).unwrap();
    s
}

pub struct Reply {
    status: u16,
    head: String,
    body: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The `data:` payloads of an event stream.
    fn events(&self) -> Vec<String> {
        self.body
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .map(String::from)
            .collect()
    }
}

/// Reads a whole response, undoing chunked framing.
fn read_reply(mut s: impl Read) -> Reply {
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, mut rest) = raw.split_once("\r\n\r\n").expect("a response head");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut body = String::new();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        loop {
            let (size, tail) = rest.split_once("\r\n").expect("a chunk size line");
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            if n == 0 {
                break;
            }
            body.push_str(&tail[..n]);
            rest = &tail[n + 2..];
        }
    } else {
        body = rest.to_string();
    }
    Reply {
        status,
        head: head.to_string(),
        body,
    }
}

pub fn call(addr: &str, method: &str, path: &str, body: &str) -> Reply {
    read_reply(send(addr, method, path, body, &[]))
}

const QUESTION: &str = "At what pressure does the Kestrel relief valve open?";

#[test]
fn serve_searches_answers_streams_speaks_openai_and_picks_up_a_new_ingest() {
    let p = Project::with_docs();
    p.ingest();
    let srv = start(&p, &[], &[]);
    let a = srv.addr.as_str();

    check_search_and_errors(a);
    let answer = check_ask(a);
    check_chat(a, &answer);
    // A new ingest while serving: the next request sees it, without a restart.
    p.doc(
        "heron.md",
        "# Heron gearbox\n\nThe Heron gearbox takes 3.5 litres of ISO VG 220 oil.\n",
    );
    p.ingest();
    let found = call(
        a,
        "POST",
        "/v1/search",
        r#"{"query": "Heron gearbox oil", "top_k": 1}"#,
    );
    assert_eq!(
        found.json()["hits"][0]["path"],
        "docs/heron.md",
        "{}",
        found.body
    );

    // A request is counted once its response is written, so the scrape may come just before
    // the last search is counted (seen on a loaded machine): read until it is, for 10 s.
    let want = "rag_requests_total{endpoint=\"/v1/search\",status=\"200\"} 2";
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let metrics = loop {
        let m = call(a, "GET", "/metrics", "").body;
        if m.contains(want) || std::time::Instant::now() > deadline {
            break m;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(metrics.contains(want), "{metrics}");
    assert!(
        metrics.contains("rag_requests_total{endpoint=\"/v1/search\",status=\"400\"} 2"),
        "{metrics}"
    );
    assert!(metrics.contains("rag_index_reloads_total 1\n"), "{metrics}");
    assert!(
        metrics.contains("rag_time_to_first_token_seconds_count 4\n"),
        "{metrics}"
    );
}

/// Search, and the errors a client gets for a bad body, method or path.
fn check_search_and_errors(a: &str) {
    assert_eq!(call(a, "GET", "/healthz", "").json()["status"], "ok");
    let search = call(
        a,
        "POST",
        "/v1/search",
        r#"{"query": "Kestrel relief valve pressure", "top_k": 2}"#,
    );
    assert_eq!(search.status, 200, "{}", search.body);
    assert_eq!(search.json()["hits"][0]["path"], "docs/pump-manual.pdf");
    assert_eq!(search.json()["hits"].as_array().unwrap().len(), 2);
    let bad = call(a, "POST", "/v1/search", r#"{"query": "x", "topk": 2}"#);
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("unknown field \"topk\""));
    assert_eq!(call(a, "POST", "/v1/search", "not json").status, 400);
    assert_eq!(call(a, "GET", "/v1/search", "").status, 405);
    assert_eq!(call(a, "POST", "/v2/everything", "{}").status, 404);
}

/// One answer as JSON and streamed; returns the JSON one.
fn check_ask(a: &str) -> Value {
    // One answer as JSON: the `ask --json` schema.
    let ask = call(
        a,
        "POST",
        "/v1/ask",
        &format!(r#"{{"question": "{QUESTION}"}}"#),
    );
    assert_eq!(ask.status, 200, "{}", ask.body);
    let answer = ask.json();
    assert_eq!(answer["abstained"], false);
    assert!(
        answer["sources"]
            .to_string()
            .contains("docs/pump-manual.pdf"),
        "{answer}"
    );
    assert!(!answer["answer"].as_str().unwrap().is_empty());

    // Streamed: the `--ndjson` events as server-sent events, the same answer at the end.
    let stream = call(
        a,
        "POST",
        "/v1/ask",
        &format!(r#"{{"question": "{QUESTION}", "stream": true}}"#),
    );
    assert_eq!(stream.status, 200);
    assert!(stream.head.contains("text/event-stream"), "{}", stream.head);
    let events: Vec<Value> = stream
        .events()
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(events[0]["event"], "retrieval");
    assert!(events.iter().any(|e| e["event"] == "token"));
    let done = events.last().unwrap();
    assert_eq!(done["event"], "done");
    assert_eq!(
        done["answer"]["answer"], answer["answer"],
        "temperature 0: the same answer streamed or not"
    );
    answer
}

/// The OpenAI-compatible endpoint, plain and streamed, against `answer` from /v1/ask.
fn check_chat(a: &str, answer: &Value) {
    // OpenAI-compatible chat: the answer, its sources in the content and under `rag`.
    let body = format!(
        r#"{{"model": "anything", "messages": [{{"role": "system", "content": "be brief"}}, {{"role": "user", "content": "{QUESTION}"}}]}}"#
    );
    let chat = call(a, "POST", "/v1/chat/completions", &body);
    assert_eq!(chat.status, 200, "{}", chat.body);
    let c = chat.json();
    assert_eq!(c["object"], "chat.completion");
    assert_eq!(c["choices"][0]["message"]["role"], "assistant");
    let content = c["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        content.starts_with(answer["answer"].as_str().unwrap()),
        "{content}"
    );
    assert!(
        content.contains("Sources:\n  [S1] ") && content.contains("docs/pump-manual.pdf"),
        "{content}"
    );
    assert!(c["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    assert_eq!(c["rag"]["sources"], answer["sources"]);
    let body = body.replacen('{', r#"{"stream": true, "#, 1);
    let chunks = call(a, "POST", "/v1/chat/completions", &body).events();
    assert_eq!(chunks.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = chunks[..chunks.len() - 1]
        .iter()
        .map(|c| serde_json::from_str(c).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(text.contains("Sources:"), "{text}");
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
}

#[test]
fn serve_guards_the_network_with_a_token() {
    let p = Project::with_docs();
    p.ingest();
    let (code, _, err) = p.run(&["serve", "--addr", "0.0.0.0:0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("RAG_SERVE_TOKEN"), "{err}");
    let srv = start(&p, &[("RAG_SERVE_TOKEN", "s3cret-token")], &[]);
    let q = r#"{"query": "Kestrel"}"#;
    let denied = call(&srv.addr, "POST", "/v1/search", q);
    assert_eq!(denied.status, 401);
    assert!(
        denied.head.contains("WWW-Authenticate: Bearer"),
        "{}",
        denied.head
    );
    let wrong = read_reply(send(
        &srv.addr,
        "POST",
        "/v1/search",
        q,
        &[("Authorization", "Bearer s3cret-tokeN")],
    ));
    assert_eq!(wrong.status, 401);
    let ok = read_reply(send(
        &srv.addr,
        "POST",
        "/v1/search",
        q,
        &[("Authorization", "Bearer s3cret-token")],
    ));
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(
        call(&srv.addr, "GET", "/healthz", "").status,
        200,
        "health checks need no token"
    );
}

#[test]
fn serve_refuses_past_its_queue_and_drains_on_sigterm() {
    let p = Project::with_docs();
    p.ingest();
    // No waiting room: while one answer generates, another is refused at once.
    let mut srv = start(
        &p,
        &[("RAG_SERVE_QUEUE", "0"), ("RAG_LLM_MAX_TOKENS", "200")],
        &[],
    );
    let body = format!(r#"{{"question": "{QUESTION}", "stream": true}}"#);
    let mut first = BufReader::new(send(&srv.addr, "POST", "/v1/ask", &body, &[]));
    let mut seen = String::new();
    while !seen.contains("\"event\":\"retrieval\"") {
        let mut line = String::new();
        assert!(
            first.read_line(&mut line).unwrap() > 0,
            "the stream ended early: {seen}"
        );
        seen.push_str(&line);
    }
    let refused = call(
        &srv.addr,
        "POST",
        "/v1/ask",
        &format!(r#"{{"question": "{QUESTION}"}}"#),
    );
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(refused.head.contains("Retry-After: "), "{}", refused.head);
    // Searches never queue behind the generator.
    assert_eq!(
        call(&srv.addr, "POST", "/v1/search", r#"{"query": "Kestrel"}"#).status,
        200
    );

    // SIGTERM mid-answer: the answer finishes, then the server exits 0.
    unsafe { libc_kill(srv.child.0.id() as i32, 15) };
    let mut rest = String::new();
    first.read_to_string(&mut rest).unwrap();
    assert!(
        rest.contains("\"event\":\"done\""),
        "the answer in flight was finished: {rest}"
    );
    let status = srv.child.0.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

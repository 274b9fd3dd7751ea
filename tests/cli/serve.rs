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
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("rag"));
    cmd.args(["serve", "--addr", "127.0.0.1:0"]).args(args);
    start_cmd(p, env, cmd)
}

/// As [`start`], with at most `nofile` open descriptors (`ulimit -n`).
fn start_limited(p: &Project, env: &[(&str, &str)], nofile: u32) -> Server {
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        &format!("ulimit -n {nofile} && exec \"$0\" serve --addr 127.0.0.1:0"),
    ])
    .arg(assert_cmd::cargo::cargo_bin("rag"));
    start_cmd(p, env, cmd)
}

fn start_cmd(p: &Project, env: &[(&str, &str)], mut cmd: Command) -> Server {
    let mut child = cmd
        .current_dir(p.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().copied())
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
    // the last search is counted (seen on a loaded machine): read until it is (a watchdog
    // against a counter that never moves, generous for a loaded machine).
    let want = "rag_requests_total{endpoint=\"/v1/search\",status=\"200\"} 2";
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
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
    // The question again: its sequence still holds the prompt, so only the last partial
    // slice of it is prefilled again (and the answer above is the same byte for byte).
    let timings = &done["answer"]["timings"];
    let (cached, prompt) = (
        timings["cached_tokens"].as_u64(),
        timings["prompt_tokens"].as_u64(),
    );
    assert!(
        cached.unwrap() > 0 && cached.unwrap() + 128 > prompt.unwrap(),
        "{timings}"
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
        denied
            .head
            .to_ascii_lowercase()
            .contains("www-authenticate: bearer"),
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
    // Guessing is slowed down: after 10 wrong tokens in a minute, even the right one waits.
    for _ in 0..8 {
        let r = read_reply(send(
            &srv.addr,
            "POST",
            "/v1/search",
            q,
            &[("Authorization", "Bearer guess-guess-guess")],
        ));
        assert_eq!(r.status, 401);
    }
    let locked = read_reply(send(
        &srv.addr,
        "POST",
        "/v1/search",
        q,
        &[("Authorization", "Bearer s3cret-token")],
    ));
    assert_eq!(locked.status, 429, "{}", locked.body);
    assert!(locked.head.to_ascii_lowercase().contains("retry-after: "));
    drop(srv);

    // A token too short to be safe is refused; one from a file stays out of `ps`.
    let (code, _, err) = p.run_env(&[("RAG_SERVE_TOKEN", "s3cret")], &["serve"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("at least 12"), "{err}");
    let file = p.path().join("token");
    std::fs::write(&file, "file-token-0123456789\n").unwrap();
    let srv = start(&p, &[], &["--token-file", file.to_str().unwrap()]);
    let ok = read_reply(send(
        &srv.addr,
        "POST",
        "/v1/search",
        q,
        &[("Authorization", "Bearer file-token-0123456789")],
    ));
    assert_eq!(ok.status, 200, "{}", ok.body);
}

/// Opens a streamed `/v1/ask` for `question` and reads it up to its `retrieval` event, which
/// the server sends once the answer is admitted to the generator.
fn admitted_stream(addr: &str, question: &str) -> BufReader<TcpStream> {
    let body = format!(r#"{{"question": "{question}", "stream": true}}"#);
    let mut stream = BufReader::new(send(addr, "POST", "/v1/ask", &body, &[]));
    let mut seen = String::new();
    while !seen.contains("\"event\":\"retrieval\"") {
        let mut line = String::new();
        assert!(
            stream.read_line(&mut line).unwrap() > 0,
            "the stream ended early: {seen}"
        );
        seen.push_str(&line);
    }
    stream
}

/// The rest of a streamed answer: its token events joined, and its `done` event.
fn streamed_rest(mut stream: BufReader<TcpStream>) -> (String, Value) {
    let mut rest = String::new();
    stream.read_to_string(&mut rest).unwrap();
    let events: Vec<Value> = rest
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let done = events.last().cloned().unwrap_or_default();
    assert_eq!(done["event"], "done", "the answer was finished: {rest}");
    let text = events
        .iter()
        .filter(|e| e["event"] == "token")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    (text, done)
}

#[test]
fn serve_batches_answers_refuses_past_its_queue_and_drains_on_sigterm() {
    let p = Project::with_docs();
    p.ingest();
    // Two answers generate together in one context (llm.parallel = 2) and none may wait
    // (queue 0): while two generate, a third is refused at once.
    let env = [
        ("RAG_SERVE_QUEUE", "0"),
        ("RAG_LLM_PARALLEL", "2"),
        ("RAG_LLM_MAX_TOKENS", "200"),
    ];
    let mut srv = start(&p, &env, &[]);
    let lighthouse = "When was the lighthouse on Kestrel Point first lit?";
    let first = admitted_stream(&srv.addr, QUESTION);
    let second = admitted_stream(&srv.addr, lighthouse);
    let refused = call(
        &srv.addr,
        "POST",
        "/v1/ask",
        &format!(r#"{{"question": "{QUESTION}"}}"#),
    );
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(
        refused.head.to_ascii_lowercase().contains("retry-after: "),
        "{}",
        refused.head
    );
    // Searches never queue behind the generator.
    assert_eq!(
        call(&srv.addr, "POST", "/v1/search", r#"{"query": "Kestrel"}"#).status,
        200
    );

    // SIGTERM mid-answer: both answers finish, then the server exits 0.
    unsafe { libc_kill(srv.child.0.id() as i32, 15) };
    for (stream, fact) in [(first, "42"), (second, "1871")] {
        let (text, done) = streamed_rest(stream);
        let answer = &done["answer"];
        // Each stream carries its own sequence's pieces, and each answer its own facts.
        if answer["stop"] != "repetition" {
            assert_eq!(text.trim(), answer["answer"], "{done}");
        }
        assert!(answer["answer"].as_str().unwrap().contains(fact), "{done}");
    }
    let status = srv.child.0.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

/// Writes `raw` as the whole request and reads the reply (the server closes after it).
fn raw(addr: &str, raw: &str) -> Reply {
    raw_lossy(addr, raw).expect("a reply")
}

/// As [`raw`], for a request the server may cut off before reading it all: the reply, or
/// `None` when the connection was reset before one arrived.
fn raw_lossy(addr: &str, raw: &str) -> Option<Reply> {
    let mut s = TcpStream::connect(addr).unwrap();
    // A safety net for a server that never answers, not a timing assertion.
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let _ = s.write_all(raw.as_bytes());
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let text = String::from_utf8(got).ok()?;
    text.contains("\r\n\r\n")
        .then(|| read_reply(text.as_bytes()))
}

#[test]
fn serve_outlives_hostile_requests_and_keeps_the_operators_scope() {
    let p = Project::with_docs();
    p.ingest();
    let srv = start(
        &p,
        &[("RAG_SERVE_MAX_CONNECTIONS", "8")],
        &["--path", "docs/*.md"],
    );
    let a = srv.addr.as_str();

    refuses_oversized_requests(a);
    refuses_web_pages(a);
    turns_away_connections_past_the_limit(a);
    keeps_the_operators_scope(a);
}

fn alive(a: &str, why: &str) {
    assert_eq!(call(a, "GET", "/healthz", "").status, 200, "{why}");
}

/// Bodies and heads too large to read, refused without allocating what was declared.
fn refuses_oversized_requests(a: &str) {
    // A declared body of a petabyte, or of u64::MAX bytes, is refused, never allocated.
    for len in ["1000000000000000", "18446744073709551615"] {
        let r = raw(a, &format!("POST /v1/search HTTP/1.1\r\nHost: {a}\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n"));
        assert!([400, 413, 431].contains(&r.status), "{len}: {}", r.status);
        alive(a, len);
    }
    // A head of 100,000 bytes is cut off at 64 KiB (431, unless the reset beats it).
    let long = "a".repeat(100_000);
    let r = raw_lossy(
        a,
        &format!("GET /healthz HTTP/1.1\r\nHost: {a}\r\nX-Long: {long}\r\n\r\n"),
    );
    assert!(
        r.as_ref().is_none_or(|r| r.status == 431),
        "{:?}",
        r.map(|r| r.head)
    );
    alive(a, "after a huge head");
}

fn refuses_web_pages(a: &str) {
    // A web page cannot reach the tokenless server: not by DNS rebinding (a foreign Host),
    // not by a cross-site POST (a foreign Origin, or a body that is not JSON).
    let search = r#"{"query": "Kestrel"}"#;
    let r = raw(a, &format!("POST /v1/search HTTP/1.1\r\nHost: rebind.example:{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{search}", a.rsplit(':').next().unwrap(), search.len()));
    assert_eq!(r.status, 403, "{}", r.body);
    let twice = read_reply(send(
        a,
        "POST",
        "/v1/search",
        search,
        &[("Host", "rebind.example")],
    ));
    assert_eq!(twice.status, 400, "two Host headers: {}", twice.body);
    let page = read_reply(send(
        a,
        "POST",
        "/v1/search",
        search,
        &[("Origin", "https://evil.example")],
    ));
    assert_eq!(page.status, 403, "{}", page.body);
    let r = raw(a, &format!("POST /v1/search HTTP/1.1\r\nHost: {a}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{search}", search.len()));
    assert_eq!(r.status, 415, "{}", r.body);
}

fn turns_away_connections_past_the_limit(a: &str) {
    // Past serve.max_connections a connection is answered 503 and closed; once the others
    // leave, the server answers again.
    let idle: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(a).unwrap()).collect();
    let mut over = TcpStream::connect(a).unwrap();
    over.set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let mut out = String::new();
    let _ = over.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 503"), "{out}");
    drop(idle);
    let health = format!("GET /healthz HTTP/1.1\r\nHost: {a}\r\nConnection: close\r\n\r\n");
    let mut back = 0;
    for _ in 0..100 {
        // Until the server has seen the idle ones go, a connection may still be turned away.
        back = raw_lossy(a, &health).map_or(0, |r| r.status);
        if back == 200 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(back, 200);
}

fn keeps_the_operators_scope(a: &str) {
    // A request's path narrows the operator's --path; "**" does not widen it.
    let everything = call(
        a,
        "POST",
        "/v1/search",
        r#"{"query": "Kestrel relief valve pressure", "path": "**", "top_k": 10}"#,
    );
    assert_eq!(everything.status, 200, "{}", everything.body);
    let hits = everything.json()["hits"].as_array().unwrap().clone();
    assert!(!hits.is_empty());
    for h in &hits {
        let path = h["path"].as_str().unwrap();
        assert!(path.ends_with(".md"), "{path} is outside --path docs/*.md");
    }
}

#[test]
fn serve_sheds_idle_and_silent_clients_and_still_drains() {
    let p = Project::with_docs();
    p.ingest();
    let mut srv = start(
        &p,
        &[("RAG_SERVE_IO_TIMEOUT_S", "5"), ("RAG_SERVE_THREADS", "2")],
        &[],
    );
    let a = srv.addr.clone();
    // Clients that declare a body and never send it, or never finish their head: more of
    // them than there are workers. None holds a worker; each is cut off by the I/O timeout.
    let silent: Vec<TcpStream> = (0..6)
        .map(|i| {
            let mut s = TcpStream::connect(&a).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
            let head = if i % 2 == 0 {
                format!("POST /v1/search HTTP/1.1\r\nHost: {a}\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n")
            } else {
                format!("GET /healthz HTTP/1.1\r\nHost: {a}\r\n")
            };
            s.write_all(head.as_bytes()).unwrap();
            s
        })
        .collect();
    // Meanwhile a search, which needs a worker, is answered.
    let found = call(&a, "POST", "/v1/search", r#"{"query": "Kestrel"}"#);
    assert_eq!(found.status, 200, "{}", found.body);
    for (i, s) in silent.into_iter().enumerate() {
        let mut out = Vec::new();
        let _ = (&s).read_to_end(&mut out);
        let text = String::from_utf8_lossy(&out);
        if i % 2 == 0 {
            assert!(text.starts_with("HTTP/1.1 408"), "silent body {i}: {text}");
        }
    }
    assert_eq!(call(&a, "GET", "/healthz", "").status, 200);

    // A client that pipelines requests and never reads their responses: once the socket's
    // buffers are full the server's writes stall, and after the I/O timeout it is cut off.
    let mut hog = TcpStream::connect(&a).unwrap();
    let one = format!("GET /metrics HTTP/1.1\r\nHost: {a}\r\n\r\n");
    hog.set_write_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut sent = 0;
    while sent < 20_000 && hog.write_all(one.as_bytes()).is_ok() {
        sent += 1;
    }
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(
        call(&a, "POST", "/v1/search", r#"{"query": "Kestrel"}"#).status,
        200
    );
    hog.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut got = Vec::new();
    let _ = hog.read_to_end(&mut got);
    let answered = String::from_utf8_lossy(&got)
        .matches("HTTP/1.1 200")
        .count();
    assert!(
        answered < sent,
        "{answered} of {sent} pipelined requests answered: the hog was not cut off"
    );

    // SIGTERM with a silent client connected: the server still exits 0.
    let mut lingering = TcpStream::connect(&a).unwrap();
    lingering.write_all(b"GET /healthz HTTP/1.1\r\n").unwrap();
    unsafe { libc_kill(srv.child.0.id() as i32, 15) };
    let status = srv.child.0.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn serve_recovers_after_running_out_of_descriptors() {
    let p = Project::with_docs();
    p.ingest();
    // Room for the index and the models, and a few dozen connections beyond them.
    let srv = start_limited(&p, &[("RAG_SERVE_MAX_CONNECTIONS", "4096")], 128);
    let a = srv.addr.as_str();
    assert_eq!(call(a, "GET", "/healthz", "").status, 200);
    // More connections than descriptors: accepting fails (EMFILE) while they are open.
    let flood: Vec<TcpStream> = (0..300)
        .filter_map(|_| {
            TcpStream::connect_timeout(&a.parse().unwrap(), Duration::from_secs(1)).ok()
        })
        .collect();
    assert!(
        flood.len() > 128,
        "only {} connections were made",
        flood.len()
    );
    drop(flood);
    // Once they are gone the server answers again; it did not stop listening.
    let mut status = 0;
    for _ in 0..600 {
        let s = TcpStream::connect_timeout(&a.parse().unwrap(), Duration::from_secs(1));
        if let Ok(mut s) = s {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let ok = s.write_all(
                format!("GET /healthz HTTP/1.1\r\nHost: {a}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            );
            let mut out = String::new();
            if ok.is_ok() && s.read_to_string(&mut out).is_ok() && out.starts_with("HTTP/1.1 200") {
                status = 200;
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(status, 200, "the server answers after the flood");
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

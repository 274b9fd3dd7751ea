//! `rag mcp`: the Model Context Protocol on stdio, with the real index and models, driven
//! as a client drives it: one request at a time, each reply read before the next request.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use serde_json::Value;

use crate::support::Project;

#[test]
fn an_agent_can_list_and_call_search_and_ask_over_mcp() {
    let p = Project::with_docs();
    p.ingest();
    let replies = session(&p);
    tools(&replies);
    resources(&replies);
    errors(&replies);
    piped(&p);
    scoped(&p);
}

/// `rag mcp --path GLOB`: the resources and every tool call stay within the glob, whatever
/// path a call asks for.
fn scoped(p: &Project) {
    let pdf = format!("file://{}/docs/pump-manual.pdf", p.path().display());
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"script","version":"1"}}}"#.to_string(),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":2,"method":"resources/list"}"#.to_string(),
        format!(r#"{{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{{"uri":"{pdf}"}}}}"#),
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"search","arguments":{"query":"Kestrel relief valve pressure","path":"**","top_k":10}}}"#.to_string(),
    ];
    let out = p
        .rag()
        .args(["mcp", "--path", "docs/*.md"])
        .write_stdin(lines.join("\n") + "\n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let replies: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let by_id = |id: i64| replies.iter().find(|r| r["id"] == id).cloned().unwrap();
    let listed = by_id(2)["result"]["resources"].to_string();
    assert!(listed.contains("docs/orbital-station.md"), "{listed}");
    assert!(!listed.contains("pump-manual.pdf"), "{listed}");
    assert_eq!(by_id(3)["error"]["code"], -32002, "{}", by_id(3));
    let hits = by_id(4)["result"]["structuredContent"]["hits"].clone();
    let paths: Vec<&str> = hits
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["path"].as_str().unwrap())
        .collect();
    assert!(
        !paths.is_empty() && paths.iter().all(|p| p.ends_with(".md")),
        "{paths:?}"
    );
}

/// A script that writes its requests and closes stdin at once still gets every answer: the
/// calls already read finish before the session ends (rmcp alone waits 5 s at most).
fn piped(p: &Project) {
    let ask = |id: u32, q: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"ask","arguments":{{"question":"{q}"}}}}}}"#
        )
    };
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"script","version":"1"}}}"#.to_string(),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_string(),
        ask(2, "At what pressure does the Kestrel relief valve open?"),
        ask(3, "What should I check before starting the pump?"),
        ask(4, "How often should the pump be serviced?"),
    ];
    let started = std::time::Instant::now();
    let out = p
        .rag()
        .arg("mcp")
        .write_stdin(lines.join("\n") + "\n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let mut ids: Vec<i64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    ids.sort();
    assert_eq!(
        ids,
        [1, 2, 3, 4],
        "every call answered, after {:?}",
        started.elapsed()
    );
}

/// A running `rag mcp` and its stdout, line by line.
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Server {
    fn start(p: &Project) -> Server {
        let mut child = Command::new(assert_cmd::cargo::cargo_bin("rag"))
            .current_dir(p.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Server {
            child,
            stdin,
            lines,
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request and returns its reply (every stdout line must be JSON-RPC).
    fn request(&mut self, line: &str) -> Value {
        self.send(line);
        let text = self
            .lines
            .recv_timeout(Duration::from_secs(300))
            .unwrap_or_else(|e| panic!("no reply to {line}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON-RPC: {text}: {e}"))
    }

    /// Closes stdin; the server exits 0 and says nothing more.
    fn close(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert_eq!(status.code(), Some(0));
        assert!(self.lines.recv_timeout(Duration::from_secs(5)).is_err());
    }
}

/// Drives one MCP session: initialize, tools, resources and bad requests; returns the
/// replies.
fn session(p: &Project) -> Vec<Value> {
    let uri = format!("file://{}/docs/pump-manual.pdf", p.path().display());
    let read = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"resources/read","params":{{"uri":"{uri}"}}}}"#
    );
    let mut server = Server::start(p);
    let mut replies = vec![server.request(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}"#,
    )];
    server.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    // Unparsable input gets no reply (as in the other MCP SDKs: there is no id to answer);
    // the session goes on.
    server.send("this is not JSON");
    for line in [
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"search","arguments":{"query":"Kestrel relief valve pressure","top_k":2}}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"ask","arguments":{"question":"At what pressure does the Kestrel relief valve open?"}}}"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"search","arguments":{"query":"x","mode":"fuzzy"}}}"#,
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"delete_everything","arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"resources/list"}"#,
        r#"{"jsonrpc":"2.0","id":8,"method":"ping"}"#,
        read.as_str(),
        r#"{"jsonrpc":"2.0","id":10,"method":"resources/read","params":{"uri":"file:///etc/passwd"}}"#,
    ] {
        replies.push(server.request(line));
    }
    server.close();
    replies
}

fn by_id(replies: &[Value], id: i64) -> Value {
    replies.iter().find(|r| r["id"] == id).unwrap().clone()
}

/// initialize, tools/list, and both tools called.
fn tools(replies: &[Value]) {
    let by_id = |id| by_id(replies, id);
    assert_eq!(by_id(1)["result"]["protocolVersion"], "2025-06-18");
    assert!(by_id(1)["result"]["capabilities"]["tools"].is_object());
    let tools = by_id(2)["result"]["tools"].clone();
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["search", "ask"]);
    // The schemas come from the argument types: the question is required, the retriever
    // names are the CLI's.
    let search_schema = &tools[0]["inputSchema"];
    assert_eq!(
        search_schema["required"],
        serde_json::json!(["query"]),
        "{search_schema}"
    );
    assert_eq!(
        search_schema["properties"]["mode"]["enum"],
        serde_json::json!(["hybrid", "vector", "text", null]),
        "{search_schema}"
    );
    assert_eq!(
        tools[1]["inputSchema"]["required"],
        serde_json::json!(["question"])
    );
    assert_eq!(tools[0]["annotations"]["readOnlyHint"], true);
    let search = by_id(3)["result"].clone();
    assert_eq!(search["isError"], false, "{search}");
    assert_eq!(
        search["structuredContent"]["hits"][0]["path"],
        "docs/pump-manual.pdf"
    );
    assert_eq!(
        search["structuredContent"]["hits"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let ask = by_id(4)["result"].clone();
    assert_eq!(ask["isError"], false, "{ask}");
    assert!(
        ask["content"][0]["text"].as_str().unwrap().contains("42"),
        "{ask}"
    );
    assert!(ask["structuredContent"]["sources"][0]["path"].is_string());
}

/// The indexed files as resources, and the PDF read as the text rag indexed.
fn resources(replies: &[Value]) {
    let by_id = |id| by_id(replies, id);
    let files = by_id(7)["result"]["resources"].clone();
    let pump = files
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "docs/pump-manual.pdf")
        .unwrap_or_else(|| panic!("the indexed files are resources: {files}"));
    let uri = pump["uri"].as_str().unwrap();
    assert!(
        uri.starts_with("file:///") && uri.ends_with("/docs/pump-manual.pdf"),
        "{uri}"
    );
    assert!(by_id(1)["result"]["capabilities"]["resources"].is_object());
    let text = by_id(9)["result"]["contents"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text.contains("Kestrel"),
        "the indexed text of the PDF: {text}"
    );
}

/// Bad arguments, unknown tools, files not indexed.
fn errors(replies: &[Value]) {
    let by_id = |id| by_id(replies, id);
    let bad = by_id(5)["result"].clone();
    assert_eq!(
        bad["isError"], true,
        "a bad argument is a tool error: {bad}"
    );
    assert!(
        bad["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("hybrid, vector or text"),
        "{bad}"
    );
    assert_eq!(by_id(6)["error"]["code"], -32602);
    assert_eq!(by_id(8)["result"], serde_json::json!({}));
    assert_eq!(
        by_id(10)["error"]["code"],
        -32002,
        "only indexed files are readable"
    );
}

//! `rag mcp`: the Model Context Protocol on stdio, with the real index and models.

use serde_json::Value;

use crate::support::Project;

#[test]
fn an_agent_can_list_and_call_search_and_ask_over_mcp() {
    let p = Project::with_docs();
    p.ingest();
    let replies = session(&p);
    assert_eq!(
        replies.len(),
        11,
        "one reply per request, none for the notification"
    );
    tools(&replies);
    resources(&replies);
    errors(&replies);
}

/// Drives one MCP session over stdin: initialize, tools, resources and bad requests; returns
/// the replies (every stdout line must be JSON-RPC).
fn session(p: &Project) -> Vec<Value> {
    let uri = format!("file://{}/docs/pump-manual.pdf", p.path().display());
    let read = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"resources/read","params":{{"uri":"{uri}"}}}}"#
    );
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"search","arguments":{"query":"Kestrel relief valve pressure","top_k":2}}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"ask","arguments":{"question":"At what pressure does the Kestrel relief valve open?"}}}"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"search","arguments":{"query":"x","mode":"fuzzy"}}}"#,
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"delete_everything","arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"resources/list"}"#,
        r#"this is not JSON"#,
        r#"{"jsonrpc":"2.0","id":8,"method":"initialize","params":{"protocolVersion":"1999-01-01"}}"#,
        read.as_str(),
        r#"{"jsonrpc":"2.0","id":10,"method":"resources/read","params":{"uri":"file:///etc/passwd"}}"#,
    ];
    let out = p
        .rag()
        .arg("mcp")
        .write_stdin(lines.join("\n") + "\n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("every stdout line is JSON-RPC"))
        .collect()
}

fn by_id(replies: &[Value], id: i64) -> Value {
    replies.iter().find(|r| r["id"] == id).unwrap().clone()
}

/// initialize, tools/list, and both tools called.
fn tools(replies: &[Value]) {
    let by_id = |id| by_id(replies, id);
    assert_eq!(by_id(1)["result"]["protocolVersion"], "2025-06-18");
    assert!(by_id(1)["result"]["capabilities"]["tools"].is_object());
    let names: Vec<&str> = replies[1]["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["search", "ask"]);
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
    assert_eq!(
        ask["structuredContent"]["sources"][0]["path"].is_string(),
        true
    );
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
    assert_eq!(
        by_id(1)["result"]["capabilities"]["resources"]["listChanged"],
        false
    );
    let text = by_id(9)["result"]["contents"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text.contains("Kestrel"),
        "the indexed text of the PDF: {text}"
    );
}

/// Bad arguments, unknown tools, other files, broken JSON and unknown versions.
fn errors(replies: &[Value]) {
    let by_id = |id| by_id(replies, id);
    assert_eq!(
        by_id(5)["result"]["isError"],
        true,
        "a bad argument is a tool error"
    );
    assert_eq!(by_id(6)["error"]["code"], -32602);
    assert_eq!(
        by_id(10)["error"]["code"],
        -32002,
        "only indexed files are readable"
    );
    assert!(replies.iter().any(|r| r["error"]["code"] == -32700));
    assert_eq!(
        by_id(8)["result"]["protocolVersion"],
        "2025-06-18",
        "an unknown version gets ours"
    );
}

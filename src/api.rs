//! The request shape shared by the front ends that take JSON objects (`rag mcp` tools,
//! `rag serve` endpoints): the text under one key plus `top_k`, `mode` and `path`, checked
//! with messages a client (or the model driving it) can act on; and the lines of
//! `rag ask --batch` ([`batch`]).

use serde_json::Value;

pub mod batch;

use crate::config::Mode;
use crate::retrieve;
use crate::retrieve::Query;

/// The query `args` asks for, on top of the configured defaults in `base`. `key` holds the
/// text (`query` or `question`); `extra` names further keys the caller reads itself. Any
/// other key is an error, so a typo such as `topk` is not silently ignored.
pub fn query(base: &Query, args: &Value, key: &str, extra: &[&str]) -> Result<Query, String> {
    let obj = args
        .as_object()
        .ok_or("the request must be a JSON object")?;
    for k in obj.keys() {
        if ![key, "top_k", "mode", "path"].contains(&k.as_str()) && !extra.contains(&k.as_str()) {
            let mut known = vec![key, "top_k", "mode", "path"];
            known.extend(extra);
            return Err(format!(
                "unknown field {k:?}; the fields are {}",
                known.join(", ")
            ));
        }
    }
    let mut q = base.clone();
    q.text = obj
        .get(key)
        .and_then(Value::as_str)
        .filter(|t| !t.trim().is_empty())
        .ok_or(format!("{key} is required (a non-empty string)"))?
        .to_string();
    // An optional field sent as null is not given (clients fill unset options with null).
    let given = |k: &str| obj.get(k).filter(|v| !v.is_null());
    if let Some(k) = given("top_k") {
        q.top_k = k
            .as_u64()
            .filter(|k| (1..=100).contains(k))
            .ok_or("top_k must be an integer from 1 to 100")? as usize;
    }
    if let Some(m) = given("mode") {
        q.mode = serde_json::from_value::<Mode>(m.clone())
            .map_err(|_| "mode must be hybrid, vector or text")?;
    }
    if let Some(p) = given("path") {
        let glob = p.as_str().ok_or("path must be a glob string")?;
        q.filter = retrieve::narrow(base.filter.as_deref(), retrieve::filter(Some(glob), None));
    }
    Ok(q)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_are_checked_and_applied() {
        let base = Query {
            top_k: 5,
            ..Query::default()
        };
        let q = query(
            &base,
            &json!({"query": "x", "top_k": 3, "mode": "text"}),
            "query",
            &[],
        )
        .unwrap();
        assert_eq!((q.text.as_str(), q.top_k, q.mode), ("x", 3, Mode::Text));
        let e = query(
            &base,
            &json!({"query": "x", "topk": 3}),
            "query",
            &["stream"],
        )
        .unwrap_err();
        assert_eq!(
            e,
            "unknown field \"topk\"; the fields are query, top_k, mode, path, stream"
        );
        assert!(query(&base, &json!({"query": " "}), "query", &[]).is_err());
        assert!(query(&base, &json!({"query": "x", "top_k": 0}), "query", &[]).is_err());
        assert!(query(&base, &json!({"query": "x", "mode": "fuzzy"}), "query", &[]).is_err());
        assert!(query(&base, &json!(["x"]), "query", &[]).is_err());
        // A request's path narrows the operator's scope; it cannot widen it.
        let scoped = Query {
            filter: retrieve::filter(Some("docs/public/**"), None),
            ..base.clone()
        };
        let q = query(&scoped, &json!({"query": "x", "path": "**"}), "query", &[]).unwrap();
        assert_eq!(
            q.filter.as_deref(),
            Some("(path LIKE 'docs/public/%') AND (path LIKE '%')")
        );
        let unset = json!({"query": "x", "top_k": null, "mode": null, "path": null});
        let q = query(&base, &unset, "query", &[]).unwrap();
        assert_eq!((q.top_k, q.mode), (5, base.mode), "null is not given");
    }
}

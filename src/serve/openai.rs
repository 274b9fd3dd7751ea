//! `POST /v1/chat/completions`, OpenAI-compatible, so existing clients and chat front ends
//! can use rag as a model. The last user message is the question; the earlier user
//! messages are the conversation a follow-up retrieves with (as in `rag chat`). System
//! messages and sampling fields are accepted and not used: rag's own instructions and
//! `[llm]` settings decide how the answer is generated, so it stays cited and checked.
//! The response's `rag` object holds the sources, citations and evidence; the message
//! content ends with the same "Evidence:" and "Sources:" lines `rag ask` prints, so a chat
//! window shows where the answer came from.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use super::http::Request;
use super::{busy, finish_stream, generate, http, Outcome, State};
use crate::ask::followup_query;
use crate::engine::Answer;
use crate::engine::Event;
use crate::llm::StopReason;
use crate::retrieve::Query;

/// The text of a message's `content`: a string, or the text parts of a list of parts.
fn text(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        _ => None,
    }
}

/// The question (the last message, which must be the user's) and the earlier user turns.
fn conversation(body: &Value) -> Result<(String, Vec<String>), String> {
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
        .ok_or("messages is required: a list of {\"role\", \"content\"} objects ending with the user's question")?;
    let mut users = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or(format!("messages[{i}] has no role"))?;
        let content = m.get("content").and_then(text).ok_or(format!(
            "messages[{i}].content must be a string or a list of text parts"
        ))?;
        if role == "user" {
            users.push(content);
        }
        if i + 1 == messages.len() && role != "user" {
            return Err(format!(
                "the last message must be the user's question, not a {role} message"
            ));
        }
    }
    let question = users.pop().unwrap_or_default();
    if question.trim().is_empty() {
        return Err("the last user message is empty".into());
    }
    Ok((question, users))
}

/// The generator's name for the `model` field: its file name.
fn model_name(a: &Answer) -> String {
    a.model
        .as_ref()
        .and_then(|m| {
            std::path::Path::new(&m.path)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "rag".into())
}

fn finish_reason(a: &Answer) -> &'static str {
    match a.stop {
        Some(StopReason::MaxTokens | StopReason::ContextFull) => "length",
        _ => "stop",
    }
}

fn usage(a: &Answer) -> Value {
    let t = &a.timings;
    json!({
        "prompt_tokens": t.prompt_tokens,
        "completion_tokens": t.generated_tokens,
        "total_tokens": t.prompt_tokens + t.generated_tokens,
        "prompt_tokens_details": {"cached_tokens": t.cached_tokens}
    })
}

/// What clients show under the answer: rag's evidence and sources lines.
fn trailer(a: &Answer) -> String {
    if a.abstained {
        String::new()
    } else {
        crate::printer::evidence_and_sources(a)
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub fn chat_completions(req: Request, st: &State, body: &Value) -> u16 {
    let parsed = conversation(body).and_then(|c| Ok((c, super::stream_flag(body)?)));
    let ((question, earlier), stream) = match parsed {
        Ok(x) => x,
        Err(e) => return http::error(req, 400, &e, &[]),
    };
    let q = Query {
        text: followup_query(&earlier, &question),
        ..st.base.clone()
    };
    let c = Completion {
        id: format!(
            "chatcmpl-{}",
            blake3::hash(format!("{question}{:?}", SystemTime::now()).as_bytes())
                .to_hex()
                .get(..24)
                .unwrap_or_default()
        ),
        created: now(),
    };
    if stream {
        c.stream(req, st, &q, &question)
    } else {
        c.whole(req, st, &q, &question)
    }
}

/// One chat completion's identity, shared by all its chunks.
struct Completion {
    id: String,
    created: u64,
}

impl Completion {
    /// The answer in one `chat.completion` object.
    fn whole(&self, req: Request, st: &State, q: &Query, question: &str) -> u16 {
        match generate(st, q, question, &mut |_| Ok(())) {
            Outcome::Answered(a) => {
                let content = format!("{}\n{}", a.answer, trailer(&a));
                let body = json!({
                    "id": self.id, "object": "chat.completion", "created": self.created, "model": model_name(&a),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason(&a)}],
                    "usage": usage(&a),
                    "rag": crate::printer::json_value(&a),
                });
                http::json(req, 200, &body)
            }
            Outcome::Busy(b) => busy(req, &b),
            Outcome::Failed(e) => http::error(req, 500, &format!("{e:#}"), &[]),
        }
    }

    fn chunk(&self, model: &str, delta: Value, finish: Value) -> Value {
        json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    }

    /// The answer as `chat.completion.chunk` server-sent events, as it is generated.
    fn stream(&self, req: Request, st: &State, q: &Query, question: &str) -> u16 {
        let model = std::path::Path::new(&st.engine.settings().llm.model)
            .file_name()
            .map_or("rag".into(), |f| f.to_string_lossy().into_owned());
        let mut sse = http::Sse::new(req);
        let outcome = generate(st, q, question, &mut |e| match e {
            Event::Retrieved { .. } => {
                let first = json!({"role": "assistant", "content": ""});
                sse.data(&self.chunk(&model, first, Value::Null).to_string())
            }
            Event::Piece(p) => sse.data(
                &self
                    .chunk(&model, json!({"content": p}), Value::Null)
                    .to_string(),
            ),
            Event::Dropped(_)
            | Event::Ranked { .. }
            | Event::Warning(_)
            | Event::Note(_)
            | Event::Prefill { .. }
            | Event::Prefilled => Ok(()),
        });
        let streamed = !matches!(sse, http::Sse::Pending(_));
        finish_stream(sse, outcome, |a| {
            let model = model_name(a);
            let mut lines = Vec::new();
            if !streamed {
                // An abstention streams nothing before it is done.
                let all = json!({"role": "assistant", "content": a.answer});
                lines.push(self.chunk(&model, all, Value::Null).to_string());
            }
            let tail = trailer(a);
            if !tail.is_empty() {
                let tail = self.chunk(&model, json!({"content": tail}), Value::Null);
                lines.push(tail.to_string());
            }
            let mut last = self.chunk(&model, json!({}), json!(finish_reason(a)));
            last["usage"] = usage(a);
            last["rag"] = crate::printer::json_value(a);
            lines.push(last.to_string());
            lines.push("[DONE]".into());
            lines
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_user_message_is_the_question() {
        let body = json!({"messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "How do I stash untracked files?"},
            {"role": "assistant", "content": "Use -u [S1]."},
            {"role": "user", "content": [{"type": "text", "text": "And drop it?"}]}
        ]});
        let (q, earlier) = conversation(&body).unwrap();
        assert_eq!(q, "And drop it?");
        assert_eq!(earlier, vec!["How do I stash untracked files?".to_string()]);
        let e = conversation(&json!({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]})).unwrap_err();
        assert!(e.contains("last message must be the user's"), "{e}");
        assert!(conversation(&json!({"messages": []})).is_err());
        assert!(conversation(&json!({"messages": [{"role": "user", "content": 3}]})).is_err());
    }
}

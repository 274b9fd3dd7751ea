//! A remote generator: OpenAI-compatible `POST /chat/completions`, streamed (server-sent
//! events), with the prompt packed exactly as for a local model whenever the tokenizer is
//! known: `llm.tokenizer` (the same GGUF, chat template included, or a tokenizer.json), else
//! the server's own `/tokenize` and `/apply-template` (llama-server), else an estimate that
//! errs on the long side.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::{json, Value};

use super::{Decode, Llm, Message, Prefill, Sampling, StopReason};
use crate::config::LlmSettings;
use crate::exit::ExitError;
use crate::remote::Client;

/// Tokens the chat template adds around each message when it cannot be measured
/// (ChatML: `<|im_start|>role\n … <|im_end|>\n` is 5; Llama 3's header 4; rounded up).
const TEMPLATE_TOKENS_PER_MESSAGE: usize = 8;

/// How prompt tokens are counted for packing.
enum Counter {
    /// The generator's own GGUF, vocabulary only: exact, chat template included.
    Gguf(Box<Llm>),
    /// A Hugging Face tokenizer.json: exact for text, the template estimated.
    Hf(Box<tokenizers::Tokenizer>),
    /// The server's `/tokenize` (and `/apply-template` for the whole prompt).
    Server,
    /// Bytes / 3, rounded up: more than BPE tokenizers give for prose and code.
    Estimate,
}

pub struct Remote {
    client: Client,
    /// The model name sent with each request.
    model: String,
    counter: Counter,
    /// The server's context per request, from `/props` when it says (llama-server).
    server_ctx: Option<u32>,
}

impl Remote {
    /// Connects to `s.url`: finds the model name (`llm.remote_model`, else the server's first)
    /// and how to count tokens. An unreachable server is an exit-5 error here, before any
    /// retrieval is wasted on it.
    pub fn open(s: &LlmSettings) -> Result<Remote> {
        let client = Client::new(&s.url, &s.api_key_env, s.timeout_s, s.retries, "llm.url")?;
        let model = if s.remote_model.is_empty() {
            client.first_model("llm.remote_model")?
        } else {
            s.remote_model.clone()
        };
        let counter = counter(&s.tokenizer, &client)?;
        let server_ctx = client
            .try_root_json("/props", None)
            .and_then(|p| p.pointer("/default_generation_settings/n_ctx")?.as_u64())
            .and_then(|n| u32::try_from(n).ok())
            .filter(|&n| n > 0);
        tracing::info!(url = client.base(), %model, counter = counter.name(), ?server_ctx, "remote generator");
        Ok(Remote {
            client,
            model,
            counter,
            server_ctx,
        })
    }

    /// What answers name as their model: the API base and the model name.
    pub fn name(&self) -> String {
        format!("{}#{}", self.client.base(), self.model)
    }

    /// The context `llm.n_ctx = 0` means: the server's, when it says.
    pub fn n_ctx_default(&self) -> Result<u32> {
        self.server_ctx.ok_or_else(|| {
            ExitError::usage(format!(
                "{} does not report its context size; set llm.n_ctx to it",
                self.client.base()
            ))
        })
    }

    /// Tokens of one piece of document or question text.
    pub fn count_tokens(&self, text: &str) -> usize {
        match &self.counter {
            Counter::Gguf(llm) => llm.count_tokens(text),
            Counter::Hf(t) => t
                .encode(text, false)
                .map_or_else(|_| estimate(text), |e| e.len()),
            // One more than the server counts: the piece meets its neighbours at a token
            // boundary the server may merge differently.
            Counter::Server => self
                .server_tokens(text, false)
                .map_or(estimate(text), |n| n + 1),
            Counter::Estimate => estimate(text),
        }
    }

    /// Tokens of the whole chat prompt (what the server will read).
    pub fn chat_len(&self, messages: &[Message]) -> Result<usize> {
        if let Counter::Gguf(llm) = &self.counter {
            return Ok(llm.chat_tokens(messages)?.len());
        }
        if let Counter::Server = &self.counter {
            let n = self
                .apply_template(messages)
                .and_then(|p| self.server_tokens(&p, true));
            if let Some(n) = n {
                return Ok(n);
            }
        }
        let content: usize = messages
            .iter()
            .flat_map(|m| &m.parts)
            .map(|p| self.count_tokens(p))
            .sum();
        Ok(content + TEMPLATE_TOKENS_PER_MESSAGE * (messages.len() + 1))
    }

    /// The prompt as the server renders it (`--dry-run`), when it can say; else the
    /// messages as sent.
    pub fn render(&self, messages: &[Message]) -> String {
        if let Counter::Gguf(llm) = &self.counter {
            if let Ok(p) = llm.render(messages) {
                return p;
            }
        }
        self.apply_template(messages).unwrap_or_else(|| {
            messages
                .iter()
                .map(|m| format!("[{}]\n{}\n", m.role, m.parts.concat()))
                .collect()
        })
    }

    fn apply_template(&self, messages: &[Message]) -> Option<String> {
        let body = json!({ "messages": wire_messages(messages) });
        let v = self.client.try_root_json("/apply-template", Some(&body))?;
        v.get("prompt")?.as_str().map(str::to_string)
    }

    /// The server's token count of `text`; `whole_prompt` counts as the server reads a
    /// rendered chat (its BOS added, template tokens parsed).
    fn server_tokens(&self, text: &str, whole_prompt: bool) -> Option<usize> {
        let body = json!({
            "content": text,
            "add_special": whole_prompt,
            "parse_special": true,
        });
        let v = self.client.try_root_json("/tokenize", Some(&body))?;
        Some(v.get("tokens")?.as_array()?.len())
    }

    /// Streams an answer to `messages`, handing each piece of text to `on_piece` (false stops
    /// it). `prompt_len` is rag's own count, used when the server reports none.
    pub fn generate(
        &self,
        messages: &[Message],
        prompt_len: usize,
        s: &Sampling,
        mut on_piece: impl FnMut(&str) -> bool,
    ) -> Result<(Prefill, Decode)> {
        let start = Instant::now();
        let resp = self
            .client
            .post("/chat/completions", &self.request(messages, s))?;
        let mut stream = Stream::default();
        let mut cancelled = false;
        for line in BufReader::new(resp).lines() {
            let line = line.map_err(|e| {
                ExitError::model(format!(
                    "reading the answer from {}: {e}; a slow server may need a larger llm.timeout_s",
                    self.client.base(),
                ))
            })?;
            let Some(data) = line.strip_prefix("data:").map(str::trim) else {
                continue;
            };
            if data == "[DONE]" {
                stream.done = true;
                break;
            }
            let event: Value = serde_json::from_str(data).with_context(|| {
                format!("{} sent an event that is not JSON", self.client.base())
            })?;
            if let Some(piece) = stream.event(&event, self.client.base())? {
                stream
                    .first_piece_ms
                    .get_or_insert(start.elapsed().as_secs_f64() * 1e3);
                if !on_piece(&piece) {
                    // Dropping the response closes the connection; llama-server then stops
                    // generating for it.
                    cancelled = true;
                    break;
                }
            }
        }
        if !cancelled && !stream.done && stream.finish.is_none() {
            return Err(ExitError::model(format!(
                "{} closed the stream before the answer ended",
                self.client.base()
            )));
        }
        Ok(stream.figures(prompt_len, cancelled, start))
    }

    /// P(yes) of a yes/no judgement (`messages` ask for one word), read from the
    /// log-probabilities of the reply's first token (`logprobs`, `top_logprobs`), as a local
    /// judge reads its logits; and the prompt tokens the server read. One token generated.
    pub fn p_yes(&self, messages: &[Message]) -> Result<(f32, usize)> {
        let body = json!({
            "model": self.model,
            "messages": wire_messages(messages),
            "max_tokens": 1,
            "temperature": 0.0,
            "logprobs": true,
            "top_logprobs": TOP_LOGPROBS,
        });
        let resp = self.client.post("/chat/completions", &body)?;
        let v: Value = resp.json().map_err(|e| {
            ExitError::model(format!(
                "{} answered a judgement with a body that is not JSON: {e}",
                self.client.base()
            ))
        })?;
        let p = yes_of_logprobs(&v).ok_or_else(|| {
            ExitError::model(format!(
                "{} gave no log-probabilities (`logprobs`) for a judgement; retrieval.rerank with a remote generator needs a server that returns them (llama-server, vLLM), or set retrieval.rerank_with to a local generator",
                self.client.base()
            ))
        })?;
        let prompt = v.pointer("/usage/prompt_tokens").and_then(Value::as_u64);
        Ok((p, prompt.unwrap_or(0) as usize))
    }

    fn request(&self, messages: &[Message], s: &Sampling) -> Value {
        let mut body = json!({
            "model": self.model,
            "messages": wire_messages(messages),
            "stream": true,
            "stream_options": { "include_usage": true },
            "max_tokens": s.max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "seed": s.seed,
        });
        // llama-server's own sampler fields, sent only when set: other servers may refuse
        // fields they do not know.
        if s.repeat_penalty != 1.0 {
            body["repeat_penalty"] = json!(s.repeat_penalty);
            body["repeat_last_n"] = json!(s.repeat_last_n);
        }
        if s.dry_multiplier > 0.0 {
            body["dry_multiplier"] = json!(s.dry_multiplier);
            body["dry_base"] = json!(s.dry_base);
            body["dry_allowed_length"] = json!(s.dry_allowed_length);
        }
        body
    }
}

impl Counter {
    fn name(&self) -> &'static str {
        match self {
            Counter::Gguf(_) => "gguf",
            Counter::Hf(_) => "tokenizer.json",
            Counter::Server => "server /tokenize",
            Counter::Estimate => "estimate",
        }
    }
}

/// The counter `llm.tokenizer` names, else the server's, else the estimate.
fn counter(tokenizer: &Path, client: &Client) -> Result<Counter> {
    if !tokenizer.as_os_str().is_empty() {
        if !tokenizer.is_file() {
            return Err(ExitError::usage(format!(
                "llm.tokenizer {} is not a file; point it at the served model's GGUF or tokenizer.json, or set it to \"\"",
                tokenizer.display()
            )));
        }
        if tokenizer.extension().is_some_and(|e| e == "gguf") {
            return Ok(Counter::Gguf(Box::new(Llm::load(tokenizer, true)?)));
        }
        let t = tokenizers::Tokenizer::from_file(tokenizer).map_err(|e| {
            ExitError::usage(format!(
                "llm.tokenizer {} is neither a GGUF file nor a tokenizer.json: {e}",
                tokenizer.display()
            ))
        })?;
        return Ok(Counter::Hf(Box::new(t)));
    }
    let probe = json!({ "content": "probe", "add_special": false });
    let server = client
        .try_root_json("/tokenize", Some(&probe))
        .is_some_and(|v| v.get("tokens").is_some_and(Value::is_array));
    Ok(if server {
        Counter::Server
    } else {
        Counter::Estimate
    })
}

/// Alternatives asked for the judgement's first token: enough to hold "yes" and "no" in
/// their spellings ("Yes", " yes") beside what else the model considers.
const TOP_LOGPROBS: u32 = 20;

/// P(yes) among the verdicts in an OpenAI chat completion's first-token `top_logprobs`
/// (every spelling of "yes" against every one of "no"); 0.5 where neither is among them,
/// None where the reply holds no log-probabilities.
fn yes_of_logprobs(v: &Value) -> Option<f32> {
    let top = v
        .pointer("/choices/0/logprobs/content/0/top_logprobs")?
        .as_array()?;
    let (mut yes, mut no) = (0.0f64, 0.0f64);
    for t in top {
        let (Some(token), Some(lp)) = (t["token"].as_str(), t["logprob"].as_f64()) else {
            continue;
        };
        match token.trim().to_lowercase().as_str() {
            "yes" => yes += lp.exp(),
            "no" => no += lp.exp(),
            _ => {}
        }
    }
    Some(if yes + no > 0.0 {
        (yes / (yes + no)) as f32
    } else {
        0.5
    })
}

fn wire_messages(messages: &[Message]) -> Vec<Value> {
    messages
        .iter()
        .map(|m| json!({ "role": m.role, "content": m.parts.concat() }))
        .collect()
}

/// A conservative token count: bytes / 3, rounded up.
pub fn estimate(text: &str) -> usize {
    text.len().div_ceil(3)
}

/// What a stream said so far.
#[derive(Default)]
struct Stream {
    done: bool,
    finish: Option<String>,
    first_piece_ms: Option<f64>,
    pieces: usize,
    usage: Option<Value>,
    timings: Option<Value>,
}

impl Stream {
    /// Reads one event: its text, if any.
    fn event(&mut self, event: &Value, server: &str) -> Result<Option<String>> {
        if let Some(err) = event.get("error") {
            let msg = err
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| err.to_string(), str::to_string);
            return Err(ExitError::model(format!(
                "{server} failed mid-answer: {msg}"
            )));
        }
        if let Some(u) = event.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(u.clone());
        }
        if let Some(t) = event.get("timings").filter(|t| t.is_object()) {
            self.timings = Some(t.clone());
        }
        let Some(choice) = event.pointer("/choices/0") else {
            return Ok(None);
        };
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(f.to_string());
        }
        let piece = choice
            .pointer("/delta/content")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .map(str::to_string);
        if piece.is_some() {
            self.pieces += 1;
        }
        Ok(piece)
    }

    /// Prefill and decode figures: the server's own (llama-server `timings`, OpenAI
    /// `usage`) where it gives them, else what the client saw.
    fn figures(&self, prompt_len: usize, cancelled: bool, start: Instant) -> (Prefill, Decode) {
        let total_ms = start.elapsed().as_secs_f64() * 1e3;
        let num = |v: &Option<Value>, p: &str| v.as_ref().and_then(|v| v.pointer(p)?.as_f64());
        let first = self.first_piece_ms.unwrap_or(total_ms);
        let prompt_ms = num(&self.timings, "/prompt_ms").unwrap_or(first).min(first);
        let cached = num(&self.timings, "/cache_n")
            .or_else(|| num(&self.usage, "/prompt_tokens_details/cached_tokens"))
            .unwrap_or(0.0) as usize;
        let prompt_tokens = num(&self.usage, "/prompt_tokens").map_or(prompt_len, |n| n as usize);
        let tokens = num(&self.usage, "/completion_tokens")
            .or_else(|| num(&self.timings, "/predicted_n"))
            .map_or(self.pieces, |n| n as usize);
        let decode_ms = num(&self.timings, "/predicted_ms").unwrap_or(total_ms - prompt_ms);
        let stop = if cancelled {
            StopReason::Cancelled
        } else {
            match self.finish.as_deref() {
                Some("length") => StopReason::MaxTokens,
                _ => StopReason::EndOfText,
            }
        };
        (
            Prefill {
                prompt_tokens,
                cached_tokens: cached.min(prompt_tokens),
                ms: prompt_ms,
            },
            Decode {
                tokens,
                ms: decode_ms,
                first_piece_ms: Some((first - prompt_ms).max(0.0)),
                stop,
                ..Decode::default()
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(lines: &[&str]) -> (Stream, Vec<String>) {
        let mut s = Stream::default();
        let mut text = Vec::new();
        for l in lines {
            let v: Value = serde_json::from_str(l).unwrap();
            if let Some(p) = s.event(&v, "srv").unwrap() {
                text.push(p);
            }
        }
        (s, text)
    }

    #[test]
    fn a_judgement_is_read_from_the_first_tokens_logprobs() {
        let reply = |top: &str| -> Value {
            serde_json::from_str(&format!(
                r#"{{"choices":[{{"message":{{"content":"Yes"}},"logprobs":{{"content":[{{"token":"Yes","logprob":-0.1,"top_logprobs":{top}}}]}}}}],"usage":{{"prompt_tokens":90}}}}"#
            ))
            .unwrap()
        };
        // Every spelling counts: P(yes) = (0.5 + 0.2) / (0.5 + 0.2 + 0.3 + 0.0).
        let v = reply(
            r#"[{"token":"Yes","logprob":-0.693147},{"token":" yes","logprob":-1.609438},{"token":"No","logprob":-1.203973},{"token":"Maybe","logprob":-3.0}]"#,
        );
        let p = yes_of_logprobs(&v).unwrap();
        assert!((p - 0.7).abs() < 1e-4, "{p}");
        // Neither verdict among the alternatives: undecided, as a local judge says.
        assert_eq!(
            yes_of_logprobs(&reply(r#"[{"token":"The","logprob":-0.1}]"#)),
            Some(0.5)
        );
        // A server that gives no log-probabilities cannot judge.
        let bare: Value =
            serde_json::from_str(r#"{"choices":[{"message":{"content":"yes"}}]}"#).unwrap();
        assert_eq!(yes_of_logprobs(&bare), None);
    }

    #[test]
    fn a_llama_server_stream_gives_text_and_the_servers_own_figures() {
        let (s, text) = events(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Run "},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"PRAGMA [S1]."},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}],"timings":{"cache_n":40,"prompt_n":60,"prompt_ms":120.5,"predicted_n":7,"predicted_ms":70.0}}"#,
            r#"{"choices":[],"usage":{"completion_tokens":7,"prompt_tokens":100,"prompt_tokens_details":{"cached_tokens":40}}}"#,
        ]);
        assert_eq!(text, ["Run ", "PRAGMA [S1]."]);
        let (p, d) = s.figures(99, false, Instant::now());
        assert_eq!((p.prompt_tokens, p.cached_tokens), (100, 40));
        assert_eq!((d.tokens, d.ms, d.stop), (7, 70.0, StopReason::MaxTokens));
    }

    #[test]
    fn a_plain_openai_stream_falls_back_to_what_the_client_saw() {
        let (s, text) = events(&[
            r#"{"choices":[{"index":0,"delta":{"content":"a"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"stop"}]}"#,
        ]);
        assert_eq!(text.concat(), "ab");
        let (p, d) = s.figures(42, false, Instant::now());
        assert_eq!((p.prompt_tokens, p.cached_tokens), (42, 0));
        assert_eq!((d.tokens, d.stop), (2, StopReason::EndOfText));
        let (_, d) = s.figures(42, true, Instant::now());
        assert_eq!(d.stop, StopReason::Cancelled);
    }

    #[test]
    fn an_error_event_is_a_model_error_with_the_servers_message() {
        let mut s = Stream::default();
        let v = json!({"error": {"message": "context exceeded", "code": 400}});
        let e = s.event(&v, "http://h/v1").unwrap_err();
        assert_eq!(crate::exit::exit_code_of(&e), crate::exit::Exit::Model);
        assert!(format!("{e:#}").contains("context exceeded"), "{e:#}");
    }

    #[test]
    fn the_estimate_is_never_below_a_third_of_the_bytes() {
        assert_eq!(estimate(""), 0);
        assert_eq!(estimate("abcd"), 2);
        assert_eq!(estimate("é"), 1);
    }
}

//! The HTTP client for OpenAI-compatible servers, and the only user of reqwest (blocking,
//! like the engine): llama.cpp's `llama-server`, vLLM, Ollama, TEI or a hosted API. The
//! backends on it live with their kind: `llm/remote.rs` generates (`llm.backend = "openai"`),
//! `embed/remote.rs` embeds (`embed.backend = "openai"`).
//!
//! One [`Client`] per server: a bearer key read from the environment variable the settings
//! name, a connect timeout and a whole-request timeout, and retries with exponential backoff
//! (or the server's `Retry-After`) when the server cannot be reached or answers 429 or 5xx.
//! A request that fails for good is an exit-5 error naming the server and the setting to fix.

use std::time::Duration;

use anyhow::Result;
use reqwest::blocking::{Client as Http, Response};
use reqwest::StatusCode;
use serde_json::Value;

use crate::exit::ExitError;

/// Longest wait between two tries, whatever the server's `Retry-After` asks for.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The first backoff; each retry doubles it.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);

/// An OpenAI-compatible server.
pub struct Client {
    http: Http,
    /// The API base, `…/v1`, without a trailing slash.
    base: String,
    key: Option<String>,
    retries: u32,
    /// The setting that names this server (`llm.url`), for messages.
    setting: &'static str,
}

/// What one failed try tells the retry loop.
enum Failure {
    /// Worth another try: no connection, a timeout before the answer, 429 or 5xx.
    Retry(anyhow::Error, Option<Duration>),
    /// Not worth one: the server refused the request as it is.
    Fatal(anyhow::Error),
}

impl Client {
    /// A client for the API at `url`; the key comes from the environment variable named
    /// `key_env` (none when empty).
    pub fn new(
        url: &str,
        key_env: &str,
        timeout_s: f64,
        retries: u32,
        setting: &'static str,
    ) -> Result<Client> {
        let parsed = url::Url::parse(url).map_err(|e| {
            ExitError::usage(format!(
                "{setting} = {url:?} is not a URL ({e}); give one like http://127.0.0.1:8080/v1"
            ))
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ExitError::usage(format!(
                "{setting} = {url:?} must start with http:// or https://"
            )));
        }
        let key = match key_env {
            "" => None,
            name => Some(std::env::var(name).map_err(|_| {
                ExitError::usage(format!(
                    "the API key variable {name} (llm.api_key_env / embed.api_key_env) is not set; export it or set the key to \"\""
                ))
            })?),
        };
        let http = Http::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs_f64(timeout_s))
            .build()
            .map_err(|e| anyhow::anyhow!("building the HTTP client: {e}"))?;
        Ok(Client {
            http,
            base: url.trim_end_matches('/').to_string(),
            key,
            retries,
            setting,
        })
    }

    /// The API base URL (`…/v1`).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The server's root: the base without its `/v1` (where llama-server keeps `/tokenize`).
    fn root(&self) -> &str {
        self.base.strip_suffix("/v1").unwrap_or(&self.base)
    }

    /// POSTs `body` to `path` under the API base and returns the successful response, its
    /// body unread (a stream can be read as it arrives).
    pub fn post(&self, path: &str, body: &Value) -> Result<Response> {
        let url = format!("{}{path}", self.base);
        self.with_retries(&url, || {
            let mut req = self.http.post(&url).json(body);
            if let Some(k) = &self.key {
                req = req.bearer_auth(k);
            }
            req.send()
        })
    }

    /// The server's first listed model (`GET /models`); `setting` names it instead.
    pub fn first_model(&self, setting: &str) -> Result<String> {
        let v = self.get_json("/models")?;
        v.pointer("/data/0/id")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| {
                ExitError::usage(format!(
                    "{}/models lists no model; set {setting}",
                    self.base()
                ))
            })
    }

    /// GETs `path` under the API base as JSON.
    pub fn get_json(&self, path: &str) -> Result<Value> {
        let url = format!("{}{path}", self.base);
        let resp = self.with_retries(&url, || {
            let mut req = self.http.get(&url);
            if let Some(k) = &self.key {
                req = req.bearer_auth(k);
            }
            req.send()
        })?;
        resp.json()
            .map_err(|e| ExitError::model(format!("{url} did not answer JSON: {e}")))
    }

    /// POSTs `body` to `path` under the server's root, once, without retries: for optional
    /// llama-server extensions (`/tokenize`, `/apply-template`, `/props`) that another
    /// server may not have. `None` when the server has no such endpoint.
    pub fn try_root_json(&self, path: &str, body: Option<&Value>) -> Option<Value> {
        let url = format!("{}{path}", self.root());
        let mut req = match body {
            Some(b) => self.http.post(&url).json(b),
            None => self.http.get(&url),
        };
        if let Some(k) = &self.key {
            req = req.bearer_auth(k);
        }
        let resp = req.send().ok()?;
        if !resp.status().is_success() {
            return None;
        }
        resp.json().ok()
    }

    fn with_retries(
        &self,
        url: &str,
        send: impl Fn() -> reqwest::Result<Response>,
    ) -> Result<Response> {
        let mut backoff = FIRST_BACKOFF;
        let mut tries = 0;
        loop {
            tries += 1;
            let failure = match send() {
                Ok(resp) if resp.status().is_success() => return Ok(resp),
                Ok(resp) => self.refused(url, resp),
                Err(e) => self.unreachable(url, e),
            };
            match failure {
                Failure::Retry(e, after) if tries <= self.retries => {
                    let wait = after.unwrap_or(backoff).min(MAX_BACKOFF);
                    tracing::warn!(
                        url,
                        tries,
                        wait_ms = wait.as_millis() as u64,
                        "retrying: {e:#}"
                    );
                    std::thread::sleep(wait);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Failure::Retry(e, _) | Failure::Fatal(e) => return Err(e),
            }
        }
    }

    /// A response that is not a success, as a failure naming the server's own message.
    fn refused(&self, url: &str, resp: Response) -> Failure {
        let status = resp.status();
        let after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64);
        let body = resp.text().unwrap_or_default();
        let said = server_message(&body);
        let hint = match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                "; check the API key (llm.api_key_env / embed.api_key_env)"
            }
            StatusCode::NOT_FOUND => "; check the URL (it should end in /v1) and the model name",
            _ => "",
        };
        let e = ExitError::model(format!(
            "{url} answered {status}: {said}{hint} ({})",
            self.setting
        ));
        if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            Failure::Retry(e, after)
        } else {
            Failure::Fatal(e)
        }
    }

    fn unreachable(&self, url: &str, e: reqwest::Error) -> Failure {
        let e2 = ExitError::model(format!(
            "cannot reach the server at {url}: {}; start it or fix {}",
            error_chain(&e),
            self.setting
        ));
        if e.is_connect() || e.is_timeout() || e.is_request() {
            Failure::Retry(e2, None)
        } else {
            Failure::Fatal(e2)
        }
    }
}

/// The message inside an OpenAI-style error body (`{"error":{"message":…}}`), else the body's
/// first 300 characters.
fn server_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let msg = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("error"))
            .or_else(|| v.get("message"))
            .and_then(Value::as_str)
    });
    match msg {
        Some(m) => m.to_string(),
        None if body.trim().is_empty() => "(no message)".into(),
        None => body.trim().chars().take(300).collect(),
    }
}

/// An error and its causes on one line (reqwest's own message is only the outermost).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let s = c.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = c.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_messages_are_found_in_openai_and_plain_bodies() {
        assert_eq!(
            server_message(r#"{"error":{"message":"model not found","type":"x"}}"#),
            "model not found"
        );
        assert_eq!(server_message(r#"{"error":"busy"}"#), "busy");
        assert_eq!(server_message("  "), "(no message)");
        assert_eq!(server_message("Bad Gateway"), "Bad Gateway");
    }

    /// A scripted server: 503 (Retry-After: 0) twice, then 200; then 503 for good.
    #[test]
    fn busy_servers_are_retried_and_then_given_up_with_their_message() {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let port = server.server_addr().to_ip().unwrap().port();
        let script = [503, 503, 200, 503, 503];
        let t = std::thread::spawn(move || {
            for status in script {
                let req = server.recv().unwrap();
                let body = if status == 200 {
                    r#"{"data":[{"id":"m"}]}"#
                } else {
                    r#"{"error":{"message":"all slots busy"}}"#
                };
                let retry = tiny_http::Header::from_bytes("Retry-After", "0").unwrap();
                let resp = tiny_http::Response::from_string(body)
                    .with_status_code(status)
                    .with_header(retry);
                req.respond(resp).unwrap();
            }
        });
        let url = format!("http://127.0.0.1:{port}/v1");
        let c = Client::new(&url, "", 5.0, 2, "llm.url").unwrap();
        assert_eq!(c.get_json("/models").unwrap()["data"][0]["id"], "m");
        let c = Client::new(&url, "", 5.0, 1, "llm.url").unwrap();
        let e = c.get_json("/models").unwrap_err();
        t.join().unwrap();
        assert_eq!(crate::exit::exit_code_of(&e), crate::exit::Exit::Model);
        let msg = format!("{e:#}");
        assert!(
            msg.contains("503") && msg.contains("all slots busy"),
            "{msg}"
        );
    }

    #[test]
    fn urls_are_checked_before_any_request() {
        let e = Client::new("127.0.0.1:8080", "", 5.0, 0, "llm.url")
            .err()
            .expect("no scheme");
        assert!(format!("{e:#}").contains("llm.url"), "{e:#}");
        let e = Client::new("ftp://x/v1", "", 5.0, 0, "llm.url")
            .err()
            .expect("ftp");
        assert!(format!("{e:#}").contains("http://"), "{e:#}");
        let e = Client::new("http://x/v1", "RAG_TEST_NO_SUCH_KEY_VAR", 5.0, 0, "llm.url")
            .err()
            .expect("unset key variable");
        assert!(
            format!("{e:#}").contains("RAG_TEST_NO_SUCH_KEY_VAR"),
            "{e:#}"
        );
        let c = Client::new("http://h:1/v1/", "", 5.0, 0, "llm.url").unwrap();
        assert_eq!(c.base(), "http://h:1/v1");
        assert_eq!(c.root(), "http://h:1");
    }
}

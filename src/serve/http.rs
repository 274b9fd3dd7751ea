//! What `rag serve`'s handlers see of HTTP: a request already read whole (bounded, timed;
//! see [`super::net`]), JSON bodies in and out, errors as `{"error": {"message", "type"}}`
//! (the shape OpenAI clients already parse), the checks on who may call (bearer token, Host,
//! Origin, Content-Type), and server-sent events that leave as each event happens.

use std::convert::Infallible;

use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Response, StatusCode};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

/// Largest request body read; questions are short.
pub const MAX_BODY: usize = 1 << 20;

/// A response body: whole, or a stream of events.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// A request handed to a worker thread, with the way back for its response.
pub struct Request {
    pub method: Method,
    pub path: String,
    pub body: Bytes,
    reply: oneshot::Sender<Response<Body>>,
}

impl Request {
    pub fn new(
        method: Method,
        path: String,
        body: Bytes,
    ) -> (Request, oneshot::Receiver<Response<Body>>) {
        let (reply, rx) = oneshot::channel();
        let req = Request {
            method,
            path,
            body,
            reply,
        };
        (req, rx)
    }
}

/// A response with `status`, a content type and `extra` headers. A header that is not
/// valid HTTP (none of ours is) becomes a 500 rather than a panic.
pub fn response(
    status: u16,
    content_type: &str,
    body: Body,
    extra: &[(&str, String)],
) -> Response<Body> {
    let mut b = Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type);
    for (k, v) in extra {
        b = b.header(*k, v.as_str());
    }
    b.body(body).unwrap_or_else(|e| {
        let mut r = Response::new(whole(format!("building the response: {e}")));
        *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        r
    })
}

/// The web page at `/`: one static file in the binary (no external assets), which asks
/// through the same endpoints as any client. Its script builds every document string as
/// text, and the policy below lets it reach nothing but this server.
const PAGE: &str = include_str!("page.html");

pub fn page() -> Response<Body> {
    let policy = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                  connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
                  frame-ancestors 'none'";
    response(
        200,
        "text/html; charset=utf-8",
        whole(PAGE.to_string()),
        &[
            ("Content-Security-Policy", policy.to_string()),
            ("X-Content-Type-Options", "nosniff".into()),
            ("Referrer-Policy", "no-referrer".into()),
            ("Cache-Control", "no-cache".into()),
        ],
    )
}

pub fn whole(s: String) -> Body {
    Full::new(Bytes::from(s)).boxed_unsync()
}

/// Sends `body` with `status`; returns the status for the metrics. A client that went away
/// before the response is not the server's error.
pub fn send(
    req: Request,
    status: u16,
    content_type: &str,
    body: String,
    extra: &[(&str, String)],
) -> u16 {
    let _ = req
        .reply
        .send(response(status, content_type, whole(body), extra));
    status
}

pub fn json(req: Request, status: u16, body: &Value) -> u16 {
    send(req, status, "application/json", body.to_string(), &[])
}

/// The JSON error kinds by status, as OpenAI's API names them.
fn kind(status: u16) -> &'static str {
    match status {
        400 | 403 | 404 | 405 | 408 | 413 | 415 | 431 => "invalid_request_error",
        401 => "authentication_error",
        429 => "rate_limit_error",
        503 => "overloaded_error",
        _ => "server_error",
    }
}

/// The body of an error response.
pub fn error_body(status: u16, message: &str) -> String {
    json!({"error": {"message": message, "type": kind(status), "code": status}}).to_string()
}

pub fn error(req: Request, status: u16, message: &str, extra: &[(&str, String)]) -> u16 {
    send(
        req,
        status,
        "application/json",
        error_body(status, message),
        extra,
    )
}

/// The request body as JSON, or the status and message to answer with.
pub fn body_json(body: &[u8]) -> Result<Value, (u16, String)> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err((400, "the request needs a JSON object body".into()));
    }
    serde_json::from_slice(body).map_err(|e| (400, format!("the body is not valid JSON: {e}")))
}

/// Whether the request carries `Authorization: Bearer <token>`; compared in constant time,
/// so response timing does not leak how much of a guess was right.
pub fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let (a, b) = (given.as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn text(v: Option<&HeaderValue>) -> Option<&str> {
    v.and_then(|v| v.to_str().ok())
}

/// Why a request may not be served, as (status, message), or `None` when it may. `loopback`
/// is set for a server without a token on a loopback address, `port` is the port it listens
/// on.
///
/// A tokenless loopback server trusts whoever can reach it, and a web page in the user's
/// browser can: by DNS rebinding (a name of the attacker's that resolves to 127.0.0.1, so the
/// browser sends its own Host) or by a plain cross-site POST. So its Host must be a loopback
/// name and port, any Origin must be the server's own, and a POST must say it is JSON, which a
/// page cannot send across sites without a CORS preflight that rag never grants.
pub fn refused(
    method: &Method,
    headers: &HeaderMap,
    loopback: bool,
    port: u16,
    allowed: &[String],
) -> Option<(u16, String)> {
    if headers.get_all(header::HOST).iter().count() > 1 {
        return Some((400, "the request has more than one Host header".into()));
    }
    let host = text(headers.get(header::HOST)).unwrap_or("");
    if loopback && !loopback_host(host, port) && !allowed_host(host, allowed) {
        return Some((
            403,
            format!(
                "Host {host:?} is not this server's loopback address: rag serve without a token answers only requests to localhost, 127.0.0.1 or [::1] on port {port} (a web page could otherwise reach it by DNS rebinding); name it in serve.allowed_hosts, or set a token with --token, --token-file or RAG_SERVE_TOKEN"
            ),
        ));
    }
    if let Some(origin) = text(headers.get(header::ORIGIN)) {
        let own = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|o| o.eq_ignore_ascii_case(host));
        if !own {
            return Some((
                403,
                format!(
                    "cross-origin request from {origin:?}: rag serve answers scripts and its own origin, not other web pages"
                ),
            ));
        }
    }
    if method == Method::POST {
        let ct = text(headers.get(header::CONTENT_TYPE)).unwrap_or("");
        let essence = ct.split(';').next().unwrap_or("").trim();
        if !essence.eq_ignore_ascii_case("application/json") {
            return Some((
                415,
                format!(
                    "Content-Type {ct:?} is not JSON: send the body with Content-Type: application/json (curl: --json)"
                ),
            ));
        }
    }
    None
}

/// Whether the name in `host` (a Host header, port and case aside) is one the operator
/// allows (`serve.allowed_hosts`, such as a reverse proxy's name for this machine).
fn allowed_host(host: &str, allowed: &[String]) -> bool {
    let name = match host.rsplit_once(':') {
        Some((n, p)) if !p.contains(']') => n,
        _ => host,
    };
    !name.is_empty() && allowed.iter().any(|a| a.eq_ignore_ascii_case(name))
}

/// Whether `host` (a Host header) names a loopback address on `port`.
fn loopback_host(host: &str, port: u16) -> bool {
    let (name, given_port) = match host.rsplit_once(':') {
        // `[::1]:8089`, `localhost:8089`; a bare `[::1]` has its colons inside the brackets.
        Some((n, p)) if !p.contains(']') => (n, Some(p)),
        _ => (host, None),
    };
    let name = name.to_ascii_lowercase();
    let loopback = name == "localhost"
        || name == "[::1]"
        || name
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback());
    loopback && given_port.is_none_or(|p| p.parse() == Ok(port))
}

/// A server-sent event stream. The response head goes out with the first event, so a
/// request refused before any event (a full queue) can still get a plain error response.
pub enum Sse {
    Pending(Request),
    Open(mpsc::Sender<Bytes>),
    /// The client went away (or never came back): nothing more is written.
    Closed,
}

/// Events buffered between the generator and a client that reads slower than it: beyond
/// this the generator waits, and a client that stops reading is cut off by the write
/// timeout, which stops the answer.
const EVENTS_BUFFERED: usize = 64;

impl Sse {
    pub fn new(req: Request) -> Sse {
        Sse::Pending(req)
    }

    /// Writes `data` as one event. Fails when the client is gone, which stops the answer.
    pub fn data(&mut self, data: &str) -> std::io::Result<()> {
        if let Sse::Pending(_) = self {
            let Sse::Pending(req) = std::mem::replace(self, Sse::Closed) else {
                unreachable!()
            };
            let (tx, rx) = mpsc::channel::<Bytes>(EVENTS_BUFFERED);
            let events = futures::stream::unfold(rx, |mut rx| async move {
                let event = rx.recv().await?;
                Some((Ok::<_, Infallible>(Frame::data(event)), rx))
            });
            let body = StreamBody::new(events).boxed_unsync();
            let extra = [
                ("Cache-Control", "no-cache".to_string()),
                ("X-Accel-Buffering", "no".to_string()),
            ];
            let head = response(200, "text/event-stream", body, &extra);
            if req.reply.send(head).is_err() {
                return Err(std::io::ErrorKind::BrokenPipe.into());
            }
            *self = Sse::Open(tx);
        }
        match self {
            Sse::Open(tx) => {
                // Called on a worker thread, never inside the runtime, so blocking is allowed.
                let sent = tx.blocking_send(Bytes::from(format!("data: {data}\n\n")));
                if sent.is_err() {
                    *self = Sse::Closed;
                    return Err(std::io::ErrorKind::BrokenPipe.into());
                }
                Ok(())
            }
            _ => Err(std::io::ErrorKind::BrokenPipe.into()),
        }
    }

    /// Ends the stream: the sender goes, and the body ends after the events sent.
    pub fn finish(self) -> std::io::Result<()> {
        Ok(())
    }

    /// The request back when nothing was sent yet (to answer with an error instead).
    pub fn unsent(self) -> Option<Request> {
        match self {
            Sse::Pending(r) => Some(r),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn a_tokenless_loopback_server_answers_only_its_own_host_and_origin_with_json() {
        let post = Method::POST;
        let json = ("content-type", "application/json; charset=utf-8");
        for host in [
            "127.0.0.1:8089",
            "localhost:8089",
            "[::1]:8089",
            "LOCALHOST",
            "[::1]",
        ] {
            let h = headers(&[("host", host), json]);
            assert_eq!(refused(&post, &h, true, 8089, &[]), None, "{host}");
        }
        for host in [
            "evil.example:8089",
            "127.0.0.1:9999",
            "127.0.0.1.evil.example",
            "",
        ] {
            let h = headers(&[("host", host), json]);
            let (status, msg) = refused(&post, &h, true, 8089, &[]).expect(host);
            assert_eq!(status, 403, "{host}");
            assert!(msg.contains("--token"), "{msg}");
        }
        // Names the operator allows, and any name behind a token; Origin and Content-Type
        // still count.
        let h = headers(&[("host", "rag.lan:8089"), json]);
        assert_eq!(refused(&post, &h, true, 8089, &["RAG.lan".into()]), None);
        assert_eq!(
            refused(&post, &h, true, 8089, &["other.lan".into()])
                .unwrap()
                .0,
            403
        );
        let h = headers(&[("host", "rag.internal:8089"), json]);
        assert_eq!(refused(&post, &h, false, 8089, &[]), None);
        let h = headers(&[
            ("host", "127.0.0.1:8089"),
            ("origin", "https://evil.example"),
            json,
        ]);
        assert_eq!(refused(&post, &h, true, 8089, &[]).unwrap().0, 403);
        let h = headers(&[
            ("host", "127.0.0.1:8089"),
            ("origin", "http://127.0.0.1:8089"),
            json,
        ]);
        assert_eq!(refused(&post, &h, true, 8089, &[]), None);
        let h = headers(&[("host", "127.0.0.1:8089"), ("content-type", "text/plain")]);
        assert_eq!(refused(&post, &h, true, 8089, &[]).unwrap().0, 415);
        let h = headers(&[("host", "127.0.0.1:8089")]);
        assert_eq!(
            refused(&Method::GET, &h, true, 8089, &[]),
            None,
            "a GET has no body"
        );
    }

    #[test]
    fn the_bearer_token_must_match_exactly() {
        let h = headers(&[("authorization", "Bearer s3cret")]);
        assert!(authorized(&h, "s3cret"));
        assert!(!authorized(&h, "s3cre"));
        assert!(!authorized(
            &headers(&[("authorization", "s3cret")]),
            "s3cret"
        ));
        assert!(!authorized(&HeaderMap::new(), "s3cret"));
    }
}

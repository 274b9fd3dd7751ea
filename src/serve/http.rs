//! The HTTP plumbing `rag serve` needs on top of tiny_http: JSON bodies in and out, errors
//! as `{"error": {"message", "type"}}` (the shape OpenAI clients already parse), bearer
//! tokens, and server-sent events written straight to the socket so each event leaves
//! when it happens (tiny_http's chunked responses buffer 8 KiB).

use std::io::{Read, Write};

use serde_json::{json, Value};
use tiny_http::{Header, Request, Response};

/// Largest request body read; questions are short.
const MAX_BODY: usize = 1 << 20;

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("ASCII header")
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
    let mut r = Response::from_string(body)
        .with_status_code(status)
        .with_header(header("Content-Type", content_type));
    for (k, v) in extra {
        r.add_header(header(k, v));
    }
    if let Err(e) = req.respond(r) {
        tracing::debug!("response not delivered: {e}");
    }
    status
}

pub fn json(req: Request, status: u16, body: &Value) -> u16 {
    send(req, status, "application/json", body.to_string(), &[])
}

/// The JSON error kinds by status, as OpenAI's API names them.
fn kind(status: u16) -> &'static str {
    match status {
        400 | 404 | 405 | 413 => "invalid_request_error",
        401 => "authentication_error",
        503 => "overloaded_error",
        _ => "server_error",
    }
}

pub fn error(req: Request, status: u16, message: &str, extra: &[(&str, String)]) -> u16 {
    let body = json!({"error": {"message": message, "type": kind(status), "code": status}});
    send(req, status, "application/json", body.to_string(), extra)
}

/// The request body as JSON, or the status and message to answer with.
pub fn body(req: &mut Request) -> Result<Value, (u16, String)> {
    let mut buf = Vec::new();
    let read = req
        .as_reader()
        .take(MAX_BODY as u64 + 1)
        .read_to_end(&mut buf);
    if let Err(e) = read {
        return Err((400, format!("reading the request body: {e}")));
    }
    if buf.len() > MAX_BODY {
        return Err((413, format!("the request body is over {MAX_BODY} bytes")));
    }
    if buf.iter().all(u8::is_ascii_whitespace) {
        return Err((400, "the request needs a JSON object body".into()));
    }
    serde_json::from_slice(&buf).map_err(|e| (400, format!("the body is not valid JSON: {e}")))
}

/// Whether the request carries `Authorization: Bearer <token>`; compared in constant time,
/// so response timing does not leak how much of a guess was right.
pub fn authorized(req: &Request, token: &str) -> bool {
    let given = req
        .headers()
        .iter()
        .find(|h| h.field.equiv("Authorization"))
        .map(|h| h.value.as_str())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let (a, b) = (given.as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A server-sent event stream. The response head goes out with the first event, so a
/// request refused before any event (a full queue) can still get a plain error response.
pub enum Sse {
    Pending(Request),
    Open(Box<dyn Write + Send>),
    /// The client went away (or never came back): nothing more is written.
    Closed,
}

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
            let mut w = req.into_writer();
            // tiny_http keeps the connection for the client's next request, so the body is
            // framed (chunked) for the client to know where it ends.
            w.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nX-Accel-Buffering: no\r\n\r\n",
            )?;
            *self = Sse::Open(w);
        }
        match self {
            Sse::Open(w) => {
                let event = format!("data: {data}\n\n");
                let r = write!(w, "{:x}\r\n{event}\r\n", event.len()).and_then(|_| w.flush());
                if r.is_err() {
                    *self = Sse::Closed;
                }
                r
            }
            _ => Err(std::io::ErrorKind::BrokenPipe.into()),
        }
    }

    /// Ends the stream (the last, empty chunk); the connection stays open for the next
    /// request.
    pub fn finish(self) -> std::io::Result<()> {
        match self {
            Sse::Open(mut w) => w.write_all(b"0\r\n\r\n").and_then(|_| w.flush()),
            _ => Ok(()),
        }
    }

    /// The request back when nothing was sent yet (to answer with an error instead).
    pub fn unsent(self) -> Option<Request> {
        match self {
            Sse::Pending(r) => Some(r),
            _ => None,
        }
    }
}

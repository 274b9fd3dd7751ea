//! The socket side of `rag serve`, and the one module that speaks hyper: it accepts
//! connections, reads each request whole within bounds, and hands it to the worker threads
//! that run the (synchronous) engine. One current-thread runtime does all the I/O, so a
//! thousand slow clients cost sockets and a little memory, never a worker.
//!
//! The limits, each against a way one client could take the server down:
//! - a body is read only as far as it arrives and at most [`MAX_BODY`](super::http::MAX_BODY)
//!   bytes: a huge `Content-Length` is refused, never allocated;
//! - the request head must arrive within `serve.io_timeout_s` (hyper's header timeout, also
//!   for an idle keep-alive connection), and fit 64 KiB and 64 headers;
//! - the body must arrive within the same time, and a response the client does not read for
//!   that long closes the connection (which also stops an answer streaming to it);
//! - at most `serve.max_connections` are open; beyond them a connection gets 503 and is closed,
//!   and an accept that fails (out of descriptors) waits and tries again instead of ending
//!   the server.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Limited};
use hyper::body::{Body as _, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Sleep;

use super::http::{self, Body, Request, MAX_BODY};
use super::metrics::Metrics;

/// What the socket side needs to decide, before any worker is involved.
pub struct Front {
    pub token: Option<String>,
    /// A tokenless server on loopback: only loopback Host names (see [`http::refused`]).
    pub loopback: bool,
    pub port: u16,
    /// `serve.allowed_hosts`.
    pub allowed_hosts: Vec<String>,
    /// Failed token attempts by client address, to slow down guessing.
    pub failures: Mutex<HashMap<IpAddr, Failures>>,
    pub stop: Arc<AtomicBool>,
    /// Requests handed to a worker and not finished (a streamed answer counts until its end).
    pub in_flight: Arc<AtomicUsize>,
    pub metrics: Arc<Metrics>,
    pub jobs: SyncSender<Request>,
    pub workers: usize,
    pub max_connections: usize,
    pub io_timeout: Duration,
}

/// Failed token attempts from one address within the current window.
pub struct Failures {
    count: u32,
    since: Instant,
}

/// Failed attempts an address may make per window before it is answered 429 unheard.
const MAX_FAILURES: u32 = 10;
const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Addresses remembered at most; beyond it the expired windows are dropped (and, if all
/// are live, the oldest), so a flood from many addresses cannot grow the table.
const MAX_TRACKED: usize = 4096;

/// Serves `listener` until `stop` is set and the requests in flight are done.
pub fn serve(listener: std::net::TcpListener, front: Front) -> io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(accept_loop(listener, Arc::new(front)))
}

async fn accept_loop(listener: std::net::TcpListener, front: Arc<Front>) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    let open = Arc::new(Semaphore::new(front.max_connections));
    let graceful = GracefulShutdown::new();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut warned: Option<Instant> = None;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => connection(&front, stream, peer.ip(), &open, &graceful),
                Err(e) => {
                    // Out of descriptors (EMFILE) or a connection reset before accept: the
                    // listener is still good, so wait for clients to leave and go on.
                    if warned.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                        tracing::warn!("accepting a connection: {e}; retrying");
                        warned = Some(Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = tick.tick() => {
                if front.stop.load(Ordering::SeqCst) && front.in_flight.load(Ordering::SeqCst) == 0 {
                    break;
                }
            }
        }
    }
    drop(listener);
    // The last responses are written; idle keep-alive connections are closed.
    let _ = tokio::time::timeout(Duration::from_secs(5), graceful.shutdown()).await;
    Ok(())
}

/// Serves one accepted connection on its own task, within the connection limit.
fn connection(
    front: &Arc<Front>,
    stream: TcpStream,
    peer: IpAddr,
    open: &Arc<Semaphore>,
    graceful: &GracefulShutdown,
) {
    let Ok(permit) = open.clone().try_acquire_owned() else {
        front.metrics.request("other", 503, 0.0);
        tokio::spawn(turn_away(stream));
        return;
    };
    let _ = stream.set_nodelay(true);
    let io = TokioIo::new(Stalled::new(stream, front.io_timeout));
    let f = front.clone();
    let svc = service_fn(move |req| {
        let f = f.clone();
        async move { Ok::<_, Infallible>(f.answer(req, peer).await) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(front.io_timeout)
        .max_header_size(64 * 1024)
        .max_buf_size(64 * 1024)
        .max_headers(64)
        .serve_connection(io, svc);
    let conn = graceful.watch(conn);
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("connection ended: {e}");
        }
        drop(permit);
    });
}

/// Why a request could not be handed to a worker: every worker busy and the queue full,
/// or the server stopping.
fn queue_refusal<T>(e: &TrySendError<T>, workers: usize) -> String {
    match e {
        TrySendError::Full(_) => format!(
            "all {workers} workers are busy and as many requests wait (serve.threads); retry shortly"
        ),
        TrySendError::Disconnected(_) => "rag serve is shutting down".into(),
    }
}

impl Front {
    /// The response to one request: answered here when it can be (health, refusals, a full
    /// pool), else by a worker.
    async fn answer(&self, req: hyper::Request<Incoming>, peer: IpAddr) -> Response<Body> {
        let started = Instant::now();
        let (parts, body) = req.into_parts();
        let path = parts.uri.path().to_string();
        let endpoint = super::endpoint(&path);
        let plain = |status: u16, msg: &str, extra: &[(&str, String)]| {
            let mut extra = extra.to_vec();
            // The body may be unread: the connection cannot carry another request.
            extra.push(("Connection", "close".into()));
            self.metrics
                .request(endpoint, status, started.elapsed().as_secs_f64());
            http::response(
                status,
                "application/json",
                http::whole(http::error_body(status, msg)),
                &extra,
            )
        };
        if path == "/healthz" && parts.method == Method::GET && !self.stop.load(Ordering::SeqCst) {
            self.metrics
                .request(endpoint, 200, started.elapsed().as_secs_f64());
            let ok = http::whole(r#"{"status":"ok"}"#.into());
            return http::response(200, "application/json", ok, &[]);
        }
        if path == "/" && parts.method == Method::GET {
            // The page holds no data and needs no token (its requests carry it), but it is
            // served only under this server's own Host, as the API is.
            if let Some((status, msg)) = self.foreign(&parts) {
                return plain(status, &msg, &[]);
            }
            self.metrics
                .request(endpoint, 200, started.elapsed().as_secs_f64());
            return http::page();
        }
        if let Err((status, msg, extra)) = self.admit(&parts, peer) {
            drain(body).await;
            return plain(status, &msg, &extra);
        }
        let body = match self.read_body(body).await {
            Ok(b) => b,
            Err((status, msg)) => return plain(status, &msg, &[]),
        };
        let (job, reply) = Request::new(parts.method, path, body);
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        if let Err(e) = self.jobs.try_send(job) {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            let msg = queue_refusal(&e, self.workers);
            return plain(503, &msg, &[("Retry-After", "1".into())]);
        }
        match reply.await {
            Ok(r) => r,
            Err(_) => plain(
                500,
                "the worker answering this request stopped; see the server log",
                &[],
            ),
        }
    }

    /// The Host, Origin and Content-Type checks ([`http::refused`]) with this server's
    /// address and allowed names.
    fn foreign(&self, parts: &hyper::http::request::Parts) -> Option<(u16, String)> {
        http::refused(
            &parts.method,
            &parts.headers,
            self.loopback,
            self.port,
            &self.allowed_hosts,
        )
    }

    /// Whether the request may be served at all: not while stopping, not from a foreign
    /// Host or Origin or with a body that is not JSON, not without the token. The refusal
    /// as (status, message, extra headers).
    fn admit(&self, parts: &hyper::http::request::Parts, peer: IpAddr) -> Result<(), Refusal> {
        if self.stop.load(Ordering::SeqCst) {
            return Err((503, "rag serve is shutting down".into(), vec![]));
        }
        if let Some((status, msg)) = self.foreign(parts) {
            return Err((status, msg, vec![]));
        }
        let Some(token) = &self.token else {
            return Ok(());
        };
        if let Some(wait) = self.locked_out(peer) {
            let msg =
                format!("too many wrong tokens from {peer}; retry in {wait} s with the right one");
            return Err((429, msg, vec![("Retry-After", wait.to_string())]));
        }
        if !http::authorized(&parts.headers, token) {
            self.failed(peer);
            let msg = "missing or wrong bearer token: send `Authorization: Bearer <token>` (the one given to rag serve --token, --token-file or RAG_SERVE_TOKEN)";
            return Err((401, msg.into(), vec![("WWW-Authenticate", "Bearer".into())]));
        }
        Ok(())
    }

    /// Seconds until `peer` may try a token again, when it failed too often.
    fn locked_out(&self, peer: IpAddr) -> Option<u64> {
        let table = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let f = table.get(&peer)?;
        let left = FAILURE_WINDOW.checked_sub(f.since.elapsed())?;
        (f.count >= MAX_FAILURES).then(|| left.as_secs().max(1))
    }

    /// Counts a wrong token from `peer`.
    fn failed(&self, peer: IpAddr) {
        let mut table = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if table.len() >= MAX_TRACKED {
            table.retain(|_, f| f.since.elapsed() < FAILURE_WINDOW);
            if table.len() >= MAX_TRACKED {
                let oldest = table.iter().min_by_key(|(_, f)| f.since).map(|(ip, _)| *ip);
                oldest.map(|ip| table.remove(&ip));
            }
        }
        let f = table.entry(peer).or_insert(Failures {
            count: 0,
            since: Instant::now(),
        });
        if f.since.elapsed() >= FAILURE_WINDOW {
            *f = Failures {
                count: 0,
                since: Instant::now(),
            };
        }
        f.count += 1;
    }

    /// The body, at most [`MAX_BODY`] bytes, arriving within the I/O timeout.
    async fn read_body(&self, body: Incoming) -> Result<hyper::body::Bytes, (u16, String)> {
        let too_large = || (413, format!("the request body is over {MAX_BODY} bytes"));
        if body.size_hint().lower() > MAX_BODY as u64 {
            return Err(too_large());
        }
        let read =
            tokio::time::timeout(self.io_timeout, Limited::new(body, MAX_BODY).collect()).await;
        match read {
            Err(_) => Err((
                408,
                format!(
                    "the request body did not arrive within {} s (serve.io_timeout_s)",
                    self.io_timeout.as_secs()
                ),
            )),
            Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
            Ok(Err(e)) => Err((400, format!("reading the request body: {e}"))),
            Ok(Ok(collected)) => Ok(collected.to_bytes()),
        }
    }
}

/// Answers a connection over the limit with 503 and closes it. The request the client sent
/// meanwhile is read (64 KiB, 1 s at most) before the close, which is then clean: a close
/// with unread bytes would reset the connection and could destroy the 503 unread.
async fn turn_away(mut stream: TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let busy = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    let linger = async {
        stream.write_all(busy).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut left = 64 * 1024;
        while left > 0 {
            match stream.read(&mut sink).await? {
                0 => break,
                n => left -= n.min(left),
            }
        }
        io::Result::Ok(())
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), linger).await;
}

/// Why a request is refused before its body is read: status, message, extra headers.
type Refusal = (u16, String, Vec<(&'static str, String)>);

/// Reads and drops what a refused request's small body sent (64 KiB, 1 s at most), so the
/// connection closes cleanly: closing with unread bytes makes the kernel send a reset, which
/// can destroy the refusal before the client reads it.
async fn drain(body: Incoming) {
    if body.size_hint().lower() <= 64 * 1024 {
        let read = Limited::new(body, 64 * 1024).collect();
        let _ = tokio::time::timeout(Duration::from_secs(1), read).await;
    }
}

/// A socket whose writes fail once they have made no progress for `limit`: a client that
/// stops reading its response (or pipelines requests and never reads) is cut off instead of
/// holding the connection, and the answer streaming to it, forever.
struct Stalled {
    io: TcpStream,
    limit: Duration,
    since: Option<Pin<Box<Sleep>>>,
}

impl Stalled {
    fn new(io: TcpStream, limit: Duration) -> Stalled {
        Stalled {
            io,
            limit,
            since: None,
        }
    }

    /// `Pending` from the socket starts (or checks) the stall timer; progress resets it.
    fn watch<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if r.is_ready() {
            self.since = None;
            return r;
        }
        let limit = self.limit;
        let timer = self
            .since
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing for serve.io_timeout_s",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for Stalled {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // Reads have their own deadlines (the head's and the body's); an idle client is fine.
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Stalled {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.watch(cx, r)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        self.watch(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.watch(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

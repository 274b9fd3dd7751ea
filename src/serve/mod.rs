//! `rag serve`: the warm engine over HTTP. One process keeps the index, the embedder and
//! the generators loaded; searches run in parallel on the worker threads, answers take
//! turns at the generator through a bounded first-come queue ([`gate`]), and each request
//! first picks up any index version an ingest committed since the last one.
//!
//! Endpoints: `POST /v1/search`, `POST /v1/ask` (JSON, or server-sent events carrying the
//! `--ndjson` events), `POST /v1/chat/completions` (OpenAI-compatible, see [`openai`]),
//! `GET /healthz`, `GET /metrics`. The sockets are [`net`]'s (hyper, with the limits a server
//! facing hostile clients needs); the handlers here run on plain threads, like the engine.

mod gate;
mod http;
mod metrics;
mod net;
mod openai;

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use hyper::Method;
use serde_json::{json, Value};

use crate::engine::Answer;
use crate::engine::{Answerer, Batcher, Event, Generation, Held, Request as AnswerRequest};
use crate::exit::{Exit, ExitError};
use crate::printer::{Format, Printer, SearchHit};
use crate::retrieve::Query;
use crate::ui::Ui;

use http::Request;

pub use gate::Busy;

/// Everything the worker threads share.
struct State<'a> {
    engine: &'a Answerer,
    base: &'a Query,
    gate: gate::Gate,
    metrics: Arc<metrics::Metrics>,
    in_flight: Arc<AtomicUsize>,
    /// Where warnings and `-v` rankings go: quiet, since many requests share one stderr.
    ui: Ui,
    /// The way to the generation thread, which ends when this state is dropped.
    batcher: Batcher,
}

const ENDPOINTS: &str =
    "GET / (a web page), POST /v1/search, POST /v1/ask, POST /v1/chat/completions, GET /healthz, GET /metrics";

/// The shortest token accepted: with failed attempts rate-limited (10 a minute per client),
/// 12 random characters are out of reach of guessing.
const MIN_TOKEN: usize = 12;

/// The bearer token: `--token` / `RAG_SERVE_TOKEN`, or the first line of `--token-file`.
pub fn token(given: Option<String>, file: Option<&std::path::Path>) -> Result<Option<String>> {
    let token = match file {
        None => given,
        Some(f) => {
            let text = std::fs::read_to_string(f).map_err(|e| {
                ExitError::usage(format!(
                    "--token-file {}: {e}; write the token on the file's first line (for example `openssl rand -hex 16 > {0}`)",
                    f.display()
                ))
            })?;
            Some(text.lines().next().unwrap_or("").trim().to_string())
        }
    };
    if let Some(t) = &token {
        if t.trim().chars().count() < MIN_TOKEN {
            return Err(ExitError::usage(format!(
                "the serve token is {} characters; give at least {MIN_TOKEN} random ones with --token, --token-file or RAG_SERVE_TOKEN (for example `openssl rand -hex 16`)",
                t.trim().chars().count()
            )));
        }
    }
    Ok(token)
}

/// The address to listen on, checked: anything but loopback needs a token.
fn listen_addr(addr: &str, token: Option<&str>) -> Result<SocketAddr> {
    let parsed = addr
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            ExitError::usage(format!(
                "serve.addr = {addr:?} is not an address to listen on; give HOST:PORT such as 127.0.0.1:8089"
            ))
        })?;
    if !parsed.ip().is_loopback() && token.is_none() {
        return Err(ExitError::usage(format!(
            "listening on {parsed} would let the network read the indexed documents without a password; set a bearer token with --token, --token-file or RAG_SERVE_TOKEN, or listen on 127.0.0.1"
        )));
    }
    Ok(parsed)
}

/// Answers that may generate at once: `llm.parallel`, batched in one llama.cpp context for
/// a local generator (see `engine::shared`) and by the server for a remote one.
fn generation_slots(s: &crate::config::Settings) -> usize {
    s.llm.parallel.max(1)
}

/// Serves until SIGTERM or SIGINT, then finishes the requests in flight and returns.
pub fn run(engine: &Answerer, base: &Query, token: Option<&str>, ui: &Ui) -> Result<Exit> {
    let s = engine.settings().serve.clone();
    let addr = listen_addr(&s.addr, token)?;
    engine.preload()?;
    let listener = std::net::TcpListener::bind(addr).map_err(|e| {
        ExitError::usage(format!(
            "cannot listen on {addr}: {e}; choose another address with --addr or serve.addr (port 0 picks a free one)"
        ))
    })?;
    let stop = stop_on_signals()?;
    let (batcher, batches) = crate::engine::batcher();
    std::thread::scope(|outer| {
        // Every local answer decodes on this one thread: llama.cpp's OpenMP keeps a thread
        // team per calling thread, and answers spread over the HTTP workers decoded a fifth
        // slower once several teams shared the cores (docs/benchmarks.md).
        outer.spawn(|| engine.run_batches(batches));
        // The handle goes with the server's state: when serving ends, so does that thread.
        serve_on(engine, base, (listener, stop), batcher, token, ui)
    })?;
    ui.info("rag serve: stopped after finishing the requests in flight");
    Ok(Exit::Success)
}

/// Answers requests on `listener` until `stop` is raised and the requests in flight are
/// done; local answers go through `batcher` to the generation thread.
fn serve_on(
    engine: &Answerer,
    base: &Query,
    (listener, stop): (std::net::TcpListener, Arc<AtomicBool>),
    batcher: Batcher,
    token: Option<&str>,
    ui: &Ui,
) -> Result<()> {
    let s = engine.settings().serve.clone();
    let bound = listener.local_addr()?;
    let threads = workers(&s);
    let state = State {
        engine,
        base,
        gate: gate::Gate::new(s.queue, generation_slots(engine.settings())),
        metrics: Arc::default(),
        in_flight: Arc::default(),
        ui: Ui { quiet: true },
        batcher,
    };
    // As many requests may wait for a worker as there are workers; more get 503 at once.
    let (jobs, queue) = mpsc::sync_channel(threads);
    let front = net::Front {
        token: token.map(String::from),
        loopback: token.is_none(),
        port: bound.port(),
        allowed_hosts: s.allowed_hosts.clone(),
        failures: Default::default(),
        stop,
        in_flight: state.in_flight.clone(),
        metrics: state.metrics.clone(),
        jobs,
        workers: threads,
        max_connections: s.max_connections,
        io_timeout: Duration::from_secs(s.io_timeout_s),
    };
    // Printed whatever -q says: a script started with port 0 reads the port from it.
    let auth = if token.is_some() {
        "; bearer token required"
    } else {
        ""
    };
    ui.stderr(&format!(
        "rag serve: listening on http://{bound} ({ENDPOINTS}){auth}"
    ));
    let queue = Mutex::new(queue);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| worker(&queue, &state));
        }
        // Returns once stopped and drained; dropping the front's sender ends the workers.
        net::serve(listener, front)
    })?;
    Ok(())
}

/// Worker threads: `serve.threads`, or by default one per queued answer plus a few for
/// searches and health checks.
fn workers(s: &crate::config::ServeSettings) -> usize {
    if s.threads == 0 {
        s.queue + 4
    } else {
        s.threads
    }
    .max(1)
}

/// The flag SIGTERM and SIGINT raise to start draining; a second signal while draining
/// exits at once (130).
fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register_conditional_shutdown(sig, 130, stop.clone())?;
        signal_hook::flag::register(sig, stop.clone())?;
    }
    Ok(stop)
}

/// Answers the requests the socket side hands over, until it is gone.
fn worker(queue: &Mutex<mpsc::Receiver<Request>>, st: &State) {
    loop {
        let next = queue.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let Ok(req) = next else { return };
        let started = Instant::now();
        let endpoint = endpoint(&req.path);
        let status = handle(req, st);
        st.metrics
            .request(endpoint, status, started.elapsed().as_secs_f64());
        st.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The metrics label of a path: the endpoint, or "other" (labels must stay few).
fn endpoint(path: &str) -> &'static str {
    [
        "/",
        "/v1/search",
        "/v1/ask",
        "/v1/chat/completions",
        "/healthz",
        "/metrics",
    ]
    .into_iter()
    .find(|e| *e == path)
    .unwrap_or("other")
}

fn handle(req: Request, st: &State) -> u16 {
    let path = req.path.clone();
    let allowed = match path.as_str() {
        "/metrics" | "/healthz" => Method::GET,
        "/v1/search" | "/v1/ask" | "/v1/chat/completions" => Method::POST,
        _ => {
            let msg = format!("no endpoint {path}; the endpoints are {ENDPOINTS}");
            return http::error(req, 404, &msg, &[]);
        }
    };
    if req.method != allowed {
        let msg = format!("{path} takes {allowed}, not {}", req.method);
        return http::error(req, 405, &msg, &[("Allow", allowed.to_string())]);
    }
    if path == "/metrics" {
        let text = st
            .metrics
            .render(st.gate.waiting(), st.in_flight.load(Ordering::SeqCst));
        return http::send(req, 200, "text/plain; version=0.0.4", text, &[]);
    }
    let body = match http::body_json(&req.body) {
        Ok(b) => b,
        Err((status, msg)) => return http::error(req, status, &msg, &[]),
    };
    refresh(st);
    match path.as_str() {
        "/v1/search" => search(req, st, &body),
        "/v1/ask" => ask(req, st, &body),
        _ => openai::chat_completions(req, st, &body),
    }
}

/// Picks up an index version committed since the last request. A failure (an index being
/// rebuilt, a new one made with another embedder) keeps serving the version in use.
fn refresh(st: &State) {
    match st.engine.refresh() {
        Ok(true) => {
            st.metrics.reloads.fetch_add(1, Ordering::Relaxed);
        }
        Ok(false) => {}
        Err(e) => tracing::warn!(
            "the index changed but could not be re-opened; serving the version in use: {e:#}"
        ),
    }
}

fn search(req: Request, st: &State, body: &Value) -> u16 {
    let q = match crate::api::query(st.base, body, "query", &[]) {
        Ok(q) => q,
        Err(e) => return http::error(req, 400, &e, &[]),
    };
    match st.engine.retrieve(&q) {
        Ok((ranked, ms)) => {
            let hits = SearchHit::all(&ranked);
            let out = crate::printer::hits(&q.text, &hits, ms, true).stdout;
            http::send(req, 200, "application/json", out, &[])
        }
        Err(e) => http::error(req, 500, &format!("{e:#}"), &[]),
    }
}

/// `stream` from the body: absent is false; anything but a boolean is an error.
fn stream_flag(body: &Value) -> Result<bool, String> {
    match body.get("stream") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err("stream must be true or false".into()),
    }
}

/// How a generated answer went, for the response and the metrics.
enum Outcome {
    /// Boxed: an answer is large beside the other outcomes.
    Answered(Box<Answer>),
    Busy(Busy),
    Failed(anyhow::Error),
}

/// Answers `q` (retrieving with `q.text`, asking `question`), waiting for the generator's
/// turn after retrieval; `on` gets the events.
fn generate(
    st: &State,
    q: &Query,
    question: &str,
    on: &mut dyn FnMut(Event) -> std::io::Result<()>,
) -> Outcome {
    let mut waited = 0.0;
    let mut admit = || {
        let p = st.gate.enter()?;
        waited = p.waited.as_secs_f64();
        Ok::<_, anyhow::Error>(p)
    };
    // Warnings and `-v` rankings go to the server's stderr, not to the client.
    let mut on = |e: Event| {
        if crate::printer::aside(&e, &st.ui) {
            Ok(())
        } else {
            on(e)
        }
    };
    let request = AnswerRequest {
        query: q,
        question,
        how: Generation::Shared(&st.batcher),
        admit: Some(Box::new(move || Ok(Box::new(admit()?) as Box<dyn Held>))),
    };
    match st.engine.answer(request, &mut on) {
        Ok(a) => {
            if !a.abstained {
                st.metrics.answer(&a.timings, waited);
            }
            Outcome::Answered(Box::new(a))
        }
        Err(e) => match e.downcast::<Busy>() {
            Ok(b) => {
                st.metrics.rejected.fetch_add(1, Ordering::Relaxed);
                Outcome::Busy(b)
            }
            Err(e) => Outcome::Failed(e),
        },
    }
}

fn busy(req: Request, b: &Busy) -> u16 {
    http::error(
        req,
        503,
        &b.to_string(),
        &[("Retry-After", b.retry_after_s.to_string())],
    )
}

fn ask(req: Request, st: &State, body: &Value) -> u16 {
    let (q, stream) = match crate::api::query(st.base, body, "question", &["stream"])
        .and_then(|q| Ok((q, stream_flag(body)?)))
    {
        Ok(x) => x,
        Err(e) => return http::error(req, 400, &e, &[]),
    };
    let min_similarity = st.engine.settings().retrieval.min_similarity;
    if !stream {
        let printer = Printer {
            format: Format::Json,
            live: false,
            stats: false,
        };
        return match generate(st, &q, &q.text.clone(), &mut |_| Ok(())) {
            Outcome::Answered(a) => {
                let out = printer.answer(&a, min_similarity).stdout;
                http::send(req, 200, "application/json", out, &[])
            }
            Outcome::Busy(b) => busy(req, &b),
            Outcome::Failed(e) => http::error(req, 500, &format!("{e:#}"), &[]),
        };
    }
    let printer = Printer {
        format: Format::Ndjson,
        live: true,
        stats: false,
    };
    let mut sse = http::Sse::new(req);
    let outcome = generate(st, &q, &q.text.clone(), &mut |e| {
        for line in printer.event(&e).stdout.lines() {
            sse.data(line)?;
        }
        Ok(())
    });
    finish_stream(sse, outcome, |a| {
        printer
            .answer(a, min_similarity)
            .stdout
            .lines()
            .map(String::from)
            .collect()
    })
}

/// Ends an event stream: the closing events of an answer, the error as an event, or a
/// plain error response when nothing was streamed yet.
fn finish_stream(
    mut sse: http::Sse,
    outcome: Outcome,
    closing: impl Fn(&Answer) -> Vec<String>,
) -> u16 {
    let result = match outcome {
        Outcome::Answered(a) => closing(&a).iter().try_for_each(|l| sse.data(l)),
        Outcome::Busy(b) => {
            return match sse.unsent() {
                Some(req) => busy(req, &b),
                None => 503,
            }
        }
        Outcome::Failed(e) => {
            let msg = format!("{e:#}");
            if matches!(sse, http::Sse::Pending(_)) {
                let req = sse.unsent().expect("pending");
                return http::error(req, 500, &msg, &[]);
            }
            if matches!(sse, http::Sse::Closed) {
                // The client hung up mid-answer; generation stopped with it.
                return 499;
            }
            sse.data(&json!({"event": "error", "message": msg}).to_string())
        }
    };
    match result.and_then(|()| sse.finish()) {
        Ok(()) => 200,
        Err(_) => 499,
    }
}

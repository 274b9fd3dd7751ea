//! Parsers run in a worker process, so no file can take the ingest down. html5ever,
//! pdf-extract and lopdf are third-party code fed files nobody here wrote: a deeply nested
//! document can overflow the stack, a crafted PDF can allocate without end or loop forever,
//! and none of that can be caught inside one process. The worker is `rag` itself, started
//! with [`WORKER_ARG`]; it reads one request per line on stdin and answers one JSON line on
//! stdout. It runs under an address-space limit (`chunk.parse_memory_mb`); the parent waits
//! `chunk.parse_timeout_s` per file. A worker that dies, or runs out of time, costs that
//! one file: it is reported as failed and a fresh worker takes the next file.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::parse::{self, Document};

/// The hidden first argument that turns `rag` into a parse worker.
pub const WORKER_ARG: &str = "__parse-worker";

#[derive(Serialize, Deserialize)]
struct Request {
    rel: String,
    abs: PathBuf,
    max_bytes: u64,
}

/// A parsed file and the blake3 hash of the bytes that were parsed.
#[derive(Serialize, Deserialize)]
pub struct Parsed {
    pub doc: Document,
    pub hash: String,
}

#[derive(Serialize, Deserialize)]
enum Response {
    Parsed(Parsed),
    Failed(String),
}

/// Bounds on one file's parse.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub timeout: Duration,
    pub memory_mb: u64,
    /// `chunk.max_file_bytes`: a file that grew past it since the walk is not read.
    pub max_bytes: u64,
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// The end of what the worker wrote on stderr (a Rust abort says why there).
    stderr: Arc<Mutex<String>>,
}

/// The parent's handle: parses files in a worker, starting a new one after a failure.
pub struct Parser {
    exe: PathBuf,
    limits: Limits,
    worker: Option<Worker>,
}

impl Parser {
    pub fn new(limits: Limits) -> anyhow::Result<Parser> {
        let exe = std::env::current_exe().map_err(|e| {
            anyhow::anyhow!("finding the rag executable to start a parse worker: {e}")
        })?;
        Ok(Parser {
            exe,
            limits,
            worker: None,
        })
    }

    fn spawn(&self) -> Result<Worker, String> {
        let mut child = Command::new(&self.exe)
            .arg(WORKER_ARG)
            .arg(self.limits.memory_mb.to_string())
            // Its first stderr line says why it died; a backtrace would bury it.
            .env("RUST_BACKTRACE", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start a parse worker ({}): {e}", self.exe.display()))?;
        let stdin = child.stdin.take().ok_or("parse worker without stdin")?;
        let stdout = child.stdout.take().ok_or("parse worker without stdout")?;
        let mut err = child.stderr.take().ok_or("parse worker without stderr")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let tail = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut t) = tail.lock() {
                    t.push_str(&String::from_utf8_lossy(&buf[..n]));
                    let cut = t.len().saturating_sub(2048);
                    let cut = (cut..t.len()).find(|&i| t.is_char_boundary(i)).unwrap_or(0);
                    t.drain(..cut);
                }
            }
        });
        Ok(Worker {
            child,
            stdin,
            lines,
            stderr,
        })
    }

    /// Parses one file; the error is the reason it is reported as failed.
    pub fn parse(&mut self, rel: &str, abs: &Path) -> Result<Parsed, String> {
        if self.worker.is_none() {
            self.worker = Some(self.spawn()?);
        }
        let w = self.worker.as_mut().expect("just started");
        let req = serde_json::to_string(&Request {
            rel: rel.to_string(),
            abs: abs.to_path_buf(),
            max_bytes: self.limits.max_bytes,
        })
        .map_err(|e| e.to_string())?;
        let sent = writeln!(w.stdin, "{req}").and_then(|_| w.stdin.flush());
        let answer = match sent {
            Ok(()) => w.lines.recv_timeout(self.limits.timeout),
            Err(_) => Err(RecvTimeoutError::Disconnected),
        };
        match answer {
            Ok(line) => match serde_json::from_str(&line) {
                Ok(Response::Parsed(p)) => Ok(p),
                Ok(Response::Failed(e)) => Err(e),
                Err(e) => Err(self.fail(format!("the parse worker answered garbage ({e})"))),
            },
            Err(RecvTimeoutError::Timeout) => Err(self.fail(format!(
                "parsing took longer than {} s (chunk.parse_timeout_s); skipped",
                self.limits.timeout.as_secs_f64()
            ))),
            Err(RecvTimeoutError::Disconnected) => {
                let why = self.fail(String::new());
                Err(format!(
                    "the parser crashed on this file ({why}); skipped until the file changes"
                ))
            }
        }
    }

    /// Stops the current worker and says how it ended: `msg`, or its exit status and the
    /// first line it wrote on stderr (a Rust abort's reason).
    fn fail(&mut self, msg: String) -> String {
        let Some(mut w) = self.worker.take() else {
            return msg;
        };
        let _ = w.child.kill();
        let status = w.child.wait();
        if !msg.is_empty() {
            return msg;
        }
        // Give the stderr reader a moment to take the worker's last words.
        std::thread::sleep(Duration::from_millis(50));
        let last = w
            .stderr
            .lock()
            .map(|t| {
                t.lines()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("")
                    .to_string()
            })
            .unwrap_or_default();
        let status = status.map(describe).unwrap_or_else(|e| e.to_string());
        if last.is_empty() {
            status
        } else {
            format!("{status}: {}", last.trim())
        }
    }
}

impl Drop for Parser {
    fn drop(&mut self) {
        if let Some(mut w) = self.worker.take() {
            // Closing stdin ends the worker's loop; kill in case it is stuck in a parse.
            drop(w.stdin);
            let _ = w.child.kill();
            let _ = w.child.wait();
        }
    }
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status.signal() {
        Some(libc::SIGSEGV) | Some(libc::SIGBUS) => {
            "stack overflow or invalid memory access".into()
        }
        Some(libc::SIGABRT) => "aborted".into(),
        Some(libc::SIGKILL) => "killed".into(),
        Some(s) => format!("signal {s}"),
        None => format!("exit status {}", status.code().unwrap_or(-1)),
    }
}

/// The worker's main loop: `rag __parse-worker MEMORY_MB`.
pub fn serve(args: &[String]) -> ExitCode {
    let memory_mb: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(0);
    if memory_mb > 0 {
        limit_memory(memory_mb);
    }
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let response = match serde_json::from_str::<Request>(&line) {
            Ok(req) => parse_one(&req),
            Err(e) => Response::Failed(format!("bad request to the parse worker: {e}")),
        };
        let Ok(json) = serde_json::to_string(&response) else {
            break;
        };
        if writeln!(out, "{json}").and_then(|_| out.flush()).is_err() {
            break;
        }
    }
    ExitCode::SUCCESS
}

fn parse_one(req: &Request) -> Response {
    let bytes = match super::walk::read_file(&req.abs, req.max_bytes) {
        Ok(b) => b,
        Err(e) => return Response::Failed(format!("unreadable: {e}")),
    };
    // Hashed here: the record must describe the bytes that were parsed.
    let hash = parse::content_hash(&bytes);
    match parse::parse(&req.rel, &bytes) {
        Ok(doc) => Response::Parsed(Parsed { doc, hash }),
        Err(e) => Response::Failed(format!("{e:#}")),
    }
}

/// An address-space limit for this process: a runaway allocation fails (and the worker
/// aborts) instead of taking the machine's memory.
fn limit_memory(mb: u64) {
    let bytes = mb.saturating_mul(1 << 20) as libc::rlim_t;
    let lim = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // SAFETY: setrlimit reads the struct we pass and changes only this process's limits.
    unsafe {
        libc::setrlimit(libc::RLIMIT_AS, &lim);
    }
}

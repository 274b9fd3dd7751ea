//! `rag models fetch hf:ORG/REPO/FILE.gguf` against a local server that serves the Hugging
//! Face hub's URL layout as the hub does: a HEAD on `ORG/REPO/resolve/main/FILE` answered
//! with the file's SHA-256 and size and a redirect to a CDN path, range requests there, and a
//! connection dropped in the middle of the first download.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use crate::support::{repo, Project};

const NAME: &str = "hf:test-org/Smol-GGUF/smollm2-135m-q4_1.gguf";
const PATH: &str = "/test-org/Smol-GGUF/resolve/main/smollm2-135m-q4_1.gguf";

/// The hub's side: what it serves, what it was asked.
struct Hub {
    port: u16,
    /// The `Range` header of every GET on the CDN path ("" for none).
    ranges: Arc<Mutex<Vec<String>>>,
}

/// Serves `body` as the hub would, publishing `sha256`; the first CDN download stops after
/// `drop_at` bytes with the connection closed.
fn hub(body: Vec<u8>, sha256: String, drop_at: Option<usize>) -> Hub {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let ranges = Arc::new(Mutex::new(Vec::new()));
    let seen = ranges.clone();
    let body = Arc::new(body);
    std::thread::spawn(move || {
        let mut drop_at = drop_at;
        for stream in listener.incoming().flatten() {
            let (method, path, range) = request(&stream);
            let mut s = stream;
            if path == PATH {
                // As the hub: the LFS file's hash and size, and a redirect to its CDN.
                let head = format!(
                    "HTTP/1.1 302 Found\r\nLocation: /cdn/blob\r\nX-Linked-Etag: \"{sha256}\"\r\nX-Linked-Size: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(head.as_bytes());
            } else if path == "/cdn/blob" && method == "GET" {
                seen.lock().unwrap().push(range.clone().unwrap_or_default());
                let from = range
                    .as_deref()
                    .and_then(|r| r.strip_prefix("bytes="))
                    .and_then(|r| r.trim_end_matches('-').parse::<usize>().ok())
                    .unwrap_or(0);
                let status = if from > 0 {
                    format!(
                        "206 Partial Content\r\nContent-Range: bytes {from}-{}/{}",
                        body.len() - 1,
                        body.len()
                    )
                } else {
                    "200 OK".to_string()
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len() - from
                );
                let _ = s.write_all(head.as_bytes());
                let end = drop_at.take().map_or(body.len(), |d| d.min(body.len()));
                let _ = s.write_all(&body[from..end.max(from)]);
            } else {
                let _ = s.write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            }
            let _ = s.flush();
        }
    });
    Hub { port, ranges }
}

/// The method, path and `Range` header of one request.
fn request(s: &TcpStream) -> (String, String, Option<String>) {
    let mut r = BufReader::new(s);
    let mut line = String::new();
    let _ = r.read_line(&mut line);
    let mut parts = line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or_default().to_string(),
        parts.next().unwrap_or_default().to_string(),
    );
    let mut range = None;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("range") {
                range = Some(v.trim().to_string());
            }
        }
    }
    (method, path, range)
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    format!("{:x}", sha2::Sha256::digest(bytes))
}

#[test]
fn a_hub_file_is_fetched_resumed_checked_and_answers_by_name() {
    let small = std::fs::read(repo().join("models/SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let sum = sha256(&small);
    let half = small.len() / 2;
    let server = hub(small.clone(), sum.clone(), Some(half));
    let p = Project::with_docs();
    p.ingest();
    let url = format!("http://127.0.0.1:{}", server.port);

    // The first download drops at half; the same run resumes it from there.
    let (code, out, err) = p.run(&["models", "fetch", "--hub", &url, "--json", NAME]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let file = &v["files"][0];
    assert_eq!(file["got"], "fetched", "{v}");
    assert_eq!(
        *server.ranges.lock().unwrap(),
        ["".to_string(), format!("bytes={half}-")]
    );
    let placed = p
        .path()
        .join(".no-user-data/rag/models/hf/test-org/Smol-GGUF/smollm2-135m-q4_1.gguf");
    assert_eq!(file["path"], placed.display().to_string());
    assert_eq!(
        std::fs::read(&placed).unwrap(),
        small,
        "the whole file, byte for byte"
    );
    let left: Vec<_> = std::fs::read_dir(placed.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left.len(), 1, "no partial file left: {left:?}");

    // Again: checked in place, not fetched.
    let (code, out, _) = p.run(&["models", "fetch", "--hub", &url, "--json", NAME]);
    assert_eq!(code, 0);
    assert!(out.contains("\"got\":\"present\""), "{out}");
    assert_eq!(
        server.ranges.lock().unwrap().len(),
        2,
        "no download for a file in place"
    );

    // The name answers, and `rag models list` shows it.
    let q = "How fast does the flux regulator aboard Orbital Station Meridian hum?";
    let (code, out, err) = p.run(&["ask", "--json", "--model", NAME, q]);
    assert_eq!(code, 0, "{err}");
    let a: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(a["model"]["path"], placed.display().to_string());
    let (_, list, _) = p.run(&["models", "list", "--json"]);
    assert!(list.contains(NAME), "{list}");

    // `rag models remove` takes it, and its folders.
    let (code, out, err) = p.run(&["models", "remove", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("hf/test-org/Smol-GGUF/smollm2-135m-q4_1.gguf"),
        "{out}"
    );
    assert!(!p.path().join(".no-user-data/rag/models/hf").exists());
}

#[test]
fn a_partial_file_of_a_killed_run_is_resumed_and_a_wrong_one_never_lands() {
    let body: Vec<u8> = (0..300_000u32).flat_map(|i| i.to_le_bytes()).collect();
    let p = Project::empty();
    let dir = p.path().join("m");
    let part = dir.join("hf/test-org/Smol-GGUF/.smollm2-135m-q4_1.gguf.part");
    std::fs::create_dir_all(part.parent().unwrap()).unwrap();
    std::fs::write(&part, &body[..100_000]).unwrap();
    let server = hub(body.clone(), sha256(&body), None);
    let url = format!("http://127.0.0.1:{}", server.port);
    let d = dir.display().to_string();
    // The mirror the Hugging Face tools are pointed at, where models.hub is not set.
    let (code, out, err) = p.run_env(
        &[("HF_ENDPOINT", &url)],
        &["models", "fetch", "--dir", &d, "--json", NAME],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"resumed_at\":100000"), "{out}");
    assert_eq!(*server.ranges.lock().unwrap(), ["bytes=100000-"]);
    assert!(!part.exists());

    // A hub (or mirror) serving bytes that do not hash as published: exit 5, nothing lands.
    let other = p.path().join("o");
    let bad = hub(body.clone(), "ab".repeat(32), None);
    let url = format!("http://127.0.0.1:{}", bad.port);
    let o = other.display().to_string();
    let (code, _, err) = p.run(&["models", "fetch", "--dir", &o, "--hub", &url, NAME]);
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("SHA-256") && err.contains(&"ab".repeat(32)),
        "{err}"
    );
    let landed = other.join("hf/test-org/Smol-GGUF");
    assert!(
        std::fs::read_dir(&landed).map_or(true, |d| d.count() == 0),
        "nothing in {landed:?}"
    );

    // A name the hub does not have (models.hub from the environment, over HF_ENDPOINT), a
    // hub nobody answers at, a name that is not one.
    let (code, _, err) = p.run_env(
        &[
            ("RAG_MODELS_HUB", &url),
            ("HF_ENDPOINT", "http://127.0.0.1:9"),
        ],
        &[
            "models",
            "fetch",
            "--dir",
            &o,
            "hf:test-org/Smol-GGUF/other.gguf",
        ],
    );
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("404") && err.contains("no such repository or file"),
        "{err}"
    );
    let nobody = format!("http://127.0.0.1:{}", crate::support::free_port());
    let (code, _, err) = p.run(&["models", "fetch", "--dir", &o, "--hub", &nobody, NAME]);
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("cannot reach") && err.contains("models.hub"),
        "{err}"
    );
    let (code, _, err) = p.run(&["models", "fetch", "--dir", &o, "hf:../x/y.gguf"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("hf:ORG/REPO/FILE.gguf"), "{err}");
}

/// Reads a whole response body the way a client would (used to check the server itself).
#[test]
fn the_test_hub_answers_a_range_as_the_hub_does() {
    let server = hub(b"0123456789".to_vec(), "0".repeat(64), None);
    let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    s.write_all(b"GET /cdn/blob HTTP/1.1\r\nRange: bytes=4-\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(
        text.starts_with("HTTP/1.1 206")
            && text.contains("Content-Range: bytes 4-9/10")
            && text.ends_with("456789"),
        "{text}"
    );
}

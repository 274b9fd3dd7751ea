//! The web page of `rag serve`, in a real browser: headless Chromium (Debian's `chromium`)
//! driven over WebDriver by Debian's `chromedriver`, both installed by
//! `scripts/setup.sh --browser` (which `make test` runs). The test types a question, waits
//! for the streamed answer, follows what a person would check (the answer, its cited source,
//! the figures), tries search-only mode and a server that needs a token, and saves a
//! screenshot (`$RAG_SCREENSHOT_DIR`, else the test's temporary folder).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

use crate::serve::start;
use crate::support::{free_port, Project, Started};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A WebDriver session on a chromedriver this test started.
struct Browser {
    http: reqwest::blocking::Client,
    base: String,
    _driver: Started,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn start() -> Browser {
        let port = free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (scripts/setup.sh --browser installs Debian's chromium-driver)");
        let driver = Started(driver);
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap();
        let root = format!("http://127.0.0.1:{port}");
        let ready = Instant::now();
        while http.get(format!("{root}/status")).send().is_err() {
            assert!(
                ready.elapsed() < Duration::from_secs(60),
                "chromedriver did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = tempfile::tempdir().unwrap();
        // As the machine's own probe starts it: no GPU, no sandbox (root), and none of the
        // background connections a closed network refuses.
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1100,1300",
        ]
        .iter()
        .map(|a| a.to_string())
        .chain([format!("--user-data-dir={}", profile.path().display())])
        .collect::<Vec<_>>();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args}
        }}});
        let v: Value = http
            .post(format!("{root}/session"))
            .json(&caps)
            .send()
            .unwrap()
            .json()
            .unwrap();
        let id = v["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {v}"));
        Browser {
            http,
            base: format!("{root}/session/{id}"),
            _driver: driver,
            _profile: profile,
        }
    }

    fn post(&self, path: &str, body: Value) -> Value {
        let v: Value = self
            .http
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert!(v["value"].get("error").is_none(), "{path}: {v}");
        v["value"].clone()
    }

    fn open(&self, url: &str) {
        self.post("/url", json!({ "url": url }));
    }

    fn find(&self, css: &str) -> String {
        let v = self.post("/element", json!({"using": "css selector", "value": css}));
        v[ELEMENT].as_str().unwrap().to_string()
    }

    fn type_in(&self, css: &str, text: &str) {
        let e = self.find(css);
        self.post(&format!("/element/{e}/clear"), json!({}));
        self.post(&format!("/element/{e}/value"), json!({ "text": text }));
    }

    fn click(&self, css: &str) {
        let e = self.find(css);
        self.post(&format!("/element/{e}/click"), json!({}));
    }

    fn js(&self, script: &str) -> Value {
        self.post("/execute/sync", json!({"script": script, "args": []}))
    }

    fn text(&self, id: &str) -> String {
        self.js(&format!(
            "return document.getElementById('{id}').textContent"
        ))
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    /// Waits until `#status` reads `want` (a watchdog against a hang, not a speed bound).
    fn wait_status(&self, want: &str) -> String {
        let started = Instant::now();
        loop {
            let s = self.text("status");
            if s.contains(want) {
                return s;
            }
            assert!(
                started.elapsed() < Duration::from_secs(600),
                "the page never said {want:?}; it says {s:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn screenshot(&self, name: &str, dir: &std::path::Path) -> std::path::PathBuf {
        let v: Value = self
            .http
            .get(format!("{}/screenshot", self.base))
            .send()
            .unwrap()
            .json()
            .unwrap();
        let png = base64::engine::general_purpose::STANDARD
            .decode(v["value"].as_str().unwrap())
            .unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
        let path = dir.join(name);
        std::fs::write(&path, png).unwrap();
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.http.delete(&self.base).send();
    }
}

#[test]
fn the_web_page_asks_streams_cites_and_searches_in_a_real_browser() {
    let p = Project::with_docs();
    p.ingest();
    let srv = start(&p, &[], &[]);
    let shots = std::env::var_os("RAG_SCREENSHOT_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| p.path().to_path_buf());
    std::fs::create_dir_all(&shots).unwrap();
    let b = Browser::start();
    b.open(&format!("http://{}/", srv.addr));
    assert_eq!(b.js("return document.title"), "rag");

    b.type_in("#q", "At what pressure does the Kestrel relief valve open?");
    b.click("#go");
    b.wait_status("done");
    let answer = b.text("answer");
    assert!(!answer.trim().is_empty(), "an answer streamed in");
    // Each citation marker is a link to its source, and the source names the file.
    let cites = b.js(
        "return [...document.querySelectorAll('#answer a.cite')].map(a => a.getAttribute('href'))",
    );
    let cites: Vec<String> = serde_json::from_value(cites).unwrap();
    assert!(!cites.is_empty(), "the answer cites a source: {answer}");
    let results = b.text("results");
    assert!(results.contains("docs/pump-manual.pdf"), "{results}");
    for href in &cites {
        let target = b.js(&format!(
            "const e = document.querySelector('{href}'); return e ? e.textContent : null"
        ));
        assert!(
            target.as_str().is_some_and(|t| t.contains("docs/")),
            "{href} leads to its source: {target}"
        );
    }
    let figures = b.text("figures");
    assert!(
        figures.contains("prompt") && figures.contains("first token"),
        "{figures}"
    );
    let shot = b.screenshot("serve-page-answer.png", &shots);
    #[allow(clippy::print_stderr)] // where the picture is, for a reader of the run
    {
        eprintln!("screenshot: {}", shot.display());
    }

    // Search only: ranked hits, no generation.
    b.js("const m = document.getElementById('mode'); m.value = 'search'; m.dispatchEvent(new Event('change'))");
    b.type_in("#q", "bread dough rise");
    b.click("#go");
    b.wait_status("done");
    let results = b.text("results");
    assert!(
        results.contains("hits") && results.contains("docs/bread.rst"),
        "{results}"
    );
    assert_eq!(b.text("answer"), "");
    b.screenshot("serve-page-search.png", &shots);
}

#[test]
fn the_web_page_asks_for_the_token_once_when_the_server_needs_one() {
    let p = Project::with_docs();
    p.ingest();
    let token = "browser-test-token-1234";
    let srv = start(&p, &[("RAG_SERVE_TOKEN", token)], &[]);
    let b = Browser::start();
    b.open(&format!("http://{}/", srv.addr));
    b.js("const m = document.getElementById('mode'); m.value = 'search'; m.dispatchEvent(new Event('change'))");
    b.type_in("#q", "lighthouse first lit");
    b.click("#go");
    b.wait_status("bearer token");
    assert_eq!(
        b.js("return getComputedStyle(document.getElementById('tokenbox')).display"),
        "block",
        "the token field shows"
    );
    b.type_in("#token", token);
    b.click("#savetoken");
    b.wait_status("done");
    assert!(b.text("results").contains("docs/lighthouse.html"));
    // Kept for the tab: the next search needs no second entry.
    b.type_in("#q", "relief valve pressure");
    b.click("#go");
    b.wait_status("done");
    assert!(b.text("results").contains("hits"));
}

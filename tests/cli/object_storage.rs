//! An index on object storage (`index.dir = "s3://…"`): against moto's S3-compatible server,
//! installed from PyPI by scripts/test/s3-server.sh and started here on 127.0.0.1. Ignored by a
//! plain `cargo test`; `make test` and `make test-remote` set RAG_S3_SERVER and run them.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{free_port, hit_paths, Project, Started};

struct S3Server {
    _process: Started,
    port: u16,
}

/// Starts moto on a free loopback port and creates the bucket `rag-test`.
fn s3_server() -> S3Server {
    let bin = std::env::var("RAG_S3_SERVER")
        .expect("RAG_S3_SERVER names moto_server: run these tests with `make test-remote`");
    let port = free_port();
    let child = Command::new(&bin)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {bin}: {e}"));
    let server = S3Server {
        _process: Started(child),
        port,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    // moto answers an unsigned bucket creation.
    while !create_bucket(port) {
        assert!(Instant::now() < deadline, "moto did not get ready");
        std::thread::sleep(Duration::from_millis(200));
    }
    server
}

fn create_bucket(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let req = "PUT /rag-test HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    reply.starts_with("HTTP/1.1 200")
}

/// A project whose index is `s3://rag-test/PREFIX` on `server`, with credentials in the
/// standard variables and the local state under the project's own cache folder.
struct S3Project {
    p: Project,
    env: Vec<(&'static str, String)>,
}

impl S3Project {
    fn new(server: &S3Server, prefix: &str) -> S3Project {
        let p = Project::with_docs();
        p.doc(
            "station.md",
            "# Orbital Station Meridian\n\nThe flux regulator aboard Orbital Station Meridian hums at 47.3 kilohertz.\n",
        );
        let toml = p.path().join("rag.toml");
        let mut config = std::fs::read_to_string(&toml).unwrap();
        config.push_str(&format!(
            "\n[index]\ndir = \"s3://rag-test/{prefix}\"\nstorage = {{ aws_endpoint = \"http://127.0.0.1:{}\", allow_http = \"true\", aws_region = \"us-east-1\" }}\n",
            server.port
        ));
        std::fs::write(&toml, config).unwrap();
        let cache = p.path().join("cache").to_string_lossy().into_owned();
        let env = vec![
            ("AWS_ACCESS_KEY_ID", "testing".to_string()),
            ("AWS_SECRET_ACCESS_KEY", "testing".to_string()),
            ("XDG_CACHE_HOME", cache),
        ];
        S3Project { p, env }
    }

    fn run(&self, extra: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
        let mut env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        env.extend_from_slice(extra);
        self.p.run_env(&env, args)
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let (code, out, err) = self.run(&[], args);
        assert!(
            code == 0,
            "rag {args:?} exited {code}\nstdout: {out}\nstderr: {err}"
        );
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
    }

    fn chunks(&self) -> u64 {
        self.json(&["status", "--json"])["chunks"].as_u64().unwrap()
    }
}

#[test]
#[ignore = "needs moto's S3 server: make test-remote"]
fn an_index_in_a_bucket_ingests_searches_answers_and_reingests_incrementally() {
    let server = s3_server();
    let s3 = S3Project::new(&server, "team/index");
    let first = s3.json(&["ingest", "--json", "docs"]);
    assert!(first["files_added"].as_u64().unwrap() >= 5, "{first}");
    assert!(
        !s3.p.path().join(".rag").exists(),
        "nothing of the index is written locally"
    );
    let chunks = s3.chunks();
    assert!(chunks > 0);

    let hits = s3.json(&["search", "--json", "flux regulator hum frequency"]);
    assert_eq!(hit_paths(&hits)[0], "docs/station.md", "{hits}");
    let (code, out, err) = s3.run(&[], &["ask", "--json", FACT]);
    assert_eq!(code, 0, "{err}");
    let answer: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(
        answer["sources"].to_string().contains("docs/station.md"),
        "{answer}"
    );

    // Incremental: nothing changed, nothing written; one edit, one file.
    let again = s3.json(&["ingest", "--json", "docs"]);
    assert_eq!(again["files_unchanged"], first["files_added"], "{again}");
    assert_eq!(again["chunks_written"], 0, "{again}");
    s3.p.doc(
        "station.md",
        "# Orbital Station Meridian\n\nThe flux regulator aboard Orbital Station Meridian hums at 52.9 kilohertz.\n",
    );
    let edit = s3.json(&["ingest", "--json", "docs"]);
    assert_eq!(edit["files_changed"], 1, "{edit}");
    assert_eq!(s3.chunks(), chunks, "the edit replaced the file's chunks");
    let hits = s3.json(&["search", "--json", "52.9 kilohertz"]);
    assert!(hits.to_string().contains("52.9"), "{hits}");

    // A rebuild in place gives the same index.
    let rebuilt = s3.json(&["ingest", "--rebuild", "--json", "docs"]);
    assert_eq!(rebuilt["files_added"], first["files_added"], "{rebuilt}");
    assert_eq!(s3.chunks(), chunks);

    // `rag serve` on the bucket picks up another machine's commit without a restart.
    let env: Vec<(&str, &str)> = s3.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let srv = crate::serve::start(&s3.p, &env, &[]);
    let other_machine = S3Project::new(&server, "team/index");
    other_machine.p.doc(
        "heron.md",
        "# Heron gearbox\n\nThe Heron gearbox takes 3.5 litres of ISO VG 220 oil.\n",
    );
    other_machine.json(&["ingest", "--json", "docs"]);
    let body = r#"{"query": "Heron gearbox oil", "top_k": 1}"#;
    let found = crate::serve::call(&srv.addr, "POST", "/v1/search", body).json();
    assert_eq!(found["hits"][0]["path"], "docs/heron.md", "{found}");
    drop(srv);

    // A second index in the same bucket is its own.
    let other = S3Project::new(&server, "other");
    let (code, _, err) = other.run(&[], &["search", "flux"]);
    assert_eq!(code, 3, "no index under another prefix: {err}");
}

#[test]
#[ignore = "needs moto's S3 server: make test-remote"]
fn a_killed_ingest_holds_the_lock_until_it_stands_still_and_the_next_one_finishes_its_work() {
    let server = s3_server();
    let s3 = S3Project::new(&server, "crash");
    // Killed right after its first commit: the lock object stays, never released. Its
    // timestamps say it beat a moment ago; the next ingest does not trust them, it watches
    // the lock on its own clock (2 s here instead of 90) and takes it over once unchanged.
    let (code, _, err) = s3.run(&[("RAG_TEST_CRASH_AT", "1")], &["ingest", "docs"]);
    assert_ne!(code, 0, "{err}");
    let (code, out, err) = s3.run(
        &[("RAG_TEST_LEASE_STALE_S", "2")],
        &["ingest", "--json", "docs"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("took over an ingest lock"), "{err}");
    assert!(out.contains("files_added"), "{out}");

    // The same files ingested fresh elsewhere give the same chunks: nothing lost or doubled.
    let fresh = S3Project::new(&server, "fresh");
    fresh.json(&["ingest", "--json", "docs"]);
    assert_eq!(s3.chunks(), fresh.chunks());
}

#[test]
#[ignore = "needs moto's S3 server: make test-remote"]
fn two_machines_ingesting_at_once_never_duplicate_a_file() {
    let server = s3_server();
    let a = S3Project::new(&server, "shared");
    // Another checkout of the same documents, with its own local state (another machine).
    let b = S3Project::new(&server, "shared");
    let (ca, cb) = (spawn_ingest(&a, &[]), spawn_ingest(&b, &[]));
    let (oa, ob) = (
        ca.wait_with_output().unwrap(),
        cb.wait_with_output().unwrap(),
    );
    let codes = (oa.status.code(), ob.status.code());
    #[allow(clippy::print_stderr)] // for a reader of a failed run
    {
        eprintln!("exit codes of the two ingests: {codes:?}");
    }
    let err = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        matches!(
            codes,
            (Some(0), Some(0)) | (Some(0), Some(2)) | (Some(2), Some(0))
        ),
        "one ingests, the other waits its turn or is refused: {codes:?}\n{}\n{}",
        err(&oa),
        err(&ob)
    );
    for o in [&oa, &ob] {
        if o.status.code() == Some(2) {
            assert!(err(o).contains("another `rag ingest`"), "{}", err(o));
        }
    }
    // Whoever was refused runs again; both checkouts then see one copy of each file.
    let (code, _, e) = b.run(&[], &["ingest", "docs"]);
    assert_eq!(code, 0, "{e}");
    let fresh = S3Project::new(&server, "single");
    fresh.json(&["ingest", "--json", "docs"]);
    assert_eq!(a.chunks(), fresh.chunks());
    assert_eq!(
        b.json(&["status", "--json"])["files"],
        fresh.json(&["status", "--json"])["files"]
    );
}

/// `rag ingest --json docs` in `s3`'s checkout, started and left running.
fn spawn_ingest(s3: &S3Project, extra: &[(&str, &str)]) -> std::process::Child {
    Command::new(assert_cmd::cargo::cargo_bin("rag"))
        .current_dir(s3.p.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(s3.env.iter().map(|(k, v)| (*k, v.as_str())))
        .envs(extra.iter().copied())
        .args(["ingest", "--json", "docs"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
#[ignore = "needs moto's S3 server: make test-remote"]
fn an_ingest_that_lost_its_lock_stops_before_its_next_commit() {
    let server = s3_server();
    let slow = S3Project::new(&server, "lost");
    let other = S3Project::new(&server, "lost");
    // A slow writer (3 s before each commit, its lock deemed stale after 2 s on the other
    // machine's clock)...
    let a = spawn_ingest(&slow, &[("RAG_TEST_COMMIT_DELAY_MS", "3000")]);
    // ...whose lock the other machine takes over once it stood still, then ingests.
    std::thread::sleep(Duration::from_secs(1));
    let (code, _, err) = other.run(&[("RAG_TEST_LEASE_STALE_S", "2")], &["ingest", "docs"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("took over an ingest lock"), "{err}");
    let a = a.wait_with_output().unwrap();
    let a_err = String::from_utf8_lossy(&a.stderr);
    assert_eq!(a.status.code(), Some(2), "{a_err}");
    assert!(a_err.contains("lost the lock"), "{a_err}");
    // Its exit did not free the lock it no longer held: a third ingest sees it released by
    // its real holder, and one copy of each file is indexed.
    let (code, _, err) = other.run(&[], &["ingest", "docs"]);
    assert_eq!(code, 0, "{err}");
    let fresh = S3Project::new(&server, "lost-fresh");
    fresh.json(&["ingest", "--json", "docs"]);
    assert_eq!(other.chunks(), fresh.chunks());
}

#[test]
#[ignore = "needs moto's S3 server: make test-remote"]
fn a_live_lock_is_not_taken_over_whatever_its_holders_clock_says() {
    let server = s3_server();
    let a_side = S3Project::new(&server, "skew");
    let b_side = S3Project::new(&server, "skew");
    // A writer whose clock is an hour slow, beating every 0.33 s, 4 s before its commit.
    let a = spawn_ingest(
        &a_side,
        &[
            ("RAG_TEST_CLOCK_SKEW_S", "-3600"),
            ("RAG_TEST_LEASE_STALE_S", "2"),
            ("RAG_TEST_COMMIT_DELAY_MS", "4000"),
        ],
    );
    std::thread::sleep(Duration::from_secs(1));
    // By its timestamps the lock is an hour stale; by its ETag it is alive: refused.
    let (code, _, err) = b_side.run(&[("RAG_TEST_LEASE_STALE_S", "2")], &["ingest", "docs"]);
    assert!(
        !err.contains("took over"),
        "a live lock was taken over: {err}"
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("another `rag ingest`") && err.contains("pid"),
        "{err}"
    );
    let a = a.wait_with_output().unwrap();
    assert_eq!(
        a.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&a.stderr)
    );
}

const FACT: &str = "How fast does the flux regulator aboard Orbital Station Meridian hum?";

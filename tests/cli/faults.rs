//! Hostile files: a parser that overflows its stack or never finishes costs that one file,
//! is recorded with its content hash, and is not parsed again until it changes.

use crate::support::{hit_paths, Project};

/// A PDF whose catalog holds 200,000 nested arrays: lopdf's recursive parser overflows the
/// stack on it (it killed the whole ingest before parsers ran in a worker process).
fn stack_overflow_pdf() -> Vec<u8> {
    let deep = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
    let objs = [
        format!("<< /Type /Catalog /Pages 2 0 R /X {deep} >>"),
        "<< /Type /Pages /Kids [] /Count 0 >>".to_string(),
    ];
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, o) in objs.iter().enumerate() {
        offsets.push(out.len());
        out.extend(format!("{} 0 obj\n{o}\nendobj\n", i + 1).bytes());
    }
    let xref = out.len();
    out.extend(b"xref\n0 3\n0000000000 65535 f \n");
    for o in offsets {
        out.extend(format!("{o:010} 00000 n \n").bytes());
    }
    out.extend(format!("trailer\n<< /Size 3 /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n").bytes());
    out
}

fn paths(v: &serde_json::Value, key: &str) -> Vec<(String, String)> {
    v[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} in {v}"))
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["error"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn ingest(p: &Project, extra: &[&str]) -> (i32, serde_json::Value, String) {
    let mut args = vec!["ingest", "--json"];
    args.extend_from_slice(extra);
    args.push("docs");
    let (code, out, err) = p.run_env(&[("RAG_CHUNK_PARSE_TIMEOUT_S", "2")], &args);
    let v =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {out}\n{err}"));
    (code, v, err)
}

#[test]
fn a_crashing_or_hanging_parser_costs_one_file_until_it_changes() {
    let p = Project::empty();
    p.doc("good.md", "# Otters\n\nOtters hold hands while sleeping.\n");
    p.doc("overflow.pdf", stack_overflow_pdf());
    p.doc("deep.html", "<div>".repeat(100_000));
    let docs = p.path().join("docs");
    std::os::unix::fs::symlink("/etc/hostname", docs.join("link.txt")).unwrap();

    let (code, v, err) = ingest(&p, &[]);
    assert_eq!(code, 7, "{v}\n{err}");
    let failed = paths(&v, "files_failed");
    let error_of = |name: &str| {
        failed
            .iter()
            .find(|(p, _)| p.ends_with(name))
            .map(|(_, e)| e.clone())
            .unwrap_or_else(|| panic!("{name} not failed: {v}"))
    };
    let crash = error_of("overflow.pdf");
    assert!(
        crash.contains("crashed") && crash.contains("overflowed its stack"),
        "{crash}"
    );
    assert!(
        error_of("deep.html").contains("chunk.parse_timeout_s"),
        "{failed:?}"
    );
    assert_eq!(failed.len(), 2, "{failed:?}");
    let skipped = paths(&v, "files_skipped");
    assert_eq!(skipped.len(), 1, "a symlink is skipped, not failed: {v}");
    assert!(skipped[0].1.contains("symbolic link"), "{skipped:?}");
    let hits = p.json(&["search", "--json", "--mode", "text", "otters sleeping"]);
    assert_eq!(crate::support::hit_paths(&hits)[0], "docs/good.md");

    // Unchanged bad files are not parsed again, and they alone do not fail the run.
    let (code, v, err) = ingest(&p, &[]);
    assert_eq!(code, 0, "{v}\n{err}");
    assert!(paths(&v, "files_failed").is_empty(), "{v}");
    assert_eq!(paths(&v, "files_failed_before").len(), 2, "{v}");
    let (code, _, err) = p.run(&["ingest", "docs"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("failed before") && err.contains("--retry-failed"),
        "{err}"
    );

    let (code, v, _) = ingest(&p, &["--retry-failed"]);
    assert_eq!(code, 7);
    assert_eq!(paths(&v, "files_failed").len(), 2, "{v}");

    // A fixed file is parsed again; a removed one loses its record.
    std::fs::write(
        docs.join("deep.html"),
        "<h1>Rheas</h1><p>The rhea is a flightless bird.</p>",
    )
    .unwrap();
    std::fs::remove_file(docs.join("overflow.pdf")).unwrap();
    let (code, v, err) = ingest(&p, &[]);
    assert_eq!(code, 0, "{v}\n{err}");
    assert_eq!(v["files_added"], 1, "{v}");
    assert!(paths(&v, "files_failed_before").is_empty(), "{v}");
    let record = std::fs::read_to_string(p.path().join(".rag/failed.json")).unwrap();
    assert!(
        !record.contains("overflow.pdf") && !record.contains("deep.html"),
        "{record}"
    );
}

/// The hostile files, beside a good one: each costs at most itself. The two PDFs
/// (fixtures/hostile/) killed the whole ingest before parsers ran in a worker: one inflates
/// to 2 GiB through two Flate filters, one is a form XObject that draws itself.
#[test]
fn hostile_files_cost_at_most_themselves() {
    let p = Project::empty();
    let docs = p.path().join("docs");
    crate::support::copy_dir(&crate::support::repo().join("fixtures/hostile"), &docs);
    p.doc("good.md", "# Otters\n\nOtters hold hands while sleeping.\n");
    let mut utf16 = vec![0xff, 0xfe];
    utf16.extend(
        "Rheas are flightless birds, written in UTF-16.\n"
            .encode_utf16()
            .flat_map(u16::to_le_bytes),
    );
    p.doc("utf16.txt", utf16);
    p.doc(
        "headings.md",
        (0..3000)
            .map(|i| format!("# Heading {i}\n"))
            .collect::<String>(),
    );
    p.doc("line.txt", "word ".repeat(20_000));

    let (code, v, err) = ingest(&p, &[]);
    assert_eq!(code, 7, "{v}\n{err}");
    let failed = paths(&v, "files_failed");
    let names: Vec<&str> = failed.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(names, ["docs/bomb.pdf", "docs/selfref.pdf"], "{v}");
    for (_, e) in &failed {
        // Out of memory, stack overflow, or out of time (2 s here): each is that file's end.
        assert!(
            e.contains("crashed") || e.contains("parse_timeout_s"),
            "{e}"
        );
    }
    for (file, words) in [
        ("docs/line.txt", "word"),
        ("docs/headings.md", "Heading 2999"),
        ("docs/good.md", "otters"),
    ] {
        let hits = p.json(&["search", "--json", "--mode", "text", "--path", file, words]);
        assert_eq!(crate::support::hit_paths(&hits)[0], file, "{hits}");
    }
    let hits = p.json(&[
        "search",
        "--json",
        "--mode",
        "text",
        "-k",
        "1",
        "flightless rheas",
    ]);
    assert_eq!(
        crate::support::hit_paths(&hits),
        ["docs/utf16.txt"],
        "decoded as UTF-16"
    );
}

/// One completed system call from an `strace -f` log: its name and the paths it names.
fn completed_calls(log: &str) -> Vec<(String, String)> {
    let mut pending: std::collections::HashMap<String, String> = Default::default();
    let mut out = Vec::new();
    for line in log.lines() {
        let Some((pid, rest)) = line.split_once(' ') else {
            continue;
        };
        let rest = rest.trim_start();
        let call = if let Some(start) = rest.strip_suffix("<unfinished ...>") {
            pending.insert(pid.to_string(), start.to_string());
            continue;
        } else if rest.starts_with("<... ") {
            match pending.remove(pid) {
                Some(start) => format!("{start}{rest}"),
                None => continue,
            }
        } else {
            rest.to_string()
        };
        if !call.trim_end().ends_with("= 0") {
            continue;
        }
        let name = call.split('(').next().unwrap_or("").to_string();
        out.push((name, call));
    }
    out
}

/// Power loss: every LanceDB version is published only after the files it names are on
/// disk. Lance writes data, index and transaction files without fsync; the store flushes
/// the filesystem (`syncfs`) before each create-only manifest write, so no manifest can
/// reach the disk ahead of its data. Checked on the system calls of a real ingest and a
/// re-ingest of a changed file.
#[test]
fn every_version_is_published_after_its_files_are_synced() {
    if std::process::Command::new("strace")
        .arg("-V")
        .output()
        .is_err()
    {
        panic!("strace is not installed: scripts/setup.sh installs it (apt-get install strace)");
    }
    let p = Project::with_docs();
    let rag = assert_cmd::cargo::cargo_bin("rag");
    let trace = |log: &str| {
        let status = std::process::Command::new("strace")
            .args([
                "-f",
                "-qq",
                "-o",
                log,
                "-e",
                "trace=syncfs,rename,renameat,renameat2,linkat,link",
            ])
            .arg(&rag)
            .args(["ingest", "docs"])
            .current_dir(p.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .status()
            .expect("run strace");
        assert!(status.success(), "traced ingest failed: {status}");
        std::fs::read_to_string(p.path().join(log)).unwrap()
    };
    let first = trace("first.strace");
    let doc = std::fs::read_dir(p.path().join("docs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut text = std::fs::read_to_string(&doc).unwrap();
    text.push_str("\n\nA paragraph added after the first ingest.\n");
    std::fs::write(&doc, text).unwrap();
    let second = trace("second.strace");
    for log in [first, second] {
        let mut unsynced: Vec<String> = Vec::new();
        let mut published = 0;
        for (name, call) in completed_calls(&log) {
            if name == "syncfs" {
                unsynced.clear();
            } else if call.contains("/_versions/") && call.contains(".manifest") {
                published += 1;
                assert!(
                    unsynced.is_empty(),
                    "a manifest was published before these files were synced: {unsynced:?}\n{call}"
                );
            } else if call.contains(".lance/") {
                unsynced.push(call);
            }
        }
        assert!(
            published >= 2,
            "no manifest publish seen in the trace:\n{log}"
        );
    }
}

/// Disk full, simulated with a file size limit (RLIMIT_FSIZE: writes past it fail with EFBIG,
/// as they would with ENOSPC): the ingest fails with a message that says what to do, the
/// index keeps its last complete version (search still finds the old files), and the next
/// ingest with room to write completes the job.
#[test]
fn a_full_disk_fails_the_ingest_cleanly_and_loses_nothing() {
    use std::os::unix::process::CommandExt;
    let p = Project::with_docs();
    p.ingest();
    let before = p.json(&["search", "--json", "-k", "20", "orbital station docking"]);
    let mut big = String::new();
    for i in 0..3000 {
        big.push_str(&format!(
            "## Section {i}\n\nThe zebra quartz lantern number {i} hums.\n\n"
        ));
    }
    p.doc("big.md", big);
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("rag"));
    cmd.args(["ingest", "docs"])
        .current_dir(p.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: 64 * 1024,
                rlim_max: 64 * 1024,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("run rag");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(err.contains("the disk is full"), "stderr: {err}");
    assert!(!err.contains("panicked"), "stderr: {err}");
    // The old version answers as before.
    let during = p.json(&["search", "--json", "-k", "20", "orbital station docking"]);
    assert_eq!(hit_paths(&during), hit_paths(&before));
    // With room again, the run finishes what the full disk stopped: the same chunks as a
    // clean ingest of the same files.
    let report = p.ingest();
    assert_eq!(
        report["files_failed"].as_array().map(Vec::len),
        Some(0),
        "{report}"
    );
    let found = p.json(&["search", "--json", "zebra quartz lantern"]);
    assert_eq!(
        hit_paths(&found).first().map(String::as_str),
        Some("docs/big.md")
    );
    let clean = Project::with_docs();
    clean.doc(
        "big.md",
        std::fs::read(p.path().join("docs/big.md")).unwrap(),
    );
    clean.ingest();
    assert_eq!(
        rag::store::chunk_ids_blocking(&p.path().join(".rag")).unwrap(),
        rag::store::chunk_ids_blocking(&clean.path().join(".rag")).unwrap()
    );
}

//! Hostile files: a parser that overflows its stack or never finishes costs that one file,
//! is recorded with its content hash, and is not parsed again until it changes.

use crate::support::Project;

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

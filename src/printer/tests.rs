//! Tests of the printer.

use super::*;

/// A real `rag ask --json` answer (fixtures/recorded/, made with the small model over
/// fixtures/docs), so the snapshots show what users see.
fn recorded() -> Answer {
    serde_json::from_str(include_str!("../../fixtures/recorded/answer.json")).unwrap()
}

fn printer(format: Format) -> Printer {
    Printer {
        format,
        live: false,
        stats: false,
    }
}

#[test]
fn answer_as_text() {
    let a = recorded();
    insta::assert_snapshot!(printer(Format::Text).answer(&a, 0.25).transcript());
}

#[test]
fn streamed_answer_events() {
    let a = recorded();
    let p = Printer {
        format: Format::Text,
        live: true,
        stats: true,
    };
    let mut t = String::new();
    for piece in a.answer.split_inclusive(' ') {
        t.push_str(&p.event(&Event::Piece(piece)).transcript());
    }
    t.push_str(&p.answer(&a, 0.25).transcript());
    insta::assert_snapshot!(t);
}

#[test]
fn answer_as_ndjson_events() {
    let a = recorded();
    let p = printer(Format::Ndjson);
    let mut t = p
        .event(&Event::Retrieved {
            sources: &a.sources,
            retrieval_ms: 12.5,
        })
        .transcript();
    t.push_str(&p.event(&Event::Piece("The relief")).transcript());
    let done = p.answer(&a, 0.25);
    let v: serde_json::Value = serde_json::from_str(done.stdout.trim()).unwrap();
    assert_eq!(v["event"], "done");
    assert_eq!(v["answer"]["answer"], a.answer.as_str());
    insta::assert_snapshot!(t);
}

#[test]
fn abstention_and_invalid_citations() {
    let mut a = recorded();
    a.invalid_citations = vec!["S9".into()];
    let mut t = printer(Format::Text).answer(&a, 0.25).transcript();
    a.abstained = true;
    a.best_similarity = Some(0.12);
    t.push_str(&printer(Format::Text).answer(&a, 0.25).transcript());
    insta::assert_snapshot!(t);
}

#[test]
fn ingest_reports() {
    let mut r = Report {
        files_seen: 9,
        files_added: 2,
        files_changed: 1,
        files_unchanged: 5,
        chunks_written: 14,
        elapsed_ms: 2300,
        ..Report::default()
    };
    r.files_failed.push(crate::ingest::FileError {
        path: "docs/deep.html".into(),
        error: "the parser ran out of stack".into(),
    });
    r.files_skipped.push(crate::ingest::FileError {
        path: "docs/link.md".into(),
        error: "a symbolic link".into(),
    });
    let mut t = ingest(&r, false).transcript();
    r.dry_run = Some(crate::ingest::Plan {
        added: vec!["docs/new.md".into()],
        changed: vec![],
        removed: vec!["docs/old.md".into()],
        unchanged: 7,
    });
    t.push_str(&ingest(&r, false).transcript());
    insta::assert_snapshot!(t);
}

#[test]
fn search_hits() {
    let text = "The relief valve opens at 6 bar.\nCheck it every year.";
    let h = SearchHit {
        rank: 1,
        path: "docs/pump-manual.pdf",
        chunk_id: "c1",
        heading: "Maintenance",
        line_start: 3,
        line_end: 4,
        score: 0.0312,
        vector_score: Some(0.61),
        text_score: Some(4.2),
        rerank_score: None,
        text,
    };
    let mut t = hits("relief valve", std::slice::from_ref(&h), 41.0, false).transcript();
    t.push_str(&hits("relief valve", &[h], 41.0, true).transcript());
    insta::assert_snapshot!(t);
}

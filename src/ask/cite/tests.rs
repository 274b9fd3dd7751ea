//! Tests of the citation check.

use super::*;

const S1: &str =
    "The KV cache stores the key and value vectors of every previous token at every layer.";
const S2: &str = "Tomatoes need six hours of sun.";

#[test]
fn supported_and_unsupported_citations() {
    let c = check(
            "The KV cache stores key and value vectors for previous tokens [S1]. Tomatoes like the moon [S1].",
            &[(1, S1), (2, S2)],
        );
    assert_eq!(c.invalid, Vec::<String>::new());
    assert!(c.uncited.is_empty());
    assert_eq!(c.citations.len(), 2);
    assert!(c.citations[0].supported, "{c:?}");
    assert!(!c.citations[1].supported, "{c:?}");
}

#[test]
fn invalid_markers_are_removed() {
    let c = check(
        "Sun matters [S7]. Tomatoes need sun [S2, S9].",
        &[(1, S1), (2, S2)],
    );
    assert_eq!(c.answer, "Sun matters. Tomatoes need sun [S2].");
    assert_eq!(c.invalid, vec!["S7", "S9"]);
    assert_eq!(
        c.citations,
        vec![Citation {
            id: "S2".into(),
            supported: true,
            overlap: 1.0,
            quote: Some((0, S2.to_string())),
            claim: "Tomatoes need sun.".into(),
            cited_text: S2.into(),
            judge: None,
        }]
    );
}

/// The judge reads the line that shares most of the sentence's words and the neighbours
/// that fit, whole sources that fit, and never a split character.
#[test]
fn a_judge_reads_the_lines_around_the_sentences_words() {
    let source = "Intro line.\nThe cache holds keys.\nIt stores key and value vectors per layer.\nUnrelated footer text here.";
    let claim = "It stores key and value vectors [S1].";
    assert_eq!(passage(claim, source, 0), source);
    assert_eq!(passage(claim, source, 1000), source);
    let p = passage(claim, source, 70);
    assert!(p.contains("key and value vectors per layer"), "{p}");
    assert!(p.contains("The cache holds keys."), "{p}");
    assert!(!p.contains("Unrelated"), "{p}");
    assert!(p.len() <= 70, "{p}");
    let long = format!("{}é{}", "vectors ".repeat(20), "x".repeat(50));
    let cut = passage("vectors", &long, 40);
    assert!(cut.len() <= 80 && long.starts_with(&cut), "{cut}");
}

#[test]
fn evidence_is_the_line_sharing_most_words() {
    let source = "# Cache\nTokens are counted.\n  The cache stores key and value vectors.  \nEnd.";
    let words = content_words("It stores key and value vectors [S1].");
    assert_eq!(
        best_line(&words, source),
        Some((2, "The cache stores key and value vectors.".to_string()))
    );
    assert_eq!(best_line(&content_words("tomatoes"), source), None);
    let c = check(
        "The cache stores key and value vectors [S1].",
        &[(1, source)],
    );
    assert_eq!(c.citations[0].quote.as_ref().map(|q| q.0), Some(2));
}

#[test]
fn a_number_missing_from_the_source_is_not_supported() {
    let c = check(
        "The cache stores vectors of 12 previous tokens [S1]. Tomatoes need six hours of sun [S2].",
        &[(1, S1), (2, S2)],
    );
    assert!(!c.citations[0].supported, "{c:?}");
    assert!(c.citations[0].overlap >= SUPPORT_THRESHOLD, "{c:?}");
    assert!(c.citations[1].supported, "{c:?}");
    let mut a = Attributor::new(&[(1, S1)]);
    assert_eq!(
        a.push("The cache stores 12 vectors"),
        "The cache stores 12 vectors"
    );
    assert_eq!(a.push("."), "");
    assert_eq!(a.finish(false), ".");
}

#[test]
fn an_option_code_or_name_missing_from_the_source_is_not_supported() {
    let text = "sqldiff compares two databases. Options: --changeset FILE writes a changeset; --table TAB compares TAB only.";
    let ok = |claim| claim_supported(claim, text);
    assert!(ok(
        "sqldiff compares two databases with the --table option."
    ));
    assert!(!ok(
        "sqldiff compares two databases with the --compare-column option."
    ));
    assert!(!ok("Use `sqldiff --schema` to compare two databases."));
    assert!(!ok(
        "sqldiff compares two databases and returns SQLITE_FULL."
    ));
    assert!(ok(
        "sqldiff compares two databases: `--changeset FILE` writes a changeset."
    ));
    assert_eq!(
        exact_terms("Use `PRAGMA journal_mode=OFF` or trusted_schema, not CHECK or x."),
        ["pragma", "journal_mode=off", "trusted_schema", "check"]
    );
    assert_eq!(
        exact_terms("-The call `s.lstrip('ab')` strips."),
        ["lstrip", "ab"]
    );
}

#[test]
fn sentences_without_markers_are_reported_uncited() {
    let wrapped = check(
        "The cache stores key vectors\nof every token [S1].",
        &[(1, S1)],
    );
    assert!(wrapped.uncited.is_empty(), "{wrapped:?}");
    let c = check(
            "The cache stores key vectors [S1]. Tomatoes need lots of sun. Short one. The documents do not answer the rest.",
            &[(1, S1), (2, S2)],
        );
    assert_eq!(c.uncited, vec!["Tomatoes need lots of sun."]);
}

#[test]
fn markers_after_the_full_stop_stay_with_their_sentence() {
    let c = check(
        "Tomatoes need sun. [S2] The cache holds vectors. [S1]",
        &[(1, S1), (2, S2)],
    );
    assert_eq!(c.citations.len(), 2);
    assert!(c.citations.iter().all(|x| x.supported), "{c:?}");
}

fn attributed(steps: &[&str]) -> String {
    // Replays a stream: each step is one piece; the end of the list ends the text.
    let mut a = Attributor::new(&[
            (1, S1),
            (
                2,
                "The regulator hums at 1742 hertz. It is loud. Do the thing. Version 2.5 is out now. llama.cpp runs it.",
            ),
        ]);
    let mut out: String = steps.iter().map(|t| a.push(t)).collect();
    out.push_str(&a.finish(false));
    assert_eq!(a.written, out);
    out
}

#[test]
fn attribution_cites_each_sentence_by_its_best_source_before_the_full_stop() {
    assert_eq!(
        attributed(&[
            "The",
            " regulator",
            " hums",
            " at",
            " 1742",
            " hertz",
            ".",
            " The",
            " cache",
            " stores",
            " key",
            " vectors",
            "."
        ]),
        "The regulator hums at 1742 hertz [S2]. The cache stores key vectors [S1]."
    );
    // A sentence no source supports gets no marker; the model's own markers stay.
    assert_eq!(
        attributed(&[
            "Tomatoes", " like", " the", " moon", ".", " It", " is", " loud", " [S1]", "."
        ]),
        "Tomatoes like the moon. It is loud [S1]."
    );
    // A full stop and newline in one token (Qwen's ".\n\n").
    assert_eq!(
        attributed(&["It", " is", " loud", ".\n\n", "Tomatoes", " like", " moon"]),
        "It is loud [S2].\n\nTomatoes like moon"
    );
}

#[test]
fn attribution_leaves_numbers_abbreviations_short_lines_and_code_alone() {
    assert_eq!(
        attributed(&["Version", " 2", ".", "5", " is", " out", " now", " ok"]),
        "Version 2.5 is out now ok [S2]"
    );
    // A number before the full stop.
    assert_eq!(
        attributed(&["The", " regulator", " hums", " at", " 1742", ".", " Next"]),
        "The regulator hums at 1742 [S2]. Next"
    );
    assert_eq!(
        attributed(&["Loud", " e", ".", "g", ".", " often"]),
        "Loud e.g. often"
    );
    assert_eq!(
        attributed(&["It", " runs", " in", " llama", ".", "cpp", " now", "."]),
        "It runs in llama.cpp now [S2]."
    );
    // A short answer is cited at the end of the text, before trailing whitespace.
    assert_eq!(attributed(&["1742", " hertz"]), "1742 hertz [S2]");
    assert_eq!(
        attributed(&["1742", " hertz", "\n", " "]),
        "1742 hertz [S2]"
    );
    assert_eq!(
        attributed(&[
            "Answer", ":", "\n", "-", " do", " the", " thing", "\n", "It", " is", " loud"
        ]),
        "Answer:\n- do the thing [S2]\nIt is loud [S2]"
    );
    // A sentence wrapped onto the next line is one sentence.
    assert_eq!(
        attributed(&["It", " is", " loud", "\n", "", " ", "and", " hums", " at", " 1742", "."]),
        "It is loud\n and hums at 1742 [S2]."
    );
    assert_eq!(
        attributed(&["```", "let x = 1", ".", "0;", " it is loud", "."]),
        "```let x = 1.0; it is loud."
    );
    assert_eq!(
        attributed(&["The", " documents", " do", " not", " answer", " this", "."]),
        "The documents do not answer this."
    );
}

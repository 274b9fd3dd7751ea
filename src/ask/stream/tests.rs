//! Tests of the answer stream.

use super::*;

fn guarded(pieces: &[&str]) -> (String, bool) {
    let mut g = LoopGuard::default();
    let mut out = String::new();
    for p in pieces {
        match g.push(p) {
            Some(t) => out.push_str(&t),
            None => {
                out.push_str(&g.finish(true));
                return (out, true);
            }
        }
    }
    out.push_str(&g.finish(true));
    (out, false)
}

#[test]
fn a_repeated_sentence_is_dropped_and_never_shown() {
    let s = "The cache stores the key and value vectors of every token. ";
    let (out, looped) = guarded(&[
        s,
        "\n\n",
        "The cache stores the key and",
        " value vectors",
        " of every",
    ]);
    assert!(!looped);
    assert_eq!(out.trim_end(), s.trim_end());
    // Numbered copies are copies.
    let (out, looped) = guarded(&[
        "1. The crew of six rotates often.\n",
        "2. The crew of six rotates often.\n",
    ]);
    assert!(!looped);
    assert_eq!(out.trim_end(), "1. The crew of six rotates often.");
    // Token by token, the copy's list number is never shown either.
    let (out, looped) = guarded(&[
        "1.",
        " The crew of six",
        " rotates often.",
        "\n",
        "2.",
        " The",
        " crew of six",
        " rotates",
        " often",
        ".",
    ]);
    assert!(!looped);
    assert_eq!(out.trim_end(), "1. The crew of six rotates often.");
    // A copy with a new first word.
    let (out, looped) = guarded(&[
        "Goodput is a measure of how much a server can do in a single request. ",
        "It is a measure of how much a server can",
    ]);
    assert!(!looped);
    assert_eq!(
        out.trim_end(),
        "Goodput is a measure of how much a server can do in a single request."
    );
    let mut g = LoopGuard::default();
    let mut out = String::new();
    for p in [
        "Goodput is a measure of load. ",
        "It",
        " is",
        " a",
        " measure",
        " of",
        " load",
        ".",
    ] {
        match g.push(p) {
            Some(t) => out.push_str(&t),
            None => break,
        }
    }
    assert_eq!(
        out.trim_end(),
        "Goodput is a measure of load.",
        "no word of the copy is shown"
    );
}

#[test]
fn a_stretch_said_before_drops_the_sentence_it_is_in() {
    let (out, looped) = guarded(&[
        "The KV cache grows linearly with the number of tokens. ",
        "This is why the KV cache grows",
        " linearly with the",
        " number of",
    ]);
    assert!(!looped);
    // Held from the start of the sentence the copy began in.
    assert_eq!(
        out.trim_end(),
        "The KV cache grows linearly with the number of tokens."
    );
    let mut a = AnswerStream::new(
        &[(1, "The KV cache grows linearly with the number of tokens.")],
        true,
    );
    let mut shown = String::new();
    for p in [
        "The KV cache grows linearly with the number of tokens.",
        " This is why the KV cache grows linearly with the number of",
    ] {
        if let Some(t) = a.push(p) {
            shown.push_str(&t);
        }
    }
    assert!(!a.looped());
    assert_eq!(a.skips(), 1);
    shown.push_str(&a.finish(&shown, false, false));
    assert_eq!(
        shown,
        "The KV cache grows linearly with the number of tokens [S1]."
    );
    // The sentence the copy started in is dropped whole, never shown half.
    let mut a = AnswerStream::new(
        &[(1, "The KV cache grows linearly with the number of tokens.")],
        true,
    );
    let mut shown = String::new();
    let pieces = [
        "The KV cache grows linearly with the number of tokens.",
        " It",
        " grows",
        " fast",
        " and",
        " then",
        " the KV cache grows linearly with the number of",
    ];
    for p in pieces {
        if let Some(t) = a.push(p) {
            shown.push_str(&t);
        }
    }
    assert!(!a.looped());
    assert_eq!(a.skips(), 1);
    shown.push_str(&a.finish(&shown, false, false));
    assert_eq!(
        shown,
        "The KV cache grows linearly with the number of tokens [S1]."
    );
    assert!(
        a.dropped().starts_with("It grows fast and then"),
        "{}",
        a.dropped()
    );
    // Within one sentence.
    let (_, looped) = guarded(&[
            "The model is told to answer only from the sources, so the model is told to answer only from the",
        ]);
    assert!(!looped);
    // Three shared words are no loop.
    assert_eq!(
        guarded(&[
            "The size of the cache grows. ",
            "It limits the size of the batch."
        ]),
        (
            "The size of the cache grows. It limits the size of the batch.".to_string(),
            false
        )
    );
}

#[test]
fn the_answer_goes_on_after_a_dropped_repeat() {
    // A restated phrase is dropped with its sentence; what comes after it is shown.
    let mut g = LoopGuard::default();
    let mut out = String::new();
    for p in [
        "Keep the file by setting the PERSIST journaling mode using the journal_mode pragma.",
        " This zeroes the header by setting the PERSIST journaling mode using the journal_mode",
        " pragma.",
        " [S2]",
        " The header",
        " is zeroed instead.",
    ] {
        out.push_str(&g.push(p).expect("one repeat does not end the answer"));
    }
    out.push_str(&g.finish(true));
    assert_eq!(
            out,
            "Keep the file by setting the PERSIST journaling mode using the journal_mode pragma. The header is zeroed instead."
        );
    assert_eq!(g.skips(), 1);
    assert!(
        g.dropped().starts_with("This zeroes the header"),
        "{}",
        g.dropped()
    );
    assert!(
        g.dropped().ends_with("pragma. [S2]"),
        "the marker goes with its sentence"
    );
}

#[test]
fn a_repeat_right_after_a_dropped_one_or_too_many_repeats_end_the_answer() {
    // A repeat right after a dropped one is a loop: the answer ends there.
    let (out, looped) = guarded(&[
        "1. The crew of six rotates often.\n",
        "2. The crew of six rotates often.\n",
        "3. The crew of six rotates often.\n",
    ]);
    assert!(looped);
    assert_eq!(out.trim_end(), "1. The crew of six rotates often.");
    // Repeats apart from each other are dropped up to MAX_SKIPS; the next ends it.
    let mut pieces = vec!["The cache stores keys and values of each token. ".to_string()];
    let facts = [
        "Prefill reads the prompt.",
        "Decode writes tokens.",
        "Batching shares weights.",
        "Quantization saves memory.",
    ];
    for fact in &facts[..=MAX_SKIPS] {
        pieces.push(format!("{fact} "));
        pieces.push("The cache stores keys and values of each token. ".into());
    }
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let (out, looped) = guarded(&refs);
    assert!(looped);
    assert_eq!(out.matches("The cache stores").count(), 1, "{out}");
    assert!(out.contains(facts[MAX_SKIPS]), "{out}");
}

#[test]
fn a_lead_in_goes_with_the_repeat_it_introduced_and_a_code_fence_stays() {
    // A closing code fence is not dropped with the repeat after it.
    let (out, _) = guarded(&[
            "Enable it with the auto_vacuum pragma set to FULL mode:\n```sql\nPRAGMA auto_vacuum = FULL;\n",
            "```\n",
            "This will enable it with the auto_vacuum pragma set to FULL mode.",
        ]);
    assert!(out.trim_end().ends_with("```"), "{out:?}");
    // A lead-in goes with the one repeat it introduced, and the answer goes on.
    let (out, looped) = guarded(&[
        "Set the journal mode to PERSIST with the journal_mode pragma. ",
        "For example:\n",
        "Set the journal mode to PERSIST with the journal_mode pragma.\n",
        "The header is zeroed instead.",
    ]);
    assert!(!looped);
    assert_eq!(
            out,
            "Set the journal mode to PERSIST with the journal_mode pragma.\nThe header is zeroed instead."
        );
    // A lead-in goes with the repeat it introduced.
    let (out, looped) = guarded(&[
        "Set the journal mode to PERSIST with the journal_mode pragma. For example:\n",
        "PRAGMA journal_mode=PERSIST;\n",
        "For example:\n",
        "PRAGMA journal_mode=PERSIST;\n",
    ]);
    assert!(!looped);
    assert_eq!(
            out.trim_end(),
            "Set the journal mode to PERSIST with the journal_mode pragma. For example:\nPRAGMA journal_mode=PERSIST;"
        );
}

#[test]
fn a_sentence_that_only_starts_alike_is_released_in_full() {
    let (out, looped) = guarded(&[
        "The cache stores keys. ",
        "The cache",
        " grows with",
        " context.",
    ]);
    assert!(!looped);
    assert_eq!(out, "The cache stores keys. The cache grows with context.");
    // Held while it may be a repeat, released at the end of the text.
    let mut g = LoopGuard::default();
    assert_eq!(g.push("It is loud. It is").as_deref(), Some("It is loud."));
    assert_eq!(g.finish(true), " It is");
    // Short sentences may repeat ("Yes.").
    assert_eq!(guarded(&["Yes. Yes."]), ("Yes. Yes.".to_string(), false));
}

#[test]
fn the_stream_cites_and_finishes_with_the_last_marker() {
    let mut a = AnswerStream::new(&[(1, "The regulator hums at 1742 hertz.")], true);
    let mut shown = String::new();
    for p in ["The", " regulator", " hums", " at", " 1742", " hertz", "\n"] {
        shown.push_str(&a.push(p).unwrap());
    }
    let rest = a.finish(&shown, false, true);
    assert_eq!(
        format!("{shown}{rest}"),
        "The regulator hums at 1742 hertz [S1]"
    );
    assert_eq!(a.added_citations(), 1);
}

#[test]
fn only_whole_sentences_are_shown_and_a_limit_drops_the_unfinished_one() {
    let mut a = AnswerStream::new(&[(1, "The regulator hums at 1742 hertz.")], true);
    let mut shown = String::new();
    for p in [
        "The regulator",
        " hums at 1742",
        " hertz.",
        " It is",
        " loud and",
    ] {
        let t = a.push(p).unwrap();
        assert!(
            !t.contains("It is"),
            "an unfinished sentence is never released: {t:?}"
        );
        shown.push_str(&t);
    }
    assert_eq!(
        shown, "The regulator hums at 1742 hertz",
        "the full stop waits for what follows"
    );
    // The token limit: the open sentence is dropped, the finished one gets its marker.
    shown.push_str(&a.finish(&shown, false, false));
    assert_eq!(shown, "The regulator hums at 1742 hertz [S1].");
    assert_eq!(a.dropped(), "It is loud and");
    // A limit reached right after a full stop keeps the sentence.
    let mut g = LoopGuard::default();
    assert_eq!(
        g.push("It is loud. It hums [S1].").as_deref(),
        Some("It is loud.")
    );
    assert_eq!(g.finish(false), " It hums [S1].");
    assert_eq!(g.dropped(), "");
    // Version numbers and file names do not end a sentence; a line does.
    let mut g = LoopGuard::default();
    assert_eq!(g.push("Use llama.cpp 2.5 here").as_deref(), Some(""));
    assert_eq!(
        g.push("\n- then").as_deref(),
        Some("Use llama.cpp 2.5 here\n")
    );
    assert_eq!(g.finish(false), "");
    assert_eq!(g.dropped(), "- then");
    for (text, ends) in [
        ("Done.", true),
        ("Done.\" [S2]  ", true),
        ("  ", true),
        ("(see above).)", true),
        ("It is", false),
        ("It costs 2", false),
        ("The steps are:", false),
    ] {
        assert_eq!(ends_sentence(text), ends, "{text:?}");
    }
}

#[test]
fn a_doubled_tail_loses_its_copy() {
    assert_eq!(
        drop_repeat("Intro. The cache stores keys. The cache stores keys. "),
        "Intro. The cache stores keys."
    );
    assert_eq!(drop_repeat("no loop here"), "no loop here");
    assert_eq!(drop_repeat("é€é€"), "é€");
    assert_eq!(
        drop_repeat("Answer:\n\nKV stores keys.\n\nAnswer:\n\nKV stores keys."),
        "Answer:\n\nKV stores keys."
    );
}

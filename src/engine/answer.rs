//! Building an [`Answer`]: the figures of a generation, the evidence lines of its supported
//! citations, the sources as reported, and the answer of an abstention.

use std::time::Instant;

use crate::answer::{Answer, Evidence, SourceOut, Timings, ABSTAIN_TEXT};
use crate::ask::cite;
use crate::ask::prompt::Packed;
use crate::llm::{Decode, Prefill};
use crate::retrieve::Ranked;

/// `timings` (retrieval so far) completed with the prefill and decode figures.
pub(super) fn generation_timings(
    mut timings: Timings,
    prefill: &Prefill,
    decode: &Decode,
    started: Instant,
) -> Timings {
    let prefilled = prefill.prompt_tokens - prefill.cached_tokens;
    timings.prompt_tokens = prefill.prompt_tokens;
    timings.cached_tokens = prefill.cached_tokens;
    timings.prefill_ms = prefill.ms;
    timings.prefill_tok_per_s = rate(prefilled, prefill.ms);
    timings.generated_tokens = decode.tokens;
    timings.decode_ms = decode.ms;
    timings.decode_tok_per_s = rate(decode.tokens, decode.ms);
    timings.drafted_tokens = decode.drafted;
    timings.accepted_tokens = decode.accepted;
    timings.confidence = decode.confidence;
    // From the start of the question: what a person waits for.
    timings.ttft_ms =
        timings.retrieval_ms + prefill.ms + decode.first_piece_ms.unwrap_or(decode.ms);
    timings.total_ms = started.elapsed().as_secs_f64() * 1e3;
    timings
}

fn rate(tokens: usize, ms: f64) -> f64 {
    if ms > 0.0 {
        tokens as f64 * 1e3 / ms
    } else {
        0.0
    }
}

pub(super) fn best_similarity(ranked: &[Ranked]) -> Option<f32> {
    ranked
        .iter()
        .filter_map(|r| r.vector_score)
        .reduce(f32::max)
}

/// The quoted line of each supported citation as `path:line`, each line once.
pub(super) fn evidence(
    citations: &[cite::Citation],
    sources: &[SourceOut],
    texts: &[(usize, &str)],
) -> Vec<Evidence> {
    let mut out: Vec<Evidence> = Vec::new();
    for c in citations.iter().filter(|c| c.supported) {
        let (Some((offset, text)), Some(s)) = (&c.quote, sources.iter().find(|s| s.id == c.id))
        else {
            continue;
        };
        let n_lines = texts
            .iter()
            .find(|(n, _)| format!("S{n}") == c.id)
            .map_or(0, |(_, t)| t.lines().count() as u32);
        let at = s.line_start + *offset as u32;
        let exact = (n_lines == s.line_end - s.line_start + 1).then_some(at);
        let e = Evidence {
            id: c.id.clone(),
            path: s.path.clone(),
            // A merged or widened span can hold joins that are not file lines; its line
            // numbers then bound the quote instead of pinning it.
            line: exact.unwrap_or(s.line_start),
            line_end: exact.unwrap_or(s.line_end),
            text: text.clone(),
        };
        if !out.contains(&e) {
            out.push(e);
        }
    }
    out
}

pub fn sources_out(p: &Packed) -> Vec<SourceOut> {
    p.sources
        .iter()
        .map(|s| SourceOut {
            id: format!("S{}", s.n),
            path: s.hit.path.clone(),
            heading: s.hit.heading.clone(),
            line_start: s.hit.line_start,
            line_end: s.hit.line_end,
            score: s.score,
        })
        .collect()
}

pub(super) fn abstained(question: &str, timings: Timings, ranked: &[Ranked]) -> Answer {
    Answer {
        question: question.to_string(),
        answer: ABSTAIN_TEXT.to_string(),
        sources: vec![],
        citations: vec![],
        evidence: vec![],
        invalid_citations: vec![],
        added_citations: 0,
        uncited_sentences: vec![],
        abstained: true,
        best_similarity: best_similarity(ranked),
        stop: None,
        dropped_text: String::new(),
        repeats_dropped: 0,
        timings,
        model: None,
    }
}

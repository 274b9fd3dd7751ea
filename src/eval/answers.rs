//! One eval case answered: the answer asked of the engine, scored (key strings, refusals,
//! citations that hold and point at an expected source), and the answers of a run summed up
//! (rates, percentiles of prompt size and timings, draft acceptance).

use anyhow::Result;
use serde::Serialize;

use super::cases::Compiled;
use super::report::AnswerSummary;
use super::{metrics, query_text, CaseResult, EvalOptions};
use crate::config::Mode;
use crate::engine::{Answer, Answerer, Request};
use crate::llm::StopReason;
use crate::retrieve::Query;
use crate::ui::Ui;

#[derive(Debug, Clone, Serialize)]
pub(super) struct CaseAnswer {
    pub(super) text: String,
    pub(super) keywords: Option<bool>,
    pub(super) abstained: bool,
    pub(super) refusal: bool,
    pub(super) citations_supported: usize,
    pub(super) citations_correct: usize,
    pub(super) uncited: usize,
    pub(super) prompt_tokens: usize,
    /// First token and whole answer from the question, the generators' help included.
    pub(super) ttft_ms: f64,
    pub(super) decode_tok_per_s: f64,
    pub(super) total_ms: f64,
    /// The generators' help (`--expand`, `--rerank`) in those.
    #[serde(default, skip_serializing_if = "crate::answer::is_zero")]
    pub(super) help_ms: f64,
    pub(super) drafted: usize,
    pub(super) accepted: usize,
    pub(super) model: Option<String>,
    /// The best retrieved span's cosine similarity: the signal `--model auto` routes on, kept
    /// per case so a routing rule can be replayed from saved runs (scripts/analysis/route_table.py).
    pub(super) best_similarity: Option<f32>,
    /// The generator's mean probability of its first tokens (`timings.confidence`).
    pub(super) confidence: Option<f32>,
    /// Why generation stopped, and what it wrote that the answer leaves out (`ask --json`'s
    /// `stop` and `dropped_text`).
    pub(super) stop: Option<crate::llm::StopReason>,
    pub(super) dropped_text: String,
    /// Repeated sentences dropped while the answer went on.
    #[serde(default)]
    pub(super) repeats_dropped: usize,
    /// Each citation as checked: the sentence, the cited text and the verdict (what
    /// eval/citations.jsonl labels by hand).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) claims: Vec<Claim>,
}

/// One cited sentence of an answer and what the citation check said of it.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Claim {
    /// `S2`
    pub(super) id: String,
    pub(super) claim: String,
    pub(super) cited_text: String,
    pub(super) supported: bool,
    pub(super) overlap: f32,
}

/// Asks `c`'s question with `mode` and scores the answer.
pub(super) fn answer_case(
    engine: &Answerer,
    c: &Compiled,
    mode: Mode,
    o: &EvalOptions,
    ui: &Ui,
) -> Result<CaseAnswer> {
    let q = Query {
        text: query_text(c),
        mode,
        top_k: o.query.top_k,
        filter: o.query.filter.clone(),
        verbose: false,
    };
    let mut aside = |e: crate::engine::Event| -> std::io::Result<()> {
        crate::printer::aside(&e, ui);
        Ok(())
    };
    let request = Request {
        question: &c.case.question,
        ..Request::new(&q, false)
    };
    let a: Answer = engine.answer(request, &mut aside)?;
    let supported: Vec<&crate::engine::SourceOut> = a
        .citations
        .iter()
        .filter(|x| x.supported)
        .filter_map(|x| a.sources.iter().find(|s| s.id == x.id))
        .collect();
    let correct = supported
        .iter()
        .filter(|s| {
            c.expect
                .iter()
                .any(|e| e.matches(&s.path, s.line_start, s.line_end))
        })
        .count();
    let supported = supported.len();
    Ok(scored(a, c, supported, correct))
}

/// The answer `a` to case `c` with its scores: `supported` citations, `correct` of them
/// pointing at an expected source.
fn scored(a: Answer, c: &Compiled, supported: usize, correct: usize) -> CaseAnswer {
    CaseAnswer {
        keywords: if a.abstained {
            (!c.case.answer_contains.is_empty()).then_some(false)
        } else {
            metrics::contains_all(&a.answer, &c.case.answer_contains)
        },
        refusal: !a.abstained && metrics::is_refusal(&a.answer),
        abstained: a.abstained,
        citations_supported: supported,
        citations_correct: correct,
        uncited: a.uncited_sentences.len(),
        prompt_tokens: a.timings.prompt_tokens,
        // What a person asking once waits for: the help this answer took from the case's
        // retrieval just before it counts as if spent again.
        ttft_ms: a.timings.ttft_ms + a.timings.help_reused_ms,
        decode_tok_per_s: a.timings.decode_tok_per_s,
        total_ms: a.timings.total_ms + a.timings.help_reused_ms,
        help_ms: a.timings.expand_ms + a.timings.rerank_ms + a.timings.help_reused_ms,
        drafted: a.timings.drafted_tokens,
        accepted: a.timings.accepted_tokens,
        model: a.model.as_ref().map(|m| {
            std::path::Path::new(&m.path)
                .file_name()
                .map_or(m.path.clone(), |n| n.to_string_lossy().into_owned())
        }),
        best_similarity: a.best_similarity,
        confidence: a.timings.confidence,
        stop: a.stop,
        dropped_text: a.dropped_text,
        repeats_dropped: a.repeats_dropped,
        claims: claims(&a.citations),
        text: a.answer,
    }
}

fn claims(citations: &[crate::ask::cite::Citation]) -> Vec<Claim> {
    citations
        .iter()
        .map(|c| Claim {
            id: c.id.clone(),
            claim: c.claim.clone(),
            cited_text: c.cited_text.clone(),
            supported: c.supported,
            overlap: c.overlap,
        })
        .collect()
}

/// `mode`: the retrieval mode the answers were generated from.
pub(super) fn summarise_answers(results: &[CaseResult], mode: &str) -> AnswerSummary {
    let answers: Vec<&CaseAnswer> = results.iter().filter_map(|r| r.answer.as_ref()).collect();
    // The reader on its own: answers whose packed context held every string.
    let reader = metrics::mean(results.iter().filter_map(|r| {
        let had = r.retrieval.get(mode)?.context_has_answer?;
        let a = r.answer.as_ref()?;
        had.then(|| a.keywords.map(|b| f64::from(u8::from(b))))
    }));
    let answered: Vec<&&CaseAnswer> = answers.iter().filter(|a| !a.abstained).collect();
    let flag = |b: bool| Some(f64::from(u8::from(b)));
    let rate = |f: &dyn Fn(&CaseAnswer) -> bool| metrics::mean(answered.iter().map(|a| flag(f(a))));
    let supported: usize = answers.iter().map(|a| a.citations_supported).sum();
    let correct: usize = answers.iter().map(|a| a.citations_correct).sum();
    let series =
        |f: &dyn Fn(&CaseAnswer) -> f64| -> Vec<f64> { answered.iter().map(|a| f(a)).collect() };
    let tokens = series(&|a| a.prompt_tokens as f64);
    let ttft = series(&|a| a.ttft_ms);
    let decode = series(&|a| a.decode_tok_per_s);
    let whole = series(&|a| a.total_ms);
    let drafted: usize = answered.iter().map(|a| a.drafted).sum();
    let accepted: usize = answered.iter().map(|a| a.accepted).sum();
    AnswerSummary {
        model: model_names(&answers),
        keywords: metrics::mean(
            answers
                .iter()
                .map(|a| a.keywords.map(|b| f64::from(u8::from(b)))),
        ),
        reader,
        citations: (supported > 0).then(|| correct as f64 / supported as f64),
        abstained: metrics::mean(answers.iter().map(|a| flag(a.abstained))).unwrap_or(0.0),
        false_refusals: rate(&|a| a.refusal),
        uncited_per_answer: metrics::mean(answered.iter().map(|a| Some(a.uncited as f64))),
        repetition_stops: rate(&|a| a.stop == Some(StopReason::Repetition)),
        repeats_dropped: rate(&|a| a.repeats_dropped > 0),
        limit_stops: rate(&|a| {
            matches!(
                a.stop,
                Some(StopReason::MaxTokens | StopReason::ContextFull)
            )
        }),
        prompt_tokens_p50: metrics::percentile(&tokens, 50.0),
        prompt_tokens_p95: metrics::percentile(&tokens, 95.0),
        ttft_ms_p50: metrics::percentile(&ttft, 50.0),
        ttft_ms_p95: metrics::percentile(&ttft, 95.0),
        decode_tok_per_s_p50: metrics::percentile(&decode, 50.0),
        decode_tok_per_s_p95: metrics::percentile(&decode, 95.0),
        answer_ms_p50: metrics::percentile(&whole, 50.0),
        answer_ms_p95: metrics::percentile(&whole, 95.0),
        answer_ms_mean: metrics::mean(whole.iter().map(|&x| Some(x))),
        draft_acceptance: (drafted > 0).then(|| accepted as f64 / drafted as f64),
    }
}

/// The generators that wrote the answers, by file name (`none` where none did).
fn model_names(answers: &[&CaseAnswer]) -> String {
    let mut models: Vec<String> = answers.iter().filter_map(|a| a.model.clone()).collect();
    models.sort();
    models.dedup();
    if models.is_empty() {
        "none".into()
    } else {
        models.join(" + ")
    }
}

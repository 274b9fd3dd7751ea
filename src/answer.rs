//! What answering produces, as every front end prints or serialises it: the [`Answer`] (its
//! text, the sources it was given, its checked citations with their evidence, the figures of
//! how it was made) and the [`Event`]s on the way. Types only: the engine makes them, the
//! printer, the server and the MCP adapter read them without depending on the engine.

use serde::{Deserialize, Serialize};

use crate::ask::{cite, route};
use crate::config::Mode;
use crate::llm::StopReason;
use crate::retrieve::Ranked;
use crate::store::Hit;

/// What `rag ask` prints when the documents hold no answer.
pub const ABSTAIN_TEXT: &str = "The documents do not answer this question.";

#[derive(Debug, Serialize, Deserialize, Clone)]
pub struct SourceOut {
    pub id: String,
    pub path: String,
    pub heading: String,
    pub line_start: u32,
    pub line_end: u32,
    pub score: f32,
}

#[derive(Debug, Serialize, Deserialize, Default, Clone)]
pub struct Timings {
    /// From the question's arrival to the passages: the generators' help below included.
    pub retrieval_ms: f64,
    /// `retrieval.expand`: what a generator wrote for the question, and how long it took.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub expand_ms: f64,
    #[serde(default, skip_serializing_if = "is_zero_count")]
    pub expand_tokens: usize,
    /// `retrieval.rerank`: how long a generator took to judge the candidates, and how many.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rerank_ms: f64,
    #[serde(default, skip_serializing_if = "is_zero_count")]
    pub reranked: usize,
    /// Help this answer reused from a retrieval of the same question just before it (eval's
    /// ranks), so neither the expansion nor the reranking above counts it: what a person
    /// asking once would also wait for.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub help_reused_ms: f64,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub prefill_ms: f64,
    pub prefill_tok_per_s: f64,
    pub generated_tokens: usize,
    pub decode_ms: f64,
    pub decode_tok_per_s: f64,
    /// Speculative decoding: tokens drafted, and how many of them the generator kept.
    #[serde(default)]
    pub drafted_tokens: usize,
    #[serde(default)]
    pub accepted_tokens: usize,
    pub ttft_ms: f64,
    pub total_ms: f64,
    /// `llm.judge_citations`: how long the generator took to judge the citations (part of
    /// `total_ms`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub judge_ms: f64,
    /// The generator's mean probability for its first 16 tokens (local generators).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f32>,
    /// Layers of the generator llama.cpp ran on a GPU (0: all on the CPU, or a remote
    /// generator), and of how many (`llm.gpu_layers`, docs/gpu.md).
    #[serde(default)]
    pub gpu_layers: u32,
    #[serde(default)]
    pub layers: u32,
    /// The threads llama.cpp decoded on: the physical cores rag may use, less those other
    /// processes kept busy while the question was prepared (`llm.threads = 0`), or the setting.
    #[serde(default)]
    pub threads: usize,
}

#[derive(Debug, Serialize, Deserialize, Clone)]
pub struct ModelOut {
    pub path: String,
    pub sha256: String,
    /// `small`, `medium` or `large`, and why (see `route`).
    #[serde(flatten)]
    pub route: route::Route,
}

/// A source line that supports a cited sentence: the manual's own words under the answer.
#[derive(Debug, Serialize, Deserialize, Clone, PartialEq)]
pub struct Evidence {
    /// `S2`
    pub id: String,
    pub path: String,
    /// The file line of the quote when the span's text maps line for line onto the file;
    /// otherwise the span's first line, with `line_end` its last (merged or widened spans).
    pub line: u32,
    pub line_end: u32,
    pub text: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Answer {
    pub question: String,
    pub answer: String,
    pub sources: Vec<SourceOut>,
    pub citations: Vec<cite::Citation>,
    /// For each supported citation, the source line that backs it (`path:line`).
    pub evidence: Vec<Evidence>,
    pub invalid_citations: Vec<String>,
    /// Markers rag added to sentences the model left uncited (llm.add_citations).
    pub added_citations: usize,
    /// Sentences of three content words or more that cite no source.
    pub uncited_sentences: Vec<String>,
    pub abstained: bool,
    /// The best cosine similarity of a retrieved span (None in text-only mode).
    pub best_similarity: Option<f32>,
    pub stop: Option<StopReason>,
    /// Text the generator wrote that the answer leaves out, so it ends on a whole sentence:
    /// the unfinished sentence an answer at its token limit (or a full context) stopped in,
    /// or the start of a sentence that repeated an earlier one. Empty when nothing was left out.
    #[serde(default)]
    pub dropped_text: String,
    /// Sentences that repeated an earlier one, dropped while the answer went on (their text
    /// is in `dropped_text`).
    #[serde(default)]
    pub repeats_dropped: usize,
    pub timings: Timings,
    pub model: Option<ModelOut>,
}

/// What happens while a question is answered, in order: everything a person may be shown
/// besides the answer itself. The engine never prints; front ends decide what to show.
pub enum Event<'a> {
    /// How retrieval ranked the spans, when the query asks to be explained (`-v`).
    Ranked {
        ranked: &'a [Ranked],
        mode: Mode,
        filter: Option<&'a str>,
    },
    /// A problem that did not stop the answer (a damaged prompt cache entry, a draft model
    /// that could not load): the answer is the same; something was slower or not saved.
    Warning(&'a str),
    /// What a person should know of how the answer is made, shown once in a while (the
    /// generator answers over `llm.answer_budget_s`, or a smaller one answers for time).
    Note(&'a str),
    /// The prompt is being read: `tokens` to prefill (a terminal shows a spinner).
    Prefill { tokens: usize },
    /// The prompt has been read; decoding starts.
    Prefilled,
    /// A retrieved span that did not fit the context budget.
    Dropped(&'a Hit),
    /// The sources packed into the prompt, before generation starts.
    Retrieved {
        sources: &'a [SourceOut],
        retrieval_ms: f64,
    },
    /// A piece of the answer as it streams (already loop-guarded and cited).
    Piece(&'a str),
}

pub(crate) fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

fn is_zero_count(x: &usize) -> bool {
    *x == 0
}

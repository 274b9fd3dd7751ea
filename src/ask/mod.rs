//! The answering stages between retrieval and the printed answer, each pure or nearly:
//! prompt packing ([`prompt`]), the citation check ([`cite`]), the streamed answer's loop
//! guard and citer ([`stream`]), sentence compression ([`compress`]), follow-up queries
//! ([`followup`]) and routing ([`route`]); and the two decisions before generation
//! (abstain, the context window). Nothing here loads a model or prints.

pub mod cite;
pub mod compress;
pub mod followup;
#[cfg(test)]
mod fuzz;
pub mod prompt;
pub mod route;
pub mod stream;

use anyhow::Result;

use crate::config::{threads, Mode, Settings};
use crate::llm::ContextParams;
use crate::retrieve::Ranked;

/// The retrieval query of a question asked after `history` (earlier questions, oldest
/// first). A follow-up such as "And how do I drop it afterwards?" names nothing to search
/// for; the previous question does.
pub fn followup_query(history: &[String], question: &str) -> String {
    followup::query(history, question)
}

/// The context for `llm` and the tokens reserved for the answer; `n_ctx_train` gives the
/// generator's own window when `llm.n_ctx = 0`. An error when the answer would leave no room
/// for a prompt.
pub fn window(
    settings: &Settings,
    n_ctx_train: impl FnOnce() -> Result<u32>,
) -> Result<(ContextParams, usize)> {
    let n_ctx = if settings.llm.n_ctx == 0 {
        n_ctx_train()?
    } else {
        settings.llm.n_ctx
    };
    let reserve = settings.llm.max_tokens as usize;
    if reserve + 64 >= n_ctx as usize {
        return Err(crate::exit::ExitError::usage(format!(
            "llm.max_tokens = {reserve} leaves no room for a prompt in llm.n_ctx = {n_ctx}; lower one or raise the other"
        )));
    }
    let params = ContextParams {
        n_ctx,
        n_batch: settings.llm.n_batch,
        threads: threads(settings.llm.threads),
        threads_batch: threads(settings.llm.threads_batch),
    };
    Ok((params, reserve))
}

/// Whether the best evidence is too weak to answer from. Vector similarity is the signal
/// (comparable across questions); in text-only mode, only "no hit at all" abstains.
pub fn should_abstain(ranked: &[Ranked], mode: Mode, min_similarity: f32) -> bool {
    if ranked.is_empty() {
        return true;
    }
    if mode == Mode::Text {
        return false;
    }
    let best = ranked
        .iter()
        .filter_map(|r| r.vector_score)
        .fold(f32::MIN, f32::max);
    best < min_similarity
}

//! A generator as a reranker: for each candidate passage, how likely the model finds that it
//! answers the question, read from its logits for "yes" against "no" (as the citation judge
//! reads them, [`super::judge::Verdicts`]; nothing is generated).
//!
//! Every candidate's prompt starts with the same instructions and question, so that prefix
//! is prefilled once, in sequence 0 of one context whose KV cache all sequences share
//! (`kv_unified`), and given to every candidate's sequence; then the candidates' own tokens
//! go in together, as many per decode call as the batch holds, each with the logits of its
//! last token. Scoring stops between calls once `deadline` has passed: the candidates scored
//! by then are a prefix of the list, the caller keeps the rest in their fused order.

use std::num::NonZeroU32;
use std::time::Instant;

use anyhow::{anyhow, Result};
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;

use super::judge::Verdicts;
use super::session::common_prefix;
use super::{backend, ContextParams, Llm, Message, Token};

/// What the reranker is told: one word back. The question comes before the passage so the
/// instructions and the question are one prefix shared by every candidate.
const INSTRUCTIONS: &str =
    "You judge search results for a question about technical documentation. Read the question, \
then one passage. Answer yes if the passage states the answer or the facts an answer needs; \
answer no if it is about something else. Answer with one word: yes or no.";

/// The reranker's prompt for one candidate.
pub fn messages(question: &str, passage: &str) -> Vec<Message> {
    super::chat(
        INSTRUCTIONS,
        [
            "Question: ",
            question.trim(),
            "\n\nPassage:\n",
            passage.trim(),
            "\n\nDoes the passage answer the question? Answer yes or no.",
        ],
    )
}

/// What scoring the candidates did.
#[derive(Debug, Clone, Default)]
pub struct Scored {
    /// P(yes) of the first `scores.len()` candidates, in order.
    pub scores: Vec<f32>,
    /// Tokens prefilled: the shared prefix once, and each scored candidate's own.
    pub tokens: usize,
}

impl Llm {
    /// P(yes) of each prompt in `prompts` (chat tokens of [`messages`]), in order, until
    /// `deadline`; the first decode call always runs, so at least one batch is scored.
    pub fn yes_scores(
        &self,
        p: &ContextParams,
        prompts: &[Vec<Token>],
        v: &Verdicts,
        deadline: Instant,
    ) -> Result<Scored> {
        let Some(shortest) = prompts.iter().map(Vec::len).min() else {
            return Ok(Scored::default());
        };
        // Each candidate keeps at least its last token of its own: its logits are the verdict.
        let shared = prompts
            .iter()
            .skip(1)
            .fold(shortest.saturating_sub(1), |n, t| {
                n.min(common_prefix(&prompts[0], t))
            });
        let own: Vec<&[Token]> = prompts.iter().map(|t| &t[shared..]).collect();
        // Several candidates per decode call (a wider matrix product per weight read), and
        // still several calls, between which the deadline is checked.
        let n_batch = (p.n_batch as usize * 4).max(own.iter().map(|t| t.len()).max().unwrap_or(1));
        let cells = shared + own.iter().map(|t| t.len()).sum::<usize>();
        let mut ctx = self.shared_context(p, prompts.len(), cells, n_batch)?;
        let mut batch = LlamaBatch::new(n_batch, 1);
        share_prefix(
            &mut ctx,
            (&mut batch, n_batch),
            &prompts[0][..shared],
            prompts.len(),
        )?;
        let mut out = Scored {
            scores: Vec::with_capacity(prompts.len()),
            tokens: shared,
        };
        let mut next = 0;
        while next < own.len() && (out.scores.is_empty() || Instant::now() < deadline) {
            batch.clear();
            let mut lasts = Vec::new();
            while let Some(t) = own.get(next) {
                if batch.n_tokens() as usize + t.len() > n_batch {
                    break;
                }
                for (i, &tok) in t.iter().enumerate() {
                    let last = i + 1 == t.len();
                    batch.add(tok, (shared + i) as i32, &[next as i32], last)?;
                }
                lasts.push(batch.n_tokens() - 1);
                out.tokens += t.len();
                next += 1;
            }
            decode(&mut ctx, &mut batch)?;
            out.scores
                .extend(lasts.iter().map(|&i| v.p_yes(ctx.get_logits_ith(i))));
        }
        Ok(out)
    }

    /// One context of `n_seq` sequences over one KV cache of at least `cells` tokens.
    fn shared_context(
        &self,
        p: &ContextParams,
        n_seq: usize,
        cells: usize,
        n_batch: usize,
    ) -> Result<LlamaContext<'_>> {
        if self.vocab_only {
            return Err(anyhow!(
                "{} was loaded without its weights (vocabulary only); reranking needs them",
                self.path.display()
            ));
        }
        let n_ctx = cells.div_ceil(256) as u32 * 256;
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(n_ctx))
            .with_n_seq_max(n_seq as u32)
            .with_kv_unified(true)
            .with_n_batch(n_batch as u32)
            .with_n_ubatch(n_batch as u32)
            .with_n_threads(i32::try_from(p.threads).unwrap_or(1))
            .with_n_threads_batch(i32::try_from(p.threads_batch).unwrap_or(1))
            .with_op_offload(self.offloads());
        self.model.new_context(backend()?, params).map_err(|e| {
            anyhow!("creating a llama.cpp context of {n_ctx} tokens for {n_seq} candidates: {e}; lower retrieval.rerank_candidates")
        })
    }
}

/// Prefills `prefix` into sequence 0 and gives it to every other of the `n_seq` sequences.
fn share_prefix(
    ctx: &mut LlamaContext<'_>,
    (batch, n_batch): (&mut LlamaBatch, usize),
    prefix: &[Token],
    n_seq: usize,
) -> Result<()> {
    for (s, slice) in prefix.chunks(n_batch).enumerate() {
        batch.clear();
        for (i, &t) in slice.iter().enumerate() {
            batch.add(t, (s * n_batch + i) as i32, &[0], false)?;
        }
        decode(ctx, batch)?;
    }
    for seq in 1..n_seq as i32 {
        ctx.copy_kv_cache_seq(0, seq, None, None)
            .map_err(|e| anyhow!("sharing the reranker's prefix: {e}"))?;
    }
    Ok(())
}

fn decode(ctx: &mut LlamaContext<'_>, batch: &mut LlamaBatch) -> Result<()> {
    ctx.decode(batch)
        .map_err(|e| anyhow!("llama.cpp decode failed while reranking: {e}"))
}

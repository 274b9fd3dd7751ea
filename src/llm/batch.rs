//! Several answers generated together in one llama.cpp context, one sequence each
//! (continuous batching). Each decode step advances every running answer by one token in a
//! single batch, so the weights are read once per step for all of them instead of once per
//! answer; when an answer finishes, its sequence keeps only the prompt, and the next waiting
//! prompt is prefilled into the free sequence that shares most of it while the others wait.

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::time::Instant;

use anyhow::{anyhow, Result};
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;

use super::session::{common_prefix, reusable};
use super::{
    backend, repeating_tail, sampler, ContextParams, CopyBias, Decode, Llm, Prefill, Sampling,
    StopReason, Utf8Stream,
};

/// One prompt to answer, and where its pieces go (`false` stops that answer).
pub struct Job<'a> {
    pub prompt: Vec<LlamaToken>,
    pub on_piece: Box<dyn FnMut(&str) -> bool + 'a>,
}

/// What one job's prefill and decode did.
#[derive(Debug, Clone, Default)]
pub struct Done {
    pub prefill: Prefill,
    pub decode: Decode,
}

/// A running answer in its sequence.
struct Slot<'a> {
    job: usize,
    seq: i32,
    /// Position of the next token in its sequence.
    pos: usize,
    sampler: LlamaSampler,
    copy: Option<CopyBias>,
    plain_greedy: bool,
    generated: Vec<LlamaToken>,
    utf8: Utf8Stream,
    prefill: Prefill,
    out: Decode,
    started: Instant,
    on_piece: Box<dyn FnMut(&str) -> bool + 'a>,
}

impl Slot<'_> {
    /// The answer is over: flush its last bytes and report what it did.
    fn finish(mut self, stop: StopReason) -> Done {
        self.out.stop = stop;
        if let Some(tail) = self.utf8.finish() {
            (self.on_piece)(&tail);
        }
        self.out.ms = self.started.elapsed().as_secs_f64() * 1e3;
        Done {
            prefill: self.prefill,
            decode: self.out,
        }
    }
}

/// Where a batch loop takes its prompts and leaves its answers: a list known up front
/// (`ask --batch`) or requests arriving while others generate (`rag serve`).
pub trait Jobs<'a> {
    /// The next job to start and its id, if one is there. `wait` is true when no answer is
    /// running: block until one comes; `None` then ends the loop.
    fn next(&mut self, wait: bool) -> Option<(usize, Job<'a>)>;
    /// Job `id` is over: its figures, or why it could not run.
    fn done(&mut self, id: usize, result: Result<Done>);
}

/// A list of jobs known up front; their results in the list's order.
struct Listed<'a> {
    pending: VecDeque<(usize, Job<'a>)>,
    results: Vec<Option<Result<Done>>>,
}

impl<'a> Jobs<'a> for Listed<'a> {
    fn next(&mut self, _wait: bool) -> Option<(usize, Job<'a>)> {
        self.pending.pop_front()
    }

    fn done(&mut self, id: usize, result: Result<Done>) {
        self.results[id] = Some(result);
    }
}

impl Llm {
    /// Generates an answer for every job, up to `parallel` at a time in one context of
    /// `parallel` sequences of `p.n_ctx` tokens each; results in the jobs' order. A job whose
    /// prompt cannot start (too long for a sequence) fails alone; a failure of the shared
    /// context fails them all.
    pub fn generate_many(
        &self,
        p: &ContextParams,
        parallel: usize,
        s: &Sampling,
        jobs: Vec<Job<'_>>,
    ) -> Result<Vec<Result<Done>>> {
        let n = jobs.len();
        let mut listed = Listed {
            pending: jobs.into_iter().enumerate().collect(),
            results: (0..n).map(|_| None).collect(),
        };
        self.generate_jobs(p, parallel.clamp(1, n.max(1)), s, &mut listed)?;
        Ok(listed.results.into_iter().map(generated).collect())
    }

    /// Continuous batching over `jobs` in one context of `n_seq` sequences: a job starts as
    /// soon as a sequence is free, every decode step advances all running answers, and the
    /// loop ends when nothing runs and `jobs` has no more. A finished answer's sequence keeps
    /// its prompt, and the next job goes to the free sequence whose prompt shares the most
    /// with its own, reusing that prefix in whole `n_batch` slices (as `Session::prefill`
    /// reuses the prompt cache, so a reused prompt answers byte for byte as a fresh one): a
    /// question asked again prefills only its last slice. An error of the shared context
    /// ends the loop at once; the jobs still running then get no `done`.
    pub fn generate_jobs<'a>(
        &self,
        p: &ContextParams,
        n_seq: usize,
        s: &Sampling,
        jobs: &mut dyn Jobs<'a>,
    ) -> Result<()> {
        let (mut ctx, per_seq, n_batch) = self.batch_context(p, n_seq.max(1))?;
        let mut seqs = Seqs::new(n_seq.max(1));
        // Each running slot with the token sampled for it and not yet processed.
        let mut running: Vec<(Slot, LlamaToken)> = Vec::new();
        let mut batch = LlamaBatch::new(n_batch, 1);
        loop {
            let sizes = (n_batch, per_seq);
            self.admit(
                &mut ctx,
                &mut batch,
                sizes,
                &mut seqs,
                jobs,
                &mut running,
                s,
            );
            if running.is_empty() {
                return Ok(());
            }
            // Handle each sampled token; the answers that go on decode together.
            batch.clear();
            let mut next = Vec::new();
            for (mut slot, token) in running.drain(..) {
                match advance(&mut slot, token, s, self, per_seq) {
                    Some(stop) => {
                        let prompt = slot.prefill.prompt_tokens as u32;
                        seqs.release_answer(&mut ctx, slot.seq, prompt);
                        let job = slot.job;
                        jobs.done(job, Ok(slot.finish(stop)));
                    }
                    None => {
                        batch.add(token, slot.pos as i32, &[slot.seq], true)?;
                        slot.pos += 1;
                        next.push(slot);
                    }
                }
            }
            if !next.is_empty() {
                self.decode_next(&mut ctx, &mut batch, next, &mut running, s)?;
            }
        }
    }

    /// Starts waiting jobs on the free sequences, each on the one whose held prompt shares
    /// the most with its own; a job that fails to start is done with its error.
    #[allow(clippy::too_many_arguments)]
    fn admit<'a>(
        &self,
        ctx: &mut LlamaContext,
        batch: &mut LlamaBatch,
        sizes: (usize, u32),
        seqs: &mut Seqs,
        jobs: &mut dyn Jobs<'a>,
        running: &mut Vec<(Slot<'a>, LlamaToken)>,
        s: &Sampling,
    ) {
        while !seqs.free.is_empty() {
            let Some((id, j)) = jobs.next(running.is_empty()) else {
                break;
            };
            let seq = seqs.take_for(&j.prompt);
            let kept = &mut seqs.held[seq as usize];
            match self.start(ctx, batch, sizes, (seq, kept), (id, j), s) {
                Ok(mut slot) => {
                    let first = pick(&mut slot, ctx, batch.n_tokens() - 1, s, self);
                    running.push((slot, first));
                }
                Err(e) => {
                    seqs.release(ctx, seq);
                    jobs.done(id, Err(e));
                }
            }
        }
    }

    /// Decodes the batch of the answers that go on, and samples each one's next token.
    fn decode_next<'j>(
        &self,
        ctx: &mut LlamaContext<'_>,
        batch: &mut LlamaBatch,
        next: Vec<Slot<'j>>,
        running: &mut Vec<(Slot<'j>, LlamaToken)>,
        s: &Sampling,
    ) -> Result<()> {
        ctx.decode(batch)
            .map_err(|e| anyhow!("llama.cpp decode failed: {e}"))?;
        for (i, mut slot) in next.into_iter().enumerate() {
            let t = pick(&mut slot, ctx, i as i32, s, self);
            running.push((slot, t));
        }
        Ok(())
    }

    /// One context of `n_seq` sequences of `p.n_ctx` tokens each; with the tokens per
    /// sequence and per decode call.
    fn batch_context(
        &self,
        p: &ContextParams,
        n_seq: usize,
    ) -> Result<(LlamaContext<'_>, u32, usize)> {
        let per_seq = if p.n_ctx == 0 {
            self.model.n_ctx_train()
        } else {
            p.n_ctx
        };
        let n_batch = (p.n_batch as usize).max(n_seq);
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(per_seq * n_seq as u32))
            .with_n_seq_max(n_seq as u32)
            .with_n_batch(n_batch as u32)
            .with_n_ubatch(n_batch as u32)
            .with_n_threads(i32::try_from(p.threads).unwrap_or(1))
            .with_n_threads_batch(i32::try_from(p.threads_batch).unwrap_or(1))
            .with_op_offload(self.offloads());
        let ctx = self.model.new_context(backend()?, params).map_err(|e| {
            anyhow!("creating a llama.cpp context of {n_seq} sequences of {per_seq} tokens: {e}; lower llm.parallel or llm.n_ctx")
        })?;
        Ok((ctx, per_seq, n_batch))
    }

    /// Prefills `job`'s prompt into sequence `seq`, in `n_batch` slices, after the whole
    /// slices it shares with `kept` (the prompt the sequence holds, which becomes this one).
    fn start<'a>(
        &self,
        ctx: &mut LlamaContext,
        batch: &mut LlamaBatch,
        (n_batch, per_seq): (usize, u32),
        (seq, kept): (i32, &mut Vec<LlamaToken>),
        (job, j): (usize, Job<'a>),
        s: &Sampling,
    ) -> Result<Slot<'a>> {
        let started = Instant::now();
        let prompt = &j.prompt;
        if prompt.is_empty() || prompt.len() >= per_seq as usize {
            return Err(anyhow!(
                "a prompt of {} tokens does not fit a sequence of {per_seq}; raise llm.n_ctx or lower retrieval.top_k",
                prompt.len()
            ));
        }
        let mut keep = reusable(kept, prompt, n_batch);
        if !matches!(
            ctx.clear_kv_cache_seq(Some(seq as u32), Some(keep as u32), None),
            Ok(true)
        ) {
            let _ = ctx.clear_kv_cache_seq(Some(seq as u32), None, None);
            keep = 0;
        }
        kept.clear();
        for (k, slice) in prompt[keep..].chunks(n_batch).enumerate() {
            batch.clear();
            for (i, &t) in slice.iter().enumerate() {
                let at = keep + k * n_batch + i;
                batch.add(t, at as i32, &[seq], at == prompt.len() - 1)?;
            }
            ctx.decode(batch)
                .map_err(|e| anyhow!("llama.cpp prefill failed: {e}"))?;
        }
        kept.extend_from_slice(prompt);
        let copy = CopyBias::new(s.copy_bias, prompt, &self.model);
        let (sampler, plain_greedy) = sampler(s, &self.model, copy.as_ref());
        Ok(Slot {
            copy,
            job,
            seq,
            pos: prompt.len(),
            sampler,
            plain_greedy,
            generated: Vec::new(),
            utf8: Utf8Stream::default(),
            prefill: Prefill {
                prompt_tokens: prompt.len(),
                cached_tokens: keep,
                ms: started.elapsed().as_secs_f64() * 1e3,
            },
            out: Decode::default(),
            started: Instant::now(),
            on_piece: j.on_piece,
        })
    }
}

/// The index in `free` of the sequence whose held prompt shares the most with `prompt`; the
/// last one among equals (the lowest-numbered sequence when none share anything).
/// The context's sequences: which are free, and the prompt whose keys and values each holds.
struct Seqs {
    free: Vec<i32>,
    held: Vec<Vec<LlamaToken>>,
}

impl Seqs {
    fn new(n: usize) -> Seqs {
        Seqs {
            free: (0..n as i32).rev().collect(),
            held: vec![Vec::new(); n],
        }
    }

    /// Takes the free sequence whose held prompt shares the longest start with `prompt`.
    fn take_for(&mut self, prompt: &[LlamaToken]) -> i32 {
        self.free
            .swap_remove(closest(&self.free, &self.held, prompt))
    }

    /// Frees `seq` empty (a job that failed to start).
    fn release(&mut self, ctx: &mut LlamaContext, seq: i32) {
        let _ = ctx.clear_kv_cache_seq(Some(seq as u32), None, None);
        self.held[seq as usize].clear();
        self.free.push(seq);
    }

    /// Frees `seq` after an answer: the answer goes, the prompt (its first `prompt` tokens)
    /// stays for the next job that shares it.
    fn release_answer(&mut self, ctx: &mut LlamaContext, seq: i32, prompt: u32) {
        self.free.push(seq);
        let id = Some(seq as u32);
        if !matches!(ctx.clear_kv_cache_seq(id, Some(prompt), None), Ok(true)) {
            let _ = ctx.clear_kv_cache_seq(id, None, None);
            self.held[seq as usize].clear();
        }
    }
}

fn closest(free: &[i32], held: &[Vec<LlamaToken>], prompt: &[LlamaToken]) -> usize {
    (0..free.len())
        .max_by_key(|&k| common_prefix(&held[free[k] as usize], prompt))
        .expect("a free sequence")
}

/// A job's result; one the loop never reached is an error rather than a missing answer.
fn generated(r: Option<Result<Done>>) -> Result<Done> {
    r.unwrap_or_else(|| Err(anyhow!("not generated")))
}

/// The next token of `slot` from the logits at batch index `i` (as `Session::generate`).
fn pick(slot: &mut Slot, ctx: &LlamaContext, i: i32, s: &Sampling, llm: &Llm) -> LlamaToken {
    let vocab = llm.model.vocab();
    super::pick(
        ctx,
        i,
        &mut slot.sampler,
        slot.plain_greedy,
        slot.copy.as_ref(),
        s.text_first && slot.generated.is_empty(),
        &vocab,
    )
}

/// Takes `token` into the answer; `Some(reason)` when the answer stops here.
fn advance(
    slot: &mut Slot,
    token: LlamaToken,
    s: &Sampling,
    llm: &Llm,
    per_seq: u32,
) -> Option<StopReason> {
    let vocab = llm.model.vocab();
    if vocab.is_eog(token) && !s.ignore_eog {
        return Some(StopReason::EndOfText);
    }
    let mut bytes = Vec::new();
    vocab.token_to_piece_into(token, &mut bytes, false, None);
    slot.out.tokens += 1;
    slot.generated.push(token);
    if let Some(text) = slot.utf8.push(&bytes) {
        slot.out
            .first_piece_ms
            .get_or_insert(slot.started.elapsed().as_secs_f64() * 1e3);
        if !(slot.on_piece)(&text) {
            return Some(StopReason::Cancelled);
        }
    }
    if !s.ignore_eog && repeating_tail(&slot.generated, 2).is_some() {
        return Some(StopReason::Repetition);
    }
    if slot.out.tokens >= s.max_tokens as usize {
        return Some(StopReason::MaxTokens);
    }
    if slot.pos + 1 >= per_seq as usize {
        return Some(StopReason::ContextFull);
    }
    None
}

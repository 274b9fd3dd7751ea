//! A [`Session`]: one llama.cpp context that remembers which tokens its KV cache holds, so a
//! prompt sharing a prefix with the last one prefills only the rest; generation on it (plain,
//! or checking a draft's guesses several at a time), saved and restored KV state, and the
//! UTF-8-safe stream of pieces.

use std::ops::ControlFlow;
use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, Result};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::token::LlamaToken;

use super::sample::{Chooser, Sampling};
use super::{speculate, Llm};

/// The shortest period of an exact repeat at the end of `tokens` that has occurred `times`
/// times in a row (periods of 8 to 128 tokens): a model stuck in a loop.
pub fn repeating_tail(tokens: &[LlamaToken], times: usize) -> Option<usize> {
    (8..=128).find(|&p| {
        tokens.len() >= p * times
            && (1..times).all(|k| {
                let end = tokens.len() - (k - 1) * p;
                tokens[end - p..end] == tokens[end - 2 * p..end - p]
            })
    })
}

/// What one prefill did.
#[derive(Debug, Clone, Default)]
pub struct Prefill {
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub ms: f64,
}

/// What one generation did.
#[derive(Debug, Clone, Default)]
pub struct Decode {
    pub tokens: usize,
    pub ms: f64,
    /// Milliseconds from the start of decoding to the first streamed piece.
    pub first_piece_ms: Option<f64>,
    pub stop: StopReason,
    /// Speculative decoding: tokens drafted, and how many of them were kept.
    pub drafted: usize,
    pub accepted: usize,
    /// Mean probability of the first tokens the model picked (see `Chooser::confidence`).
    pub confidence: Option<f32>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    #[default]
    EndOfText,
    MaxTokens,
    ContextFull,
    Cancelled,
    /// The model wrote the same stretch of tokens twice in a row (a loop).
    Repetition,
}

/// One llama.cpp context and the tokens its KV cache holds.
pub struct Session<'m> {
    pub(super) llm: &'m Llm,
    pub(super) ctx: LlamaContext<'m>,
    /// The tokens whose keys and values the context holds, in order (sequence 0).
    pub(super) tokens: Vec<LlamaToken>,
    pub(super) n_batch: usize,
    /// Index, in the last decoded batch, of the token whose logits sample the next token.
    pub(super) last_logits: i32,
}

/// Token ids as plain integers, for storing.
pub fn ids(tokens: &[LlamaToken]) -> Vec<i32> {
    tokens.iter().map(|t| t.0).collect()
}

impl Session<'_> {
    pub fn n_ctx(&self) -> usize {
        self.ctx.n_ctx() as usize
    }

    /// The tokens whose keys and values the context holds.
    pub fn tokens(&self) -> &[LlamaToken] {
        &self.tokens
    }

    /// The logits that follow the last prefilled token (what samples the reply's first one).
    pub fn logits(&self) -> &[f32] {
        self.ctx.get_logits_ith(self.last_logits)
    }

    /// Writes the KV state and the tokens it holds to `path`.
    pub fn save_state(&self, path: &Path) -> Result<()> {
        self.ctx
            .state_save_file(path, &self.tokens)
            .map_err(|e| anyhow!("saving the prompt cache to {}: {e}", path.display()))
    }

    /// Empties the KV cache: the next prefill starts from nothing.
    pub fn reset(&mut self) {
        self.ctx.clear_kv_cache();
        self.tokens.clear();
    }

    /// Loads a KV state saved by [`Session::save_state`]. It is kept only when llama.cpp
    /// accepts the file and the tokens in it are exactly `expect`; otherwise the cache is
    /// cleared and `false` returned. A state file does not identify its model, so the caller
    /// must only offer files written for this model and context.
    pub fn load_state(&mut self, path: &Path, expect: &[i32]) -> bool {
        let loaded = self.ctx.state_load_file(path, self.n_ctx());
        match loaded {
            Ok(tokens)
                if ids(&tokens) == expect && !tokens.is_empty() && tokens.len() < self.n_ctx() =>
            {
                self.tokens = tokens;
                // The saved logits belong to the last saved token; prefill always re-decodes
                // at least one token, so they are never used.
                true
            }
            _ => {
                self.ctx.clear_kv_cache();
                self.tokens.clear();
                false
            }
        }
    }

    /// Makes the KV cache hold exactly `prompt`, reusing the longest common prefix with what it
    /// holds now (whole `n_batch` slices of it) and decoding the rest in slices of `n_batch`
    /// tokens aligned to multiples of `n_batch` positions (a larger batch aborts llama.cpp).
    /// Only the last token asks for logits.
    pub fn prefill(&mut self, prompt: &[LlamaToken]) -> Result<Prefill> {
        let start = Instant::now();
        if prompt.is_empty() {
            return Err(anyhow!("empty prompt"));
        }
        if prompt.len() >= self.n_ctx() {
            return Err(anyhow!(
                "the prompt has {} tokens but the context holds {}; raise llm.n_ctx or lower retrieval.top_k",
                prompt.len(),
                self.n_ctx()
            ));
        }
        let mut keep = reusable(&self.tokens, prompt, self.n_batch);
        let trimmed = self
            .ctx
            .clear_kv_cache_seq(Some(0), Some(keep as u32), None)
            .map_err(|e| anyhow!("trimming the KV cache: {e}"))?;
        if !trimmed {
            // Some memory types cannot drop a suffix; start over rather than trust it.
            self.ctx.clear_kv_cache();
            keep = 0;
        }
        self.tokens.truncate(keep);

        let mut batch = LlamaBatch::new(self.n_batch, 1);
        let rest = &prompt[keep..];
        for (s, slice) in rest.chunks(self.n_batch).enumerate() {
            batch.clear();
            let base = keep + s * self.n_batch;
            for (i, &t) in slice.iter().enumerate() {
                let last = base + i == prompt.len() - 1;
                batch.add(t, (base + i) as i32, &[0], last)?;
            }
            self.ctx
                .decode(&mut batch)
                .map_err(|e| anyhow!("llama.cpp prefill failed: {e}"))?;
            self.tokens.extend_from_slice(slice);
        }
        // A GPU backend queues the work and returns before the device has done it; the
        // prefill's time is the device's (on the CPU, decode has already finished).
        self.ctx.synchronize();
        self.last_logits = batch.n_tokens() - 1;
        Ok(Prefill {
            prompt_tokens: prompt.len(),
            cached_tokens: keep,
            ms: start.elapsed().as_secs_f64() * 1e3,
        })
    }

    /// How many leading tokens of `tokens` the context already holds.
    pub(super) fn shared_prefix(&self, tokens: &[LlamaToken]) -> usize {
        common_prefix(&self.tokens, tokens)
    }

    /// Samples up to `s.max_tokens` tokens after a prefill and hands each UTF-8-complete piece
    /// to `on_piece`; returning `false` from it stops generation. With a `draft` and plain
    /// greedy sampling, each decode step also checks the draft's guesses (speculative
    /// decoding): the tokens are the ones plain decoding picks, several per step when the
    /// guesses hold. Other sampling ignores the draft (a sampled token is not a check).
    pub fn generate(
        &mut self,
        s: &Sampling,
        mut draft: Option<&mut dyn speculate::Draft>,
        mut on_piece: impl FnMut(&str) -> bool,
    ) -> Result<Decode> {
        let mut out = Out::new(Instant::now());
        let mut choose = Chooser::new(s, self.llm, &self.tokens);
        if !choose.plain_greedy {
            draft = None;
        }
        let mut batch = LlamaBatch::new(self.n_batch, 1);
        let mut next = choose.at(&self.ctx, self.last_logits, s.text_first);
        let stop = loop {
            let held = self.tokens.len();
            if let Some(stop) = out.take(next, s, &choose.vocab, held, self.n_ctx(), &mut on_piece)
            {
                break stop;
            }
            let guesses = self.guesses(draft.as_deref_mut(), next, s, out.decode.tokens)?;
            self.decode_step(&mut batch, next, &guesses)?;
            out.decode.drafted += guesses.len();
            match self.keep_agreeing(&mut choose, &guesses, s, &mut out, &mut on_piece)? {
                ControlFlow::Continue(t) => next = t,
                ControlFlow::Break(stop) => break stop,
            }
        };
        out.decode.stop = stop;
        out.decode.confidence = choose.confidence();
        if let Some(tail) = out.utf8.finish() {
            on_piece(&tail);
        }
        out.decode.ms = out.start.elapsed().as_secs_f64() * 1e3;
        Ok(out.decode)
    }

    /// The draft's guesses of the tokens after `next`, as many as fit the answer's budget,
    /// the context and one batch; none without a draft.
    fn guesses<'d>(
        &self,
        draft: Option<&mut (dyn speculate::Draft + 'd)>,
        next: LlamaToken,
        s: &Sampling,
        written: usize,
    ) -> Result<Vec<LlamaToken>> {
        let room = (s.max_tokens as usize - written)
            .min(self.n_ctx().saturating_sub(self.tokens.len() + 2))
            .min(self.n_batch - 1);
        match draft {
            Some(d) if room > 0 => {
                let mut context = self.tokens.clone();
                context.push(next);
                d.propose(&context, room)
            }
            _ => Ok(Vec::new()),
        }
    }

    /// Decodes `next` and the guesses after it in one batch, logits for each, and takes `next`
    /// into the context.
    fn decode_step(
        &mut self,
        batch: &mut LlamaBatch,
        next: LlamaToken,
        guesses: &[LlamaToken],
    ) -> Result<()> {
        batch.clear();
        let n = self.tokens.len();
        for (i, &t) in std::iter::once(&next).chain(guesses).enumerate() {
            batch.add(t, (n + i) as i32, &[0], true)?;
        }
        self.ctx
            .decode(batch)
            .map_err(|e| anyhow!("llama.cpp decode failed: {e}"))?;
        self.tokens.push(next);
        Ok(())
    }

    /// Keeps the guesses the generator itself picks, up to the first it does not, and drops
    /// the rest from the KV cache; the next token to take, or why generation stops.
    fn keep_agreeing(
        &mut self,
        choose: &mut Chooser,
        guesses: &[LlamaToken],
        s: &Sampling,
        out: &mut Out,
        on_piece: &mut impl FnMut(&str) -> bool,
    ) -> Result<ControlFlow<StopReason, LlamaToken>> {
        let mut i = 0;
        let flow = loop {
            let t = choose.at(&self.ctx, i as i32, false);
            if i >= guesses.len() || t != guesses[i] {
                self.last_logits = i as i32;
                break ControlFlow::Continue(t);
            }
            out.decode.accepted += 1;
            let held = self.tokens.len();
            if let Some(stop) = out.take(t, s, &choose.vocab, held, self.n_ctx(), on_piece) {
                break ControlFlow::Break(stop);
            }
            self.tokens.push(t);
            i += 1;
        };
        if !guesses.is_empty() {
            let kept = self.tokens.len() as u32;
            if !self
                .ctx
                .clear_kv_cache_seq(Some(0), Some(kept), None)
                .map_err(|e| anyhow!("trimming the KV cache: {e}"))?
            {
                return Err(anyhow!("llama.cpp could not drop rejected draft tokens"));
            }
        }
        Ok(flow)
    }
}

/// How many leading tokens `a` and `b` share.
pub(super) fn common_prefix(a: &[LlamaToken], b: &[LlamaToken]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// How much of a context that holds `held` a prefill of `prompt` keeps: the shared prefix,
/// short of the prompt's last token (decoded again: its logits start the answer), cut back to
/// a multiple of `n_batch`. Slices then start at multiples of it, so every token's keys and
/// values come from the same batch whether or not a prefix was reused: llama.cpp's kernels
/// round differently for different batch shapes, and at temperature 0 that flipped a
/// near-tie, so a cached ask printed a different answer than the same ask without the cache.
pub(super) fn reusable(held: &[LlamaToken], prompt: &[LlamaToken], n_batch: usize) -> usize {
    common_prefix(held, prompt).min(prompt.len().saturating_sub(1)) / n_batch * n_batch
}

/// One generation's running state: the tokens written, the UTF-8 joiner and the figures.
struct Out {
    generated: Vec<LlamaToken>,
    utf8: Utf8Stream,
    bytes: Vec<u8>,
    decode: Decode,
    start: Instant,
}

impl Out {
    fn new(start: Instant) -> Out {
        Out {
            generated: Vec::new(),
            utf8: Utf8Stream::default(),
            bytes: Vec::new(),
            decode: Decode::default(),
            start,
        }
    }

    /// Takes the chosen `token` into the answer, in plain decoding's order of checks (end of
    /// text, the piece streamed, a loop, the budget, a full context); why generation stops
    /// here, if it does. `held` is how many tokens the context holds before this one.
    fn take(
        &mut self,
        token: LlamaToken,
        s: &Sampling,
        vocab: &llama_cpp_2::vocab::LlamaVocab<'_>,
        held: usize,
        n_ctx: usize,
        on_piece: &mut impl FnMut(&str) -> bool,
    ) -> Option<StopReason> {
        if self.decode.tokens >= s.max_tokens as usize {
            return Some(StopReason::MaxTokens);
        }
        if vocab.is_eog(token) && !s.ignore_eog {
            return Some(StopReason::EndOfText);
        }
        self.bytes.clear();
        vocab.token_to_piece_into(token, &mut self.bytes, false, None);
        self.decode.tokens += 1;
        self.generated.push(token);
        if let Some(text) = self.utf8.push(&self.bytes) {
            self.decode
                .first_piece_ms
                .get_or_insert(self.start.elapsed().as_secs_f64() * 1e3);
            if !on_piece(&text) {
                return Some(StopReason::Cancelled);
            }
        }
        if !s.ignore_eog && repeating_tail(&self.generated, 2).is_some() {
            return Some(StopReason::Repetition);
        }
        if held + 1 >= n_ctx {
            return Some(StopReason::ContextFull);
        }
        (self.decode.tokens >= s.max_tokens as usize).then_some(StopReason::MaxTokens)
    }
}

/// Joins token bytes into valid UTF-8: a character split across tokens is held back until
/// its last byte arrives; bytes that can never be valid become U+FFFD.
#[derive(Default)]
pub(super) struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    pub(super) fn push(&mut self, bytes: &[u8]) -> Option<String> {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&self.pending[..valid]).expect("checked"));
                    match e.error_len() {
                        // Incomplete sequence at the end: wait for more bytes.
                        None => {
                            self.pending.drain(..valid);
                            break;
                        }
                        Some(n) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..valid + n);
                        }
                    }
                }
            }
        }
        (!out.is_empty()).then_some(out)
    }

    pub(super) fn finish(&mut self) -> Option<String> {
        let rest = std::mem::take(&mut self.pending);
        (!rest.is_empty()).then(|| String::from_utf8_lossy(&rest).into_owned())
    }
}

//! llama.cpp, and only here (crate llama-cpp-2): load a GGUF file, render the model's chat
//! template into tokens without letting document text become control tokens, prefill in
//! `n_batch` slices with logits for the last token only, sample, and stream UTF-8-safe pieces.
//!
//! A [`Session`] owns one `LlamaContext` and remembers which tokens its KV cache holds, so a
//! new prompt that shares a prefix with the previous one only prefills the rest.

use std::io::Read;
use std::num::NonZeroU32;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;

/// A token id of the loaded generator (so callers need not name llama-cpp-2).
pub type Token = LlamaToken;

use crate::exit::ExitError;

mod batch;
pub mod speculate;
pub use batch::{Done, Job};

/// llama.cpp allows one backend per process.
fn backend() -> Result<&'static LlamaBackend> {
    static BACKEND: OnceLock<std::result::Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            // llama.cpp logs every tensor to stderr; route it to `tracing`, which is silent
            // unless a subscriber is installed, so stderr stays for people.
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            LlamaBackend::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| anyhow!("initialising llama.cpp: {e}"))
}

/// A chat message whose content is a list of parts; each part is tokenized on its own, so
/// an earlier part's tokens never depend on a later one (stable prefixes for the KV cache).
#[derive(Debug, Clone)]
pub struct Message {
    pub role: &'static str,
    pub parts: Vec<String>,
}

/// How the context is built.
#[derive(Debug, Clone)]
pub struct ContextParams {
    pub n_ctx: u32,
    pub n_batch: u32,
    pub threads: usize,
    pub threads_batch: usize,
}

#[derive(Debug, Clone)]
pub struct Sampling {
    pub max_tokens: u32,
    pub temperature: f32,
    pub top_p: f32,
    pub seed: u32,
    /// Penalty on tokens seen in the last `repeat_last_n` (1.0 = off). Small models fall into
    /// loops at temperature 0 without it.
    pub repeat_penalty: f32,
    pub repeat_last_n: i32,
    /// DRY ("don't repeat yourself") penalty on extending a sequence the answer already
    /// wrote: multiplier (0 = off), base, and the longest repeat allowed unpenalised.
    /// Only generated tokens count, so copying from the sources is not penalised.
    pub dry_multiplier: f32,
    pub dry_base: f32,
    pub dry_allowed_length: i32,
    /// Keep generating past end-of-text (benchmarks only).
    pub ignore_eog: bool,
    /// The answer may not start with `[`: small models asked to cite often answer with a
    /// bare "[S1]" and stop; the best token that starts text is taken instead.
    pub text_first: bool,
    /// Added to the logit of every token the prompt holds (the sources, the question, the
    /// end-of-turn token), 0 = off: a small model then copies the manual's own option names
    /// and values rather than inventing tokens the sources never contain.
    pub copy_bias: f32,
}

impl Sampling {
    /// Plain greedy decoding of up to `max_tokens`, no penalties.
    pub fn greedy(max_tokens: u32) -> Sampling {
        Sampling {
            max_tokens,
            temperature: 0.0,
            top_p: 1.0,
            seed: 0,
            repeat_penalty: 1.0,
            repeat_last_n: 0,
            dry_multiplier: 0.0,
            dry_base: 1.75,
            dry_allowed_length: 2,
            ignore_eog: false,
            text_first: false,
            copy_bias: 0.0,
        }
    }
}

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

pub struct Llm {
    model: LlamaModel,
    template: LlamaChatTemplate,
    pub path: PathBuf,
}

/// Checks the file before llama.cpp sees it: llama.cpp answers a bad file with a null pointer
/// and no reason, so we give the reason and the fix ourselves.
fn check_gguf(path: &Path) -> Result<()> {
    let mut f = std::fs::File::open(path).map_err(|e| {
        ExitError::model(format!(
            "model file {} cannot be opened ({e}); {} (`--medium` or `--large` for those generators) or point llm.model, llm.medium_model, llm.large_model or --model at a GGUF file",
            path.display(),
            crate::config::setup_hint()
        ))
    })?;
    let mut magic = [0u8; 4];
    if f.read_exact(&mut magic).is_err() || &magic != b"GGUF" {
        return Err(ExitError::model(format!(
            "{} is not a GGUF model file (it does not start with `GGUF`); point llm.model / --model at a .gguf file",
            path.display()
        )));
    }
    Ok(())
}

impl Llm {
    /// Loads a GGUF model (memory-mapped). `vocab_only` loads just the tokenizer, for dry runs.
    pub fn load(path: &Path, vocab_only: bool) -> Result<Llm> {
        let started = Instant::now();
        let llm = Self::load_inner(path, vocab_only)?;
        tracing::info!(model = %path.display(), vocab_only, ms = started.elapsed().as_millis() as u64, "generator loaded");
        Ok(llm)
    }

    fn load_inner(path: &Path, vocab_only: bool) -> Result<Llm> {
        check_gguf(path)?;
        let backend = backend()?;
        let params = LlamaModelParams::default()
            .with_use_mmap(true)
            .with_vocab_only(vocab_only);
        let model = LlamaModel::load_from_file(backend, path, &params).map_err(|e| {
            ExitError::model(format!(
                "llama.cpp could not load {} ({e}); the file may be truncated or of an unsupported architecture",
                path.display()
            ))
        })?;
        // ChatML is the common fallback for models that ship no template.
        let template = model
            .chat_template(None)
            .or_else(|_| LlamaChatTemplate::new("chatml").map_err(|e| anyhow!(e)))
            .context("reading the model's chat template")?;
        Ok(Llm {
            model,
            template,
            path: path.to_path_buf(),
        })
    }

    /// Tokens of `text`; `special` lets text like `<|im_start|>` become control tokens, so it
    /// is true only for text that comes from the chat template itself.
    pub fn tokenize(&self, text: &str, special: bool) -> Vec<LlamaToken> {
        self.model.vocab().tokenize(text.as_bytes(), false, special)
    }

    pub fn count_tokens(&self, text: &str) -> usize {
        self.tokenize(text, false).len()
    }

    pub fn n_vocab(&self) -> i32 {
        self.model.n_vocab()
    }

    pub fn n_ctx_train(&self) -> u32 {
        self.model.n_ctx_train()
    }

    /// Renders messages with the model's chat template and tokenizes the result: template text
    /// with special-token parsing, message content without it.
    pub fn chat_tokens(&self, messages: &[Message]) -> Result<Vec<LlamaToken>> {
        // Render with sentinels in place of the content, then splice the content back in as
        // tokens. The sentinels use private-use characters no template touches.
        let sentinel = |i: usize| format!("\u{E000}{i}\u{E001}");
        let chat = messages
            .iter()
            .enumerate()
            .map(|(i, m)| LlamaChatMessage::new(m.role.to_string(), sentinel(i)))
            .collect::<std::result::Result<Vec<_>, _>>()
            .context("building chat messages")?;
        let rendered = self
            .model
            .apply_chat_template(&self.template, &chat, true)
            .map_err(|e| anyhow!("applying the chat template of {}: {e}", self.path.display()))?;

        let mut tokens = Vec::new();
        let vocab = self.model.vocab();
        if vocab.should_add_bos() {
            tokens.push(vocab.bos());
        }
        let mut rest = rendered.as_str();
        for (i, m) in messages.iter().enumerate() {
            let s = sentinel(i);
            let at = rest.find(&s).ok_or_else(|| {
                anyhow!(
                    "the chat template of {} dropped message {i}",
                    self.path.display()
                )
            })?;
            tokens.extend(self.tokenize(&rest[..at], true));
            for part in &m.parts {
                tokens.extend(self.tokenize(part, false));
            }
            rest = &rest[at + s.len()..];
        }
        tokens.extend(self.tokenize(rest, true));
        Ok(tokens)
    }

    /// The prompt text exactly as the chat template renders it (for `--dry-run`).
    pub fn render(&self, messages: &[Message]) -> Result<String> {
        let chat = messages
            .iter()
            .map(|m| LlamaChatMessage::new(m.role.to_string(), m.parts.concat()))
            .collect::<std::result::Result<Vec<_>, _>>()
            .context("building chat messages")?;
        self.model
            .apply_chat_template(&self.template, &chat, true)
            .map_err(|e| anyhow!("applying the chat template of {}: {e}", self.path.display()))
    }

    pub fn session(&self, p: &ContextParams) -> Result<Session<'_>> {
        let n_ctx = if p.n_ctx == 0 {
            self.model.n_ctx_train()
        } else {
            p.n_ctx
        };
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(n_ctx))
            .with_n_batch(p.n_batch)
            .with_n_ubatch(p.n_batch)
            .with_n_threads(i32::try_from(p.threads).unwrap_or(1))
            .with_n_threads_batch(i32::try_from(p.threads_batch).unwrap_or(1));
        let ctx = self.model.new_context(backend()?, params).map_err(|e| {
            anyhow!("creating a llama.cpp context of {n_ctx} tokens: {e}; try a smaller llm.n_ctx")
        })?;
        Ok(Session {
            llm: self,
            ctx,
            tokens: Vec::new(),
            n_batch: p.n_batch as usize,
            last_logits: 0,
        })
    }
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

pub struct Session<'m> {
    llm: &'m Llm,
    ctx: LlamaContext<'m>,
    /// The tokens whose keys and values the context holds, in order (sequence 0).
    tokens: Vec<LlamaToken>,
    n_batch: usize,
    /// Index, in the last decoded batch, of the token whose logits sample the next token.
    last_logits: i32,
}

/// The llama.cpp build this binary links (KV state files are only valid within one build).
pub const LLAMA_CPP_BUILD: &str = env!("BUILD_LLAMA_CPP_SYS");

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

    /// Writes the KV state and the tokens it holds to `path`.
    pub fn save_state(&self, path: &Path) -> Result<()> {
        self.ctx
            .state_save_file(path, &self.tokens)
            .map_err(|e| anyhow!("saving the prompt cache to {}: {e}", path.display()))
    }

    /// Loads a KV state saved by [`Session::save_state`]. It is kept only when llama.cpp
    /// accepts the file and the tokens in it are exactly `expect`; otherwise the cache is
    /// cleared and `false` returned. A state file does not identify its model, so the caller
    /// must only offer files written for this model and context.
    /// Empties the KV cache: the next prefill starts from nothing.
    pub fn reset(&mut self) {
        self.ctx.clear_kv_cache();
        self.tokens.clear();
    }

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
        let common = self.shared_prefix(prompt);
        // The last prompt token is always decoded again: its logits start the answer. The
        // kept prefix is cut back to a multiple of n_batch, and slices start at multiples of
        // it, so every token's keys and values come from the same batch whether or not a
        // cached prefix was reused: llama.cpp's kernels round differently for different batch
        // shapes, and at temperature 0 that flipped a near-tie, so a cached ask printed a
        // different answer than the same ask without the cache.
        let mut keep = common.min(prompt.len() - 1) / self.n_batch * self.n_batch;
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
        self.last_logits = batch.n_tokens() - 1;
        Ok(Prefill {
            prompt_tokens: prompt.len(),
            cached_tokens: keep,
            ms: start.elapsed().as_secs_f64() * 1e3,
        })
    }

    /// How many leading tokens of `tokens` the context already holds.
    fn shared_prefix(&self, tokens: &[LlamaToken]) -> usize {
        self.tokens
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count()
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

/// How the next token is chosen from a batch's logits: the sampler chain, or plain argmax
/// where that gives its answer, with `llm.copy_bias` applied either way.
struct Chooser<'m> {
    sampler: LlamaSampler,
    plain_greedy: bool,
    copy: Option<CopyBias>,
    vocab: llama_cpp_2::vocab::LlamaVocab<'m>,
    /// The model's own probability of each of its first picks (before the copy bias).
    probs: Vec<f32>,
}

/// How many of an answer's first tokens its confidence is taken over: enough to cover the
/// phrase that carries the answer, early enough to decide on before the answer is written.
const CONFIDENCE_TOKENS: usize = 16;

impl<'m> Chooser<'m> {
    fn new(s: &Sampling, llm: &'m Llm, prompt: &[LlamaToken]) -> Chooser<'m> {
        let copy = CopyBias::new(s.copy_bias, prompt, &llm.model);
        let (sampler, plain_greedy) = sampler(s, &llm.model, copy.as_ref());
        Chooser {
            sampler,
            plain_greedy,
            copy,
            vocab: llm.model.vocab(),
            probs: Vec::new(),
        }
    }

    /// The token at batch index `i`; `text_first`: the best one that does not open a `[`.
    fn at(&mut self, ctx: &LlamaContext, i: i32, text_first: bool) -> LlamaToken {
        let t = pick(
            ctx,
            i,
            &mut self.sampler,
            self.plain_greedy,
            self.copy.as_ref(),
            text_first,
            &self.vocab,
        );
        if self.probs.len() < CONFIDENCE_TOKENS {
            self.probs.push(probability(ctx.get_logits_ith(i), t));
        }
        t
    }

    /// The mean probability the model gave its first picks: a signal, computed before most
    /// of the answer is written, of whether it knows the answer (routing replays it).
    fn confidence(&self) -> Option<f32> {
        (!self.probs.is_empty()).then(|| self.probs.iter().sum::<f32>() / self.probs.len() as f32)
    }
}

/// Softmax probability of `token` under `logits`.
fn probability(logits: &[f32], token: LlamaToken) -> f32 {
    let Some(&x) = logits.get(token.0.max(0) as usize) else {
        return 0.0;
    };
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = logits.iter().map(|l| (l - max).exp()).sum();
    (x - max).exp() / sum
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

/// The next token from the logits at batch index `i`: plain argmax where that gives the
/// sampler chain's answer faster (the chain first builds a candidate array of the whole
/// vocabulary for every token, ~4% of decode), the copy bias applied either way, and with
/// `text_first` the best token that does not open a `[`.
#[allow(clippy::too_many_arguments)]
fn pick(
    ctx: &LlamaContext,
    i: i32,
    sampler: &mut LlamaSampler,
    plain_greedy: bool,
    copy: Option<&CopyBias>,
    text_first: bool,
    vocab: &llama_cpp_2::vocab::LlamaVocab<'_>,
) -> LlamaToken {
    let logits = || match copy {
        Some(c) => std::borrow::Cow::Owned(c.apply(ctx.get_logits_ith(i))),
        None => std::borrow::Cow::Borrowed(ctx.get_logits_ith(i)),
    };
    let token = if plain_greedy {
        argmax(&logits())
    } else {
        sampler.sample(ctx, i)
    };
    if text_first && opens_bracket(vocab, token) {
        first_text_token(&logits(), vocab)
    } else {
        token
    }
}

/// `llm.copy_bias`: which tokens the prompt holds, and how much their logits gain.
pub(crate) struct CopyBias {
    bias: f32,
    seen: Vec<bool>,
}

impl CopyBias {
    /// `None` when the bias is off.
    pub(crate) fn new(bias: f32, prompt: &[LlamaToken], model: &LlamaModel) -> Option<CopyBias> {
        if bias == 0.0 {
            return None;
        }
        let n = model.n_vocab().max(0) as usize;
        let mut seen = vec![false; n];
        let eog = (0..n as i32).filter(|&t| model.vocab().is_eog(LlamaToken::new(t)));
        for t in prompt.iter().map(|t| t.0).chain(eog) {
            if let Some(x) = seen.get_mut(t.max(0) as usize) {
                *x = true;
            }
        }
        Some(CopyBias { bias, seen })
    }

    fn apply(&self, logits: &[f32]) -> Vec<f32> {
        logits
            .iter()
            .zip(self.seen.iter().chain(std::iter::repeat(&false)))
            .map(|(&l, &seen)| if seen { l + self.bias } else { l })
            .collect()
    }

    /// The same bias as llama.cpp's logit-bias sampler reads it.
    fn biases(&self) -> Vec<llama_cpp_2::token::logit_bias::LlamaLogitBias> {
        self.seen
            .iter()
            .enumerate()
            .filter(|(_, &s)| s)
            .map(|(t, _)| {
                llama_cpp_2::token::logit_bias::LlamaLogitBias::new(
                    LlamaToken::new(t as i32),
                    self.bias,
                )
            })
            .collect()
    }
}

/// The sampler chain for `s`, and whether plain argmax (over the copy-biased logits) gives
/// the same tokens faster.
fn sampler(s: &Sampling, model: &LlamaModel, copy: Option<&CopyBias>) -> (LlamaSampler, bool) {
    let mut chain = Vec::new();
    if let Some(c) = copy {
        chain.push(LlamaSampler::logit_bias(model.n_vocab(), &c.biases()));
    }
    if s.repeat_penalty != 1.0 && s.repeat_last_n != 0 {
        chain.push(LlamaSampler::penalties(
            model.n_vocab(),
            s.repeat_last_n,
            s.repeat_penalty,
            0.0,
            0.0,
        ));
    }
    if s.dry_multiplier > 0.0 {
        // llama.cpp's default sequence breakers: a repeat does not run across them.
        chain.push(LlamaSampler::dry(
            model,
            s.dry_multiplier,
            s.dry_base,
            s.dry_allowed_length,
            -1,
            ["\n", ":", "\"", "*"],
        ));
    }
    if s.temperature <= 0.0 {
        chain.push(LlamaSampler::greedy());
    } else {
        chain.push(LlamaSampler::top_p(s.top_p, 1));
        chain.push(LlamaSampler::temp(s.temperature));
        chain.push(LlamaSampler::dist(s.seed));
    }
    let plain_greedy = s.temperature <= 0.0
        && (s.repeat_penalty == 1.0 || s.repeat_last_n == 0)
        && s.dry_multiplier <= 0.0;
    (LlamaSampler::chain_simple(chain), plain_greedy)
}

/// Whether `token`'s text, leading spaces aside, starts with `[`.
fn opens_bracket(vocab: &llama_cpp_2::vocab::LlamaVocab<'_>, token: LlamaToken) -> bool {
    let mut bytes = Vec::new();
    vocab.token_to_piece_into(token, &mut bytes, false, None);
    bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[')
}

/// The highest-logit token that does not open a bracket (greedy over what is left; the
/// rejected ones are the few bracket tokens near the top).
fn first_text_token(logits: &[f32], vocab: &llama_cpp_2::vocab::LlamaVocab<'_>) -> LlamaToken {
    let mut logits = logits.to_vec();
    for _ in 0..64 {
        let t = argmax(&logits);
        if !opens_bracket(vocab, t) {
            return t;
        }
        logits[t.0 as usize] = f32::NEG_INFINITY;
    }
    argmax(&logits)
}

/// The token with the highest logit; the first one on ties, as llama.cpp's greedy sampler.
fn argmax(logits: &[f32]) -> LlamaToken {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    LlamaToken::new(best as i32)
}

/// Joins token bytes into valid UTF-8: a character split across tokens is held back until
/// its last byte arrives; bytes that can never be valid become U+FFFD.
#[derive(Default)]
struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    fn push(&mut self, bytes: &[u8]) -> Option<String> {
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

    fn finish(&mut self) -> Option<String> {
        let rest = std::mem::take(&mut self.pending);
        (!rest.is_empty()).then(|| String::from_utf8_lossy(&rest).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::Utf8Stream;

    /// The small generator's vocabulary (no weights): what token-level tests read.
    fn small_vocab() -> super::Llm {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/models/SmolLM2-135M-Instruct.Q4_1.gguf"
        );
        super::Llm::load(std::path::Path::new(path), true).unwrap()
    }

    #[test]
    fn an_answer_cannot_open_with_a_bracket() {
        let llm = small_vocab();
        let vocab = llm.model.vocab();
        let bracket = llm.tokenize("[S1]", false)[0];
        let bracket_space = llm.tokenize(" [", false)[0];
        let word = llm.tokenize("The", false)[0];
        assert!(super::opens_bracket(&vocab, bracket));
        assert!(super::opens_bracket(&vocab, bracket_space));
        assert!(!super::opens_bracket(&vocab, word));
        // The bracket tokens lead; the best token that starts text wins.
        let mut logits = vec![0.0f32; llm.n_vocab() as usize];
        logits[bracket.0 as usize] = 9.0;
        logits[bracket_space.0 as usize] = 8.0;
        logits[word.0 as usize] = 7.0;
        assert_eq!(super::first_text_token(&logits, &vocab), word);
    }

    #[test]
    fn the_copy_bias_lifts_the_prompts_tokens_and_end_of_turn_only() {
        let llm = small_vocab();
        let prompt = llm.tokenize("Run PRAGMA auto_vacuum", false);
        assert!(super::CopyBias::new(0.0, &prompt, &llm.model).is_none());
        let c = super::CopyBias::new(1.5, &prompt, &llm.model).unwrap();
        let n = llm.n_vocab() as usize;
        let invented = llm.tokenize(" zebra", false)[0];
        let mut logits = vec![0.0f32; n];
        logits[invented.0 as usize] = 1.0;
        let biased = c.apply(&logits);
        for t in &prompt {
            assert_eq!(biased[t.0 as usize], 1.5);
        }
        assert_eq!(biased[invented.0 as usize], 1.0);
        let vocab = llm.model.vocab();
        let eog: Vec<usize> = (0..n)
            .filter(|&t| vocab.is_eog(llama_cpp_2::token::LlamaToken::new(t as i32)))
            .collect();
        assert!(!eog.is_empty());
        assert!(eog.iter().all(|&t| biased[t] == 1.5));
        // Everything else keeps its logit, and llama.cpp's sampler gets the same set.
        let lifted = biased.iter().filter(|&&l| l == 1.5).count();
        assert_eq!(c.biases().len(), lifted);
        assert!(lifted < 20, "{lifted} tokens lifted");
        assert_ne!(super::argmax(&biased), invented);
    }

    #[test]
    fn repetition_is_found_at_its_shortest_period() {
        use llama_cpp_2::token::LlamaToken;
        let t = |v: &[i32]| v.iter().map(|&i| LlamaToken::new(i)).collect::<Vec<_>>();
        let block = [1, 2, 3, 4, 5, 6, 7, 8, 9];
        let looped: Vec<i32> = [9, 8].into_iter().chain(block.repeat(3)).collect();
        assert_eq!(super::repeating_tail(&t(&looped), 3), Some(9));
        assert_eq!(super::repeating_tail(&t(&looped), 4), None);
        // Short repeats (table rows, "| |") are not loops.
        assert_eq!(
            super::repeating_tail(&t(&[1, 2, 1, 2, 1, 2, 1, 2]), 2),
            None
        );
        assert_eq!(
            super::repeating_tail(&t(&(1..=40).collect::<Vec<_>>()), 2),
            None
        );
    }

    #[test]
    fn utf8_stream_holds_split_characters() {
        let mut s = Utf8Stream::default();
        let euro = "€".as_bytes();
        assert_eq!(s.push(b"a"), Some("a".into()));
        assert_eq!(s.push(&euro[..1]), None);
        assert_eq!(s.push(&euro[1..2]), None);
        assert_eq!(s.push(&euro[2..]), Some("€".into()));
        assert_eq!(s.push(&[0xff, b'b']), Some("\u{FFFD}b".into()));
        assert_eq!(s.push(&euro[..2]), None);
        assert_eq!(s.finish(), Some("\u{FFFD}".into()));
    }
}

//! How the next token is chosen: the sampling settings, llama.cpp's sampler chain or plain
//! argmax where that gives the same token faster, the copy bias toward the prompt's tokens,
//! the rule that an answer does not open with `[`, and the confidence of the first picks.

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;

use super::Llm;

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
    /// The sampling `llm.*` asks for.
    pub fn of(l: &crate::config::LlmSettings) -> Sampling {
        Sampling {
            max_tokens: l.max_tokens,
            temperature: l.temperature,
            top_p: l.top_p,
            seed: l.seed,
            repeat_penalty: l.repeat_penalty,
            repeat_last_n: l.repeat_last_n,
            dry_multiplier: l.dry_multiplier,
            dry_base: l.dry_base,
            dry_allowed_length: l.dry_allowed_length,
            ignore_eog: false,
            text_first: l.text_first,
            copy_bias: l.copy_bias,
        }
    }

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

/// How the next token is chosen from a batch's logits: the sampler chain, or plain argmax
/// where that gives its answer, with `llm.copy_bias` applied either way.
pub(super) struct Chooser<'m> {
    sampler: LlamaSampler,
    pub(super) plain_greedy: bool,
    copy: Option<CopyBias>,
    pub(super) vocab: llama_cpp_2::vocab::LlamaVocab<'m>,
    /// The model's own probability of each of its first picks (before the copy bias).
    probs: Vec<f32>,
}

/// How many of an answer's first tokens its confidence is taken over: enough to cover the
/// phrase that carries the answer, early enough to decide on before the answer is written.
const CONFIDENCE_TOKENS: usize = 16;

impl<'m> Chooser<'m> {
    pub(super) fn new(s: &Sampling, llm: &'m Llm, prompt: &[LlamaToken]) -> Chooser<'m> {
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
    pub(super) fn at(&mut self, ctx: &LlamaContext, i: i32, text_first: bool) -> LlamaToken {
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
    pub(super) fn confidence(&self) -> Option<f32> {
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

/// The next token from the logits at batch index `i`: plain argmax where that gives the
/// sampler chain's answer faster (the chain first builds a candidate array of the whole
/// vocabulary for every token, ~4% of decode), the copy bias applied either way, and with
/// `text_first` the best token that does not open a `[`.
#[allow(clippy::too_many_arguments)]
pub(super) fn pick(
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
pub(super) struct CopyBias {
    bias: f32,
    seen: Vec<bool>,
}

impl CopyBias {
    /// `None` when the bias is off.
    pub(super) fn new(bias: f32, prompt: &[LlamaToken], model: &LlamaModel) -> Option<CopyBias> {
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

    pub(super) fn apply(&self, logits: &[f32]) -> Vec<f32> {
        logits
            .iter()
            .zip(self.seen.iter().chain(std::iter::repeat(&false)))
            .map(|(&l, &seen)| if seen { l + self.bias } else { l })
            .collect()
    }

    /// The same bias as llama.cpp's logit-bias sampler reads it.
    pub(super) fn biases(&self) -> Vec<llama_cpp_2::token::logit_bias::LlamaLogitBias> {
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
pub(super) fn sampler(
    s: &Sampling,
    model: &LlamaModel,
    copy: Option<&CopyBias>,
) -> (LlamaSampler, bool) {
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
pub(super) fn opens_bracket(vocab: &llama_cpp_2::vocab::LlamaVocab<'_>, token: LlamaToken) -> bool {
    let mut bytes = Vec::new();
    vocab.token_to_piece_into(token, &mut bytes, false, None);
    bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[')
}

/// The highest-logit token that does not open a bracket (greedy over what is left; the
/// rejected ones are the few bracket tokens near the top).
pub(super) fn first_text_token(
    logits: &[f32],
    vocab: &llama_cpp_2::vocab::LlamaVocab<'_>,
) -> LlamaToken {
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
pub(super) fn argmax(logits: &[f32]) -> LlamaToken {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    LlamaToken::new(best as i32)
}

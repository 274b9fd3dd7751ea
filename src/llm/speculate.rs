//! Where speculative decoding's guesses come from. A [`Draft`] proposes the tokens likely to
//! follow the context; [`super::Session::generate`] checks them all in one batch with the
//! answering model and keeps the longest run its own greedy choice agrees with, so the answer
//! is the one plain decoding writes, only with fewer decode steps.
//!
//! Two drafts: [`Lookup`] copies what followed the context's last few tokens where they
//! occurred before (prompt lookup: a RAG answer quotes its sources, so the tokens it is about
//! to write often stand in the prompt already, and guessing them costs nothing), and
//! [`ModelDraft`], a smaller model with the same vocabulary writing ahead greedily.

use anyhow::{anyhow, Result};
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::token::LlamaToken;

use super::{argmax, Llm, Session};

/// Proposes up to `n` tokens to follow `context` (the prompt and the answer so far).
pub trait Draft {
    fn propose(&mut self, context: &[LlamaToken], n: usize) -> Result<Vec<LlamaToken>>;
}

/// Prompt lookup: up to `most` tokens that followed the longest recent earlier occurrence of
/// the context's last `max_ngram` … `min_ngram` tokens.
pub struct Lookup {
    pub min_ngram: usize,
    pub max_ngram: usize,
    pub most: usize,
}

impl Lookup {
    /// Matches of 4 to 8 tokens. A checked guess is not free on a CPU: on two cores a 1.5B
    /// decode step of 2 tokens costs 1.7 single steps and one of 16 costs 3.3 (ggml's vector
    /// dot products below 8 rows, its tiled kernel from 8), so a draft pays only where it is
    /// likely to hold for several tokens. A match of 2–3 tokens (" of the", "[S1]") recurs
    /// everywhere and its continuation mostly fails; one of 4 or more is the answer copying a
    /// source or itself. Replayed on 65 dev answers' tokens against that cost curve, matches
    /// of 2–4 with 8 guesses decode 1.04× as fast as plain decoding, 4–8 with 15 guesses
    /// 1.27×; measured, 0.85× and 1.07× (docs/quality.md, speculative decoding).
    pub fn new(most: usize) -> Lookup {
        Lookup {
            min_ngram: 4,
            max_ngram: 8,
            most,
        }
    }
}

impl Draft for Lookup {
    fn propose(&mut self, context: &[LlamaToken], n: usize) -> Result<Vec<LlamaToken>> {
        let n = n.min(self.most);
        Ok(lookup(context, n, self.min_ngram, self.max_ngram))
    }
}

/// The pure core of [`Lookup`]: for the longest n-gram first, the latest earlier place the
/// context's tail occurs, and up to `n` tokens after it.
pub fn lookup(context: &[LlamaToken], n: usize, min: usize, max: usize) -> Vec<LlamaToken> {
    let len = context.len();
    for size in (min.max(1)..=max).rev() {
        if len <= size {
            continue;
        }
        let tail = &context[len - size..];
        // Latest first: the answer's own recent words, then the source nearest them.
        let found = (0..len - size)
            .rev()
            .find(|&j| &context[j..j + size] == tail);
        if let Some(j) = found {
            let from = j + size;
            let to = (from + n).min(len);
            if from < to {
                return context[from..to].to_vec();
            }
        }
    }
    Vec::new()
}

/// A smaller model drafting greedily in its own context, kept in step with the answering
/// model's: each proposal first makes the draft's KV cache hold the context (reusing the
/// longest common prefix exactly: its rounding does not matter, the verifier decides), then
/// writes `n` tokens one decode at a time.
pub struct ModelDraft<'d> {
    session: Session<'d>,
    most: usize,
}

impl<'d> ModelDraft<'d> {
    /// A draft for generator `target` from `draft`; refuses a model whose vocabulary differs
    /// (its token ids would mean other text).
    pub fn new(
        draft: &'d Llm,
        target: &Llm,
        session: Session<'d>,
        most: usize,
    ) -> Result<ModelDraft<'d>> {
        let probe = "SELECT name FROM sqlite_master; -- [S1] `PRAGMA foreign_keys = ON;` é";
        if draft.n_vocab() != target.n_vocab()
            || draft.tokenize(probe, true) != target.tokenize(probe, true)
        {
            return Err(anyhow!(
                "the draft model {} does not share the vocabulary of {}; set llm.draft_model to a model of the same family, or llm.speculative = \"lookup\"",
                draft.path.display(),
                target.path.display()
            ));
        }
        Ok(ModelDraft { session, most })
    }

    /// Makes the draft's cache hold exactly `context`, decoding what it lacks; leaves the
    /// logits of the last token ready.
    fn sync(&mut self, context: &[LlamaToken]) -> Result<()> {
        let s = &mut self.session;
        if context.len() >= s.n_ctx() {
            return Err(anyhow!("the draft's context is full"));
        }
        let common = s.shared_prefix(context);
        // The last token is decoded again when nothing follows it: its logits start the draft.
        let keep = common.min(context.len() - 1);
        if !s
            .ctx
            .clear_kv_cache_seq(Some(0), Some(keep as u32), None)
            .map_err(|e| anyhow!("trimming the draft's KV cache: {e}"))?
        {
            s.ctx.clear_kv_cache();
            s.tokens.clear();
            return self.sync_from(0, context);
        }
        s.tokens.truncate(keep);
        self.sync_from(keep, context)
    }

    fn sync_from(&mut self, keep: usize, context: &[LlamaToken]) -> Result<()> {
        let s = &mut self.session;
        let mut batch = LlamaBatch::new(s.n_batch, 1);
        for (k, slice) in context[keep..].chunks(s.n_batch).enumerate() {
            batch.clear();
            let base = keep + k * s.n_batch;
            for (i, &t) in slice.iter().enumerate() {
                batch.add(t, (base + i) as i32, &[0], base + i == context.len() - 1)?;
            }
            s.ctx
                .decode(&mut batch)
                .map_err(|e| anyhow!("the draft model's decode failed: {e}"))?;
            s.tokens.extend_from_slice(slice);
        }
        s.last_logits = batch.n_tokens() - 1;
        Ok(())
    }
}

impl Draft for ModelDraft<'_> {
    fn propose(&mut self, context: &[LlamaToken], n: usize) -> Result<Vec<LlamaToken>> {
        let n = n.min(self.most);
        self.sync(context)?;
        let s = &mut self.session;
        let mut out = Vec::with_capacity(n);
        let mut batch = LlamaBatch::new(1, 1);
        while out.len() < n && s.tokens.len() + 1 < s.n_ctx() {
            let t = argmax(s.ctx.get_logits_ith(s.last_logits));
            out.push(t);
            if out.len() == n || s.llm.model.vocab().is_eog(t) {
                break;
            }
            batch.clear();
            batch.add(t, s.tokens.len() as i32, &[0], true)?;
            s.ctx
                .decode(&mut batch)
                .map_err(|e| anyhow!("the draft model's decode failed: {e}"))?;
            s.tokens.push(t);
            s.last_logits = 0;
        }
        Ok(out)
    }
}

/// The draft one answer decodes with (`llm.speculative`).
pub enum Drafter<'d> {
    Off,
    Lookup(Lookup),
    Model(ModelDraft<'d>),
}

impl Drafter<'_> {
    pub fn as_draft(&mut self) -> Option<&mut dyn Draft> {
        match self {
            Drafter::Off => None,
            Drafter::Lookup(l) => Some(l),
            Drafter::Model(m) => Some(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{lookup, Draft, Lookup};
    use llama_cpp_2::token::LlamaToken;

    fn t(v: &[i32]) -> Vec<LlamaToken> {
        v.iter().map(|&i| LlamaToken::new(i)).collect()
    }

    #[test]
    fn lookup_copies_what_followed_the_tail_before() {
        // "... 5 6 7 8 9 ..." in the prompt; the answer so far ends "5 6".
        let ctx = t(&[1, 5, 6, 7, 8, 9, 2, 3, 5, 6]);
        assert_eq!(lookup(&ctx, 3, 2, 4), t(&[7, 8, 9]));
        // Fewer left than asked: what there is.
        assert_eq!(lookup(&ctx, 10, 2, 4), t(&[7, 8, 9, 2, 3, 5, 6]));
    }

    #[test]
    fn lookup_prefers_the_longest_then_the_latest_match() {
        // Tail "3 4": "2 3 4" occurs once (followed by 10), "3 4" alone later (followed by 20).
        let ctx = t(&[2, 3, 4, 10, 9, 3, 4, 20, 2, 3, 4]);
        assert_eq!(lookup(&ctx, 1, 2, 4), t(&[10]));
        assert_eq!(lookup(&ctx, 1, 2, 2), t(&[20]));
    }

    #[test]
    fn lookup_proposes_nothing_without_a_match() {
        assert!(lookup(&t(&[1, 2, 3, 4]), 4, 2, 4).is_empty());
        assert!(lookup(&t(&[1]), 4, 2, 4).is_empty());
        assert!(lookup(&[], 4, 2, 4).is_empty());
        // A single-token match is below the minimum.
        assert!(lookup(&t(&[7, 1, 2, 7]), 2, 2, 4).is_empty());
    }

    #[test]
    fn the_default_rule_drafts_only_from_matches_of_four_tokens_and_at_most_its_limit() {
        let source: Vec<i32> = (100..130).collect();
        let mut d = Lookup::new(15);
        // The answer ends with three tokens of the source: too short a match to draft from.
        let mut ctx = source.clone();
        ctx.extend([0, 100, 101, 102]);
        assert!(d.propose(&t(&ctx), 64).unwrap().is_empty());
        // A fourth: the source's next 15 tokens, however many more the caller has room for.
        ctx.push(103);
        assert_eq!(
            d.propose(&t(&ctx), 64).unwrap(),
            t(&(104..119).collect::<Vec<_>>())
        );
        // The caller's room bounds it too.
        assert_eq!(d.propose(&t(&ctx), 2).unwrap(), t(&[104, 105]));
    }
}

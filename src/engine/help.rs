//! The generators' help to retrieval (docs/quality.md, help from the generators): a local
//! generator writes for the question before it is searched (`retrieval.expand`: a short
//! passage that would answer it, HyDE, and search terms), and judges the best fused
//! candidates after (`retrieval.rerank = "generator"`, [`crate::llm::rerank`]). The
//! retriever searches and re-orders; this module only writes and scores.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::Answerer;
use crate::config::{Expand, Mode, Rerank, Tier};
use crate::llm::{chat, judge::Verdicts, rerank, ContextParams, Generator, Llm, Sampling};
use crate::retrieve::{Help, Query, Ranked, Rescore, Retrieval};

/// What the expansion generator is told for each kind: short, in the documentation's words.
const HYDE: &str = "You write a short passage of technical documentation that answers the \
question, as the manual itself would state it: the names, commands and options it would use. \
At most two sentences, no preamble.";
const TERMS: &str = "You write search terms for a question about technical documentation: the \
names, commands, options and words that the page answering it would contain. One line, at most \
twelve terms separated by spaces, no preamble.";

/// The most of a candidate the reranker reads (its heading and first characters): the
/// candidates' prefill is most of its time.
const RERANK_CHARS: usize = 500;

/// The expansion's context: instructions, a question and `retrieval.expand_tokens` fit.
const EXPAND_CTX: u32 = 1024;

/// Its prefill slices: a prefix restored from the prompt cache is reused in whole slices,
/// and the whole prompt is shorter than the answers' 128.
const EXPAND_BATCH: u32 = 16;

/// What a generator wrote for one question, and what it cost.
#[derive(Debug, Clone, Default)]
pub(super) struct Expansion {
    passages: Vec<String>,
    terms: Vec<String>,
    ms: f64,
    tokens: usize,
}

/// The last question's expansion and reranking, so a second retrieval of the same question
/// (eval's ranks from the top 10 beside the packed top 5) writes and scores nothing again.
#[derive(Default)]
pub(super) struct Memo {
    expansion: Option<(String, Expansion)>,
    scores: Option<(String, Vec<String>, Vec<f32>)>,
}

impl Answerer {
    /// Retrieves for `q` what an answer reads, with the help the settings ask of the
    /// generators.
    pub(super) fn helped(&self, q: &Query) -> Result<Retrieval> {
        let (mut out, expansion) = self.with_help(q, |h| self.retriever.retrieve(q, h))?;
        out.helped.expand_ms = expansion.ms;
        out.helped.expand_tokens = expansion.tokens;
        Ok(out)
    }

    /// The ranked spans alone (`rag search`, eval's ranks), with the same help: no passages
    /// widened.
    pub(super) fn helped_ranked(&self, q: &Query) -> Result<Vec<Ranked>> {
        let ((ranked, _), _) = self.with_help(q, |h| self.retriever.run_with(q, q.mode, h))?;
        Ok(ranked)
    }

    /// Runs `search` with what the expansion generator wrote for `q` and the reranker the
    /// settings ask for; its result, and the expansion.
    fn with_help<T>(
        &self,
        q: &Query,
        search: impl FnOnce(&Help<'_>) -> Result<T>,
    ) -> Result<(T, Expansion)> {
        let expansion = self.expansion(&q.text, q.mode)?;
        let reranker = match self.settings.retrieval.rerank {
            Rerank::Generator => Some(self.reranker()?),
            Rerank::Off => None,
        };
        let help = Help {
            passages: expansion.passages.clone(),
            terms: expansion.terms.clone(),
            rescorer: reranker.as_ref().map(|x| x as &dyn Rescore),
        };
        Ok((search(&help)?, expansion))
    }

    /// A local generator of `tier` with weights, for `what` (a setting's name in errors).
    fn helper(&self, tier: Tier, what: &str) -> Result<(&Generator, &Llm, ContextParams)> {
        let slot = self.model(tier).with_context(|| {
            format!(
                "{what} asks the {} generator ({what}_with), which cannot be loaded; fetch it (`rag models fetch --large`) or set {what}_with to an installed one",
                tier.name()
            )
        })?;
        let loaded = self.loaded(slot);
        let Some((llm, _)) = loaded.local() else {
            bail!(
                "{what} needs a local generator and the {} one is served remotely; set {what}_with to a local one or turn {what} off",
                tier.name()
            );
        };
        Ok((loaded, llm, self.window(loaded)?.0))
    }

    /// What the expansion generator writes for `question` (`retrieval.expand`): a passage
    /// where `mode` searches vectors, terms where it searches full text.
    fn expansion(&self, question: &str, mode: Mode) -> Result<Expansion> {
        let r = &self.settings.retrieval;
        if r.expand == Expand::Off {
            return Ok(Expansion::default());
        }
        if let Some((q, e)) = &super::lock(&self.memo).expansion {
            if q == question {
                return Ok(e.clone());
            }
        }
        let started = Instant::now();
        let (loaded, llm, params) = self.helper(r.expand_with, "retrieval.expand")?;
        let mut session = llm.session(&ContextParams {
            n_ctx: EXPAND_CTX,
            n_batch: EXPAND_BATCH,
            ..params
        })?;
        let mut out = Expansion::default();
        let asked = [
            (r.expand.hyde() && mode != Mode::Text, HYDE),
            (r.expand.keywords() && mode != Mode::Vector, TERMS),
        ];
        for (_, instructions) in asked.into_iter().filter(|(on, _)| *on) {
            let tokens = llm.chat_tokens(&chat(instructions, [question.trim()]))?;
            // The instructions come back from the persistent prompt cache after the first
            // question (a state of theirs is saved with every prompt).
            self.prefill(&mut session, loaded, &tokens, EXPAND_CTX, true, &mut |_| {
                Ok(())
            })?;
            let mut text = String::new();
            let decode = session.generate(&Sampling::greedy(r.expand_tokens), None, |piece| {
                text.push_str(piece);
                true
            })?;
            out.tokens += decode.tokens;
            let text = text.trim().to_string();
            if !text.is_empty() {
                if instructions == HYDE {
                    out.passages.push(text);
                } else {
                    out.terms.push(text);
                }
            }
        }
        out.ms = started.elapsed().as_secs_f64() * 1e3;
        tracing::info!(passages = ?out.passages, terms = ?out.terms, ms = out.ms, "expanded");
        super::lock(&self.memo).expansion = Some((question.to_string(), out.clone()));
        Ok(out)
    }

    /// The reranker `retrieval.rerank = "generator"` lends the retriever.
    fn reranker(&self) -> Result<GeneratorRerank<'_>> {
        let r = &self.settings.retrieval;
        let (_, llm, params) = self.helper(r.rerank_with, "retrieval.rerank")?;
        Ok(GeneratorRerank {
            engine: self,
            llm,
            params,
            verdicts: Verdicts::of(llm),
        })
    }
}

/// A generator judging each candidate, within `retrieval.rerank_ms`.
struct GeneratorRerank<'a> {
    engine: &'a Answerer,
    llm: &'a Llm,
    params: ContextParams,
    verdicts: Verdicts,
}

impl Rescore for GeneratorRerank<'_> {
    fn candidates(&self) -> usize {
        self.engine.settings.retrieval.rerank_candidates
    }

    fn scores(&self, query: &str, passages: &[String]) -> Result<Vec<f32>> {
        if let Some((q, p, s)) = &super::lock(&self.engine.memo).scores {
            if q == query && p == passages {
                return Ok(s.clone());
            }
        }
        let deadline =
            Instant::now() + Duration::from_millis(self.engine.settings.retrieval.rerank_ms);
        let prompts = passages
            .iter()
            .map(|p| {
                let p = &p[..p.floor_char_boundary(RERANK_CHARS)];
                self.llm.chat_tokens(&rerank::messages(query, p))
            })
            .collect::<Result<Vec<_>>>()?;
        let scored = self
            .llm
            .yes_scores(&self.params, &prompts, &self.verdicts, deadline)?;
        tracing::info!(
            scored = scored.scores.len(),
            tokens = scored.tokens,
            "reranked"
        );
        let memo = (query.to_string(), passages.to_vec(), scored.scores.clone());
        super::lock(&self.engine.memo).scores = Some(memo);
        Ok(scored.scores)
    }
}

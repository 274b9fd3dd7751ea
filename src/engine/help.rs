//! The generators' help to retrieval (docs/quality.md, help from the generators): a
//! generator writes for the question before it is searched (`retrieval.expand`: a short
//! passage that would answer it, HyDE, and search terms), and judges the best fused
//! candidates after (`retrieval.rerank = "generator"`, [`crate::llm::rerank`]). Either is a
//! local model or a served one (a tier with `backend = "openai"`: the same prompts, sent
//! to the server, its judgement read from `logprobs`). The retriever searches and
//! re-orders; this module only writes and scores.

use std::cell::Cell;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::Answerer;
use crate::config::{Mode, Rerank, Tier};
use crate::llm::rerank::{self, Scored};
use crate::llm::{chat, judge::Verdicts, ContextParams, Generator, Llm, Remote, Sampling};
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
    /// Taken from [`Memo`]: `ms` was spent by an earlier retrieval, not this one.
    reused: bool,
}

/// The last question's expansion and reranking, so a second retrieval of the same question
/// (eval's ranks from the top 10 beside the packed top 5, then its answer) writes and scores
/// nothing again; each with what it cost.
#[derive(Default)]
pub(super) struct Memo {
    /// Keyed by the question and the kinds written (a vector search asks no terms).
    expansion: Option<(String, [bool; 2], Expansion)>,
    scores: Option<(String, Vec<String>, Vec<f32>, f64)>,
}

impl Answerer {
    /// Retrieves for `q` what an answer reads, with the help the settings ask of the
    /// generators.
    pub(super) fn helped(&self, q: &Query) -> Result<Retrieval> {
        let (mut out, expansion, reused_ms) =
            self.with_help(q, |h| self.retriever.retrieve(q, h))?;
        out.helped.expand_tokens = expansion.tokens;
        if expansion.reused {
            out.helped.reused_ms = reused_ms + expansion.ms;
        } else {
            out.helped.expand_ms = expansion.ms;
            out.helped.reused_ms = reused_ms;
        }
        Ok(out)
    }

    /// The ranked spans alone (`rag search`, eval's ranks), with the same help: no passages
    /// widened.
    pub(super) fn helped_ranked(&self, q: &Query) -> Result<Vec<Ranked>> {
        let ((ranked, _), ..) = self.with_help(q, |h| self.retriever.run_with(q, q.mode, h))?;
        Ok(ranked)
    }

    /// Runs `search` with what the expansion generator wrote for `q` and the reranker the
    /// settings ask for; its result, the expansion, and the reranking's time taken from
    /// [`Memo`] rather than spent.
    fn with_help<T>(
        &self,
        q: &Query,
        search: impl FnOnce(&Help<'_>) -> Result<T>,
    ) -> Result<(T, Expansion, f64)> {
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
        let found = search(&help)?;
        let reused_ms = reranker.as_ref().map_or(0.0, |r| r.reused_ms.get());
        Ok((found, expansion, reused_ms))
    }

    /// The generator of `tier` that `what` asks for, loaded (a setting's name in errors).
    fn helper(&self, tier: Tier, what: &str) -> Result<&Generator> {
        let slot = self.model(tier).with_context(|| {
            format!(
                "{what} asks the {} generator ({what}_with), which cannot be loaded; fetch it (`rag models fetch --large`) or set {what}_with to an installed one",
                tier.name()
            )
        })?;
        Ok(self.loaded(slot))
    }

    /// What the expansion generator writes for `question` (`retrieval.expand`): a passage
    /// where `mode` searches vectors, terms where it searches full text.
    fn expansion(&self, question: &str, mode: Mode) -> Result<Expansion> {
        let r = &self.settings.retrieval;
        let asked = [
            (r.expand.hyde() && mode != Mode::Text, HYDE),
            (r.expand.keywords() && mode != Mode::Vector, TERMS),
        ];
        let kinds = asked.map(|(on, _)| on);
        if kinds == [false; 2] {
            return Ok(Expansion::default());
        }
        if let Some((q, k, e)) = &super::lock(&self.memo).expansion {
            if q == question && *k == kinds {
                return Ok(Expansion {
                    reused: true,
                    ..e.clone()
                });
            }
        }
        let started = Instant::now();
        let loaded = self.helper(r.expand_with, "retrieval.expand")?;
        let instructions: Vec<&str> = asked.iter().filter(|(on, _)| *on).map(|a| a.1).collect();
        let written = match loaded {
            Generator::Local { llm, .. } => {
                self.write_local(loaded, llm, &instructions, question)?
            }
            Generator::Remote(remote) => {
                write_remote(remote, &instructions, question, r.expand_tokens)?
            }
        };
        let mut out = Expansion::default();
        for (instructions, (text, tokens)) in instructions.into_iter().zip(written) {
            out.tokens += tokens;
            let text = text.trim().to_string();
            if text.is_empty() {
                continue;
            }
            if instructions == HYDE {
                out.passages.push(text);
            } else {
                out.terms.push(text);
            }
        }
        out.ms = started.elapsed().as_secs_f64() * 1e3;
        tracing::info!(passages = ?out.passages, terms = ?out.terms, ms = out.ms, "expanded");
        super::lock(&self.memo).expansion = Some((question.to_string(), kinds, out.clone()));
        Ok(out)
    }

    /// A local generator's text for each of `instructions` about `question`, and its tokens.
    fn write_local(
        &self,
        loaded: &Generator,
        llm: &Llm,
        instructions: &[&str],
        question: &str,
    ) -> Result<Vec<(String, usize)>> {
        let params = self.window(loaded)?.0;
        let mut session = llm.session(&ContextParams {
            n_ctx: EXPAND_CTX,
            n_batch: EXPAND_BATCH,
            ..params
        })?;
        let sampling = Sampling::greedy(self.settings.retrieval.expand_tokens);
        let mut written = Vec::with_capacity(instructions.len());
        for instructions in instructions {
            let tokens = llm.chat_tokens(&chat(instructions, [question.trim()]))?;
            // The instructions come back from the persistent prompt cache after the first
            // question (a state of theirs is saved with every prompt).
            self.prefill(&mut session, loaded, &tokens, EXPAND_CTX, true, &mut |_| {
                Ok(())
            })?;
            let mut text = String::new();
            let decode = session.generate(&sampling, None, |piece| {
                text.push_str(piece);
                true
            })?;
            written.push((text, decode.tokens));
        }
        Ok(written)
    }

    /// The reranker `retrieval.rerank = "generator"` lends the retriever.
    fn reranker(&self) -> Result<GeneratorRerank<'_>> {
        let r = &self.settings.retrieval;
        let loaded = self.helper(r.rerank_with, "retrieval.rerank")?;
        let judge = match loaded {
            Generator::Local { llm, .. } => Judge::Local {
                llm,
                params: self.window(loaded)?.0,
                verdicts: Verdicts::of(llm),
            },
            Generator::Remote(remote) => Judge::Remote {
                remote,
                parallel: self.settings.llm.parallel.max(1),
            },
        };
        Ok(GeneratorRerank {
            engine: self,
            judge,
            reused_ms: Cell::new(0.0),
        })
    }
}

/// A generator judging each candidate, within `retrieval.rerank_ms`.
struct GeneratorRerank<'a> {
    engine: &'a Answerer,
    judge: Judge<'a>,
    /// What the scores taken from [`Memo`] cost when they were computed.
    reused_ms: Cell<f64>,
}

/// Who reads the candidates: a local model in one shared context, or a server asked
/// `llm.parallel` candidates at a time.
enum Judge<'a> {
    Local {
        llm: &'a Llm,
        params: ContextParams,
        verdicts: Verdicts,
    },
    Remote {
        remote: &'a Remote,
        parallel: usize,
    },
}

impl Judge<'_> {
    fn scores(&self, query: &str, passages: &[String], deadline: Instant) -> Result<Scored> {
        // What a judge reads of each candidate: its heading and first characters.
        let heads: Vec<&str> = passages
            .iter()
            .map(|p| &p[..p.floor_char_boundary(RERANK_CHARS)])
            .collect();
        match self {
            Judge::Local {
                llm,
                params,
                verdicts,
            } => {
                let prompts = heads
                    .iter()
                    .map(|p| llm.chat_tokens(&rerank::messages(query, p)))
                    .collect::<Result<Vec<_>>>()?;
                llm.yes_scores(params, &prompts, verdicts, deadline)
            }
            Judge::Remote { remote, parallel } => {
                remote_scores(remote, *parallel, query, &heads, deadline)
            }
        }
    }
}

impl Rescore for GeneratorRerank<'_> {
    fn candidates(&self) -> usize {
        self.engine.settings.retrieval.rerank_candidates
    }

    fn scores(&self, query: &str, passages: &[String]) -> Result<Vec<f32>> {
        if let Some((q, p, s, ms)) = &super::lock(&self.engine.memo).scores {
            if q == query && p == passages {
                self.reused_ms.set(*ms);
                return Ok(s.clone());
            }
        }
        let started = Instant::now();
        let deadline = started + Duration::from_millis(self.engine.settings.retrieval.rerank_ms);
        let scored = self.judge.scores(query, passages, deadline)?;
        tracing::info!(
            scored = scored.scores.len(),
            tokens = scored.tokens,
            "reranked"
        );
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let memo = (
            query.to_string(),
            passages.to_vec(),
            scored.scores.clone(),
            ms,
        );
        super::lock(&self.engine.memo).scores = Some(memo);
        Ok(scored.scores)
    }
}

/// A server's text for each of `instructions` about `question`, and its tokens: asked
/// together, so a server with several slots writes them side by side.
fn write_remote(
    remote: &Remote,
    instructions: &[&str],
    question: &str,
    max_tokens: u32,
) -> Result<Vec<(String, usize)>> {
    let sampling = Sampling::greedy(max_tokens);
    let one = |instructions: &str| -> Result<(String, usize)> {
        let messages = chat(instructions, [question.trim()]);
        let mut text = String::new();
        let (_, decode) = remote.generate(&messages, 0, &sampling, |piece| {
            text.push_str(piece);
            true
        })?;
        Ok((text, decode.tokens))
    };
    std::thread::scope(|s| {
        let asked: Vec<_> = instructions.iter().map(|i| s.spawn(|| one(i))).collect();
        asked.into_iter().map(joined).collect()
    })
}

/// P(yes) of each passage from a server, `parallel` requests in flight at a time, until
/// `deadline` (checked between rounds; the first round always runs): a prefix of the list.
fn remote_scores(
    remote: &Remote,
    parallel: usize,
    query: &str,
    passages: &[&str],
    deadline: Instant,
) -> Result<Scored> {
    let mut out = Scored::default();
    for round in passages.chunks(parallel) {
        if !out.scores.is_empty() && Instant::now() >= deadline {
            break;
        }
        let judged: Vec<(f32, usize)> = std::thread::scope(|s| {
            let asked: Vec<_> = round
                .iter()
                .map(|p| s.spawn(|| remote.p_yes(&rerank::messages(query, p))))
                .collect();
            asked.into_iter().map(joined).collect::<Result<_>>()
        })?;
        for (p, tokens) in judged {
            out.scores.push(p);
            out.tokens += tokens;
        }
    }
    Ok(out)
}

/// A request thread's result; a panic in one is an error, not a crash of the answer.
fn joined<T>(h: std::thread::ScopedJoinHandle<'_, Result<T>>) -> Result<T> {
    h.join().unwrap_or_else(|_| {
        Err(anyhow::anyhow!(
            "a request to the generator server panicked"
        ))
    })
}

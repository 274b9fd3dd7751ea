//! The engine's one retrieval step for an answer: the ranked spans and the passages the
//! prompt reads (widened by the retriever, cut to their closest sentences here where
//! `retrieval.compress` asks), and the abstention decided on them, before any routing.

use std::time::Instant;

use anyhow::Result;

use super::{abstained, load, Answer, Answerer, Event, On, Retrieved, SoFar, Timings};
use crate::ask::{compress, should_abstain};
use crate::config::Tier;
use crate::retrieve::{Query, Ranked, Retrieval};

impl Answerer {
    /// What an answer to `q` reads, in one call: the ranked spans and the widened (and,
    /// where set, compressed) passages; `question` is what the prompt asks, which
    /// compression keeps the sentences closest to.
    pub fn retrieval(&self, q: &Query, question: &str) -> Result<Retrieval> {
        let mut r = self.helped(q)?;
        self.compress(question, &mut r.passages)?;
        if let Some(fewer) = &mut r.fewer {
            self.compress(question, fewer)?;
        }
        Ok(r)
    }

    /// Whether generator `tier` reads the passages of the best `retrieval.large_top_k`
    /// spans only: the large one does (fewer prompt tokens to prefill than all five, and at
    /// least as many answers right on both parts of the dev set, docs/quality.md).
    pub(super) fn reads_fewer(tier: Tier) -> bool {
        tier == Tier::Large
    }

    /// Each passage cut to the sentences closest to the question (`retrieval.compress`).
    fn compress(&self, question: &str, passages: &mut [Ranked]) -> Result<()> {
        let n = self.settings.retrieval.compress;
        if n == 0 {
            return Ok(());
        }
        let units: Vec<_> = passages
            .iter()
            .map(|r| compress::units(&r.hit.text))
            .collect();
        let mut texts = Vec::new();
        for (r, u) in passages.iter().zip(&units) {
            texts.extend(u.iter().map(|x| r.hit.text[x.clone()].trim().to_string()));
        }
        let Some((question, vectors)) = self.retriever.embed(question, &texts)? else {
            return Ok(());
        };
        let mut at = 0;
        for (r, u) in passages.iter_mut().zip(&units) {
            let sims: Vec<f32> = vectors[at..at + u.len()]
                .iter()
                .map(|v| compress::cosine(&question, v))
                .collect();
            at += u.len();
            if u.len() > n + 1 {
                let keep = compress::choose(&r.hit.text, u, &sims, n);
                r.hit.text = compress::compress(&r.hit.text, u, &keep);
            }
        }
        Ok(())
    }

    /// Retrieves for `q` and decides whether to abstain: the retrieval, or the abstention
    /// as a finished answer.
    pub(super) fn retrieve_checked(
        &self,
        q: &Query,
        question: &str,
        on: On<'_>,
    ) -> Result<Result<Retrieved, Answer>> {
        let started = Instant::now();
        let meter = load::Meter::start();
        let mode = q.mode;
        let retrieval = self.retrieval(q, question)?;
        // From the question's arrival to the passages, compression included.
        let retrieval_ms = started.elapsed().as_secs_f64() * 1e3;
        let ranked = &retrieval.ranked;
        if q.verbose {
            on(Event::Ranked {
                ranked,
                mode,
                filter: q.filter.as_deref(),
            })?;
        }
        let h = retrieval.helped;
        let mut timings = Timings {
            retrieval_ms,
            expand_ms: h.expand_ms,
            expand_tokens: h.expand_tokens,
            rerank_ms: h.rerank_ms,
            reranked: h.reranked,
            help_reused_ms: h.reused_ms,
            ..Timings::default()
        };
        if should_abstain(ranked, mode, self.settings.retrieval.min_similarity) {
            timings.total_ms = started.elapsed().as_secs_f64() * 1e3;
            return Ok(Err(abstained(question, timings, ranked)));
        }
        Ok(Ok(Retrieved {
            retrieval,
            so_far: SoFar {
                timings,
                started,
                meter,
            },
        }))
    }
}

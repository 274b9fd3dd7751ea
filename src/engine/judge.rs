//! The generator as a judge of cited sentences: each (source, sentence) pair scored by a
//! local generator in a context of its own, the source first so that sentences citing the
//! same source share its keys and values. `llm.judge_citations` asks it of every answer's
//! citations that the words support; `rag eval --cite-judge` of the labelled sentences.

use anyhow::{bail, Result};

use super::Answerer;
use crate::ask::cite::{self, Citation};
use crate::config::Tier;
use crate::llm::{judge, ContextParams, Llm};

/// The most of a cited source the judge reads: the lines around the sentence's words
/// (`cite::passage`). Its time grows with the length; see docs/quality.md.
pub(crate) const JUDGE_CHARS: usize = 800;

/// The generator that judges its own answers' citations.
const JUDGE_TIER: Tier = Tier::Large;

/// The judge's context: the instructions, `JUDGE_CHARS` of source and a sentence fit.
const JUDGE_CTX: u32 = 1024;

impl Answerer {
    /// P(yes) for each `(source, sentence)` pair from the generator of `tier`, calling
    /// `done` after each (progress).
    pub fn judge(
        &self,
        tier: Tier,
        pairs: &[(&str, &str)],
        done: impl FnMut(usize),
    ) -> Result<Vec<f32>> {
        let i = self.model(tier)?;
        let loaded = self.loaded(i);
        let Some((llm, _)) = loaded.local() else {
            bail!(
                "the {} generator is served remotely; the citation judge reads a local model's logits",
                tier.name()
            );
        };
        let (params, _) = self.window(loaded)?;
        // Whole sources may be longer than the judge's own window.
        let n_ctx = params.n_ctx.max(JUDGE_CTX);
        scores(llm, &ContextParams { n_ctx, ..params }, pairs, done)
    }

    /// `llm.judge_citations`: where the large generator wrote the answer in this process,
    /// asks it about each citation the words support, and marks one unsupported below
    /// `llm.judge_min`. Returns the milliseconds it took; a judge that fails leaves the
    /// words' verdicts. A smaller generator is no judge: the 135M ranks the labelled
    /// sentences worse than chance, and loading the 1.5B for it would spend the time the
    /// route saved (docs/quality.md, the citation check).
    pub(super) fn judge_citations(
        &self,
        model: usize,
        tier: Tier,
        citations: &mut [Citation],
    ) -> f64 {
        let started = std::time::Instant::now();
        let loaded = self.loaded(model);
        let asked = self.settings.llm.judge_citations && tier == JUDGE_TIER;
        let (Some((llm, _)), true) = (loaded.local(), asked) else {
            return 0.0;
        };
        let asked: Vec<usize> = (0..citations.len())
            .filter(|&i| citations[i].supported)
            .collect();
        if asked.is_empty() {
            return 0.0;
        }
        let passages: Vec<String> = asked
            .iter()
            .map(|&i| cite::passage(&citations[i].claim, &citations[i].cited_text, JUDGE_CHARS))
            .collect();
        let pairs: Vec<(&str, &str)> = asked
            .iter()
            .zip(&passages)
            .map(|(&i, p)| (p.as_str(), citations[i].claim.as_str()))
            .collect();
        let params = self.window(loaded).map(|(p, _)| ContextParams {
            n_ctx: JUDGE_CTX,
            ..p
        });
        match params.and_then(|p| scores(llm, &p, &pairs, |_| {})) {
            Ok(p_yes) => {
                for (&i, p) in asked.iter().zip(p_yes) {
                    let c = &mut citations[i];
                    c.judge = Some(p);
                    if p < self.settings.llm.judge_min {
                        c.supported = false;
                        c.quote = None;
                    }
                }
            }
            Err(e) => tracing::warn!("the citation judge failed, the words' verdicts stand: {e:#}"),
        }
        started.elapsed().as_secs_f64() * 1e3
    }
}

/// P(yes) for each pair on one session of `llm`.
fn scores(
    llm: &Llm,
    params: &ContextParams,
    pairs: &[(&str, &str)],
    mut done: impl FnMut(usize),
) -> Result<Vec<f32>> {
    let mut session = llm.session(params)?;
    let verdicts = judge::Verdicts::of(llm);
    let mut out = Vec::with_capacity(pairs.len());
    for (k, (source, sentence)) in pairs.iter().enumerate() {
        out.push(judge::support(&mut session, &verdicts, source, sentence)?);
        done(k + 1);
    }
    Ok(out)
}

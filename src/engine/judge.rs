//! The generator as a judge of cited sentences: each (sentence, cited text) pair scored by a
//! local generator in a small context of its own, on the lines of the cited text around the
//! sentence's words. `llm.judge_citations` asks it of every answer's citations that the
//! words support; `rag eval --cite-judge` of the labelled sentences, read the same way.

use anyhow::{bail, Result};

use super::Answerer;
use crate::ask::cite::{self, Citation};
use crate::config::Tier;
use crate::llm::{judge, ContextParams, Llm};

/// The most of a cited source the judge reads: the lines around the sentence's words
/// (`cite::passage`). Its time grows with the length; see docs/quality.md.
const JUDGE_CHARS: usize = 800;

/// The generator that judges its own answers' citations.
const JUDGE_TIER: Tier = Tier::Large;

/// The judge's context: the instructions, `JUDGE_CHARS` of source and a sentence fit.
const JUDGE_CTX: u32 = 1024;

impl Answerer {
    /// P(yes) for each `(sentence, cited text)` pair from the generator of `tier`, read as
    /// `rag ask` reads it, calling `done` after each (progress).
    pub fn judge(
        &self,
        tier: Tier,
        cited: &[(&str, &str)],
        done: impl FnMut(usize),
    ) -> Result<Vec<f32>> {
        let loaded = self.loaded(self.model(tier)?);
        let Some((llm, _)) = loaded.local() else {
            bail!(
                "the {} generator is served remotely; the citation judge reads a local model's logits",
                tier.name()
            );
        };
        scores(llm, &self.judge_params(loaded)?, cited, done)
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
        let cited: Vec<(&str, &str)> = asked
            .iter()
            .map(|&i| {
                (
                    citations[i].claim.as_str(),
                    citations[i].cited_text.as_str(),
                )
            })
            .collect();
        let p_yes = self
            .judge_params(loaded)
            .and_then(|p| scores(llm, &p, &cited, |_| {}));
        match p_yes {
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

    /// The judge's context: the generator's threads and batch, a window of its own.
    fn judge_params(&self, loaded: &crate::llm::Generator) -> Result<ContextParams> {
        let (params, _) = self.window(loaded)?;
        Ok(ContextParams {
            n_ctx: JUDGE_CTX,
            ..params
        })
    }
}

/// P(yes) for each `(sentence, cited text)` pair on one session of `llm`, each sentence
/// judged on the lines of its cited text around its words (`cite::passage`).
fn scores(
    llm: &Llm,
    params: &ContextParams,
    cited: &[(&str, &str)],
    mut done: impl FnMut(usize),
) -> Result<Vec<f32>> {
    let mut session = llm.session(params)?;
    let verdicts = judge::Verdicts::of(llm);
    let mut out = Vec::with_capacity(cited.len());
    for (k, (sentence, text)) in cited.iter().enumerate() {
        let source = cite::passage(sentence, text, JUDGE_CHARS);
        out.push(judge::support(&mut session, &verdicts, &source, sentence)?);
        done(k + 1);
    }
    Ok(out)
}

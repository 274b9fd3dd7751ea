//! What this machine measured of each local generator: its prefill and decode speed and
//! load time over its last answers, and how busy the machine was meanwhile, kept in
//! `speeds.json` in the index's state folder. `auto` routing reads it to keep the best
//! generator that answers within `llm.answer_budget_s`; `rag doctor` shows it. Every local
//! answer adds a sample, so the figures follow the machine (new threads, a new build)
//! without a separate benchmark; a sample taken while other processes held the CPU
//! ([`load::QUIET_SHARE`]) counts only where no quiet one is kept. A lost or damaged file
//! only means the next answer measures again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::load::{self, QUIET_SHARE};
use crate::ask::route::{
    Measure, Speed, RETRY_AFTER_S, TYPICAL_ANSWER_TOKENS, TYPICAL_PROMPT_TOKENS,
};

/// Samples kept per generator, of quiet and of busy ones each. Routing reads the fastest of
/// the quiet ones: the fastest recent answer is the machine's own speed.
const KEEP: usize = 5;
/// A prefill of fewer new tokens, or an answer of fewer tokens, says little about speed.
const MIN_PREFILL_TOKENS: usize = 64;
const MIN_DECODE_TOKENS: usize = 8;
/// How a smaller generator's rates grow with how much smaller it is. Far from 1: a small
/// model's narrow layers use the cores worse (SmolLM2-135M has a thirteenth of the 1.5B's
/// parameters and prefills 1.4 to 1.9 times as fast, on the two hosts measured). The least
/// of the exponents fitted on the two hosts (docs/configuration.md, routing), so a
/// prediction errs slow: a smaller generator is taken for time only when even the slow
/// estimate fits.
pub const PREFILL_EXPONENT: f64 = 0.12;
pub const DECODE_EXPONENT: f64 = 0.43;
/// The largest speeds file read: five samples of three generators are under 4 KB.
const MAX_FILE: u64 = 1 << 20;

/// One answer's figures.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Sample {
    pub prefill_tok_per_s: Option<f64>,
    pub decode_tok_per_s: Option<f64>,
    /// Loading the model, when this answer's process loaded it.
    pub load_ms: Option<f64>,
    /// When it was measured (seconds since the Unix epoch).
    #[serde(default)]
    pub at: Option<u64>,
    /// The share of the machine's CPU time other processes used meanwhile (0..=1); none for
    /// samples from before it was measured, or where it cannot be.
    #[serde(default)]
    pub others: Option<f64>,
}

impl Sample {
    /// The figures of an answer that prefilled `prefilled` new tokens in `prefill_ms` and
    /// generated `generated` in `decode_ms`; only the parts long enough to measure.
    pub fn of(
        (prefilled, prefill_ms): (usize, f64),
        (generated, decode_ms): (usize, f64),
        load_ms: Option<f64>,
        others: Option<f64>,
    ) -> Sample {
        let rate =
            |n: usize, min: usize, ms: f64| (n >= min && ms > 0.0).then(|| n as f64 * 1e3 / ms);
        Sample {
            prefill_tok_per_s: rate(prefilled, MIN_PREFILL_TOKENS, prefill_ms),
            decode_tok_per_s: rate(generated, MIN_DECODE_TOKENS, decode_ms),
            load_ms,
            at: Some(now()),
            others,
        }
    }

    /// Taken while other processes left the machine to rag. A sample from before the load
    /// was measured is not known to be quiet.
    pub fn quiet(&self) -> bool {
        self.others.is_some_and(|o| o <= QUIET_SHARE) || (self.others.is_none() && !load::known())
    }

    fn is_empty(&self) -> bool {
        self.prefill_tok_per_s.is_none()
            && self.decode_tok_per_s.is_none()
            && self.load_ms.is_none()
    }
}

/// The best of a generator's kept samples: the fastest prefill and decode, the quickest load,
/// of the quiet samples where there are any.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Figures {
    pub prefill_tok_per_s: f64,
    pub decode_tok_per_s: f64,
    pub load_ms: f64,
    /// Answers the figures come from.
    pub answers: usize,
    /// Seconds since the last of them was measured (None for samples from before the time
    /// was recorded).
    pub age_s: Option<u64>,
    /// Taken on a quiet machine: the machine's own speed. Otherwise only a bound: the
    /// generator is at least this fast.
    pub quiet: bool,
    /// The most of the machine other processes used during these answers, where known.
    pub others: Option<f64>,
}

impl Figures {
    /// Seconds a typical question takes: loading, prefilling a typical prompt and writing a
    /// typical answer ([`TYPICAL_PROMPT_TOKENS`], [`TYPICAL_ANSWER_TOKENS`]).
    pub fn typical_s(&self) -> f64 {
        self.load_ms / 1e3
            + TYPICAL_PROMPT_TOKENS / self.prefill_tok_per_s
            + TYPICAL_ANSWER_TOKENS / self.decode_tok_per_s
    }

    /// What another generator would do on this machine, from these figures of `from` and
    /// the two files: prefill rates go with a power of the parameters' ratio, decode rates
    /// with a power of the bytes' ratio ([`PREFILL_EXPONENT`], [`DECODE_EXPONENT`]), and
    /// loading (reading the file) with the bytes. docs/configuration.md gives the error of
    /// this on the machines measured.
    pub fn predict(&self, from: &Weights, to: &Weights) -> Figures {
        let params = from.params as f64 / to.params.max(1) as f64;
        let bytes = from.bytes as f64 / to.bytes.max(1) as f64;
        Figures {
            prefill_tok_per_s: self.prefill_tok_per_s * params.powf(PREFILL_EXPONENT),
            decode_tok_per_s: self.decode_tok_per_s * bytes.powf(DECODE_EXPONENT),
            load_ms: self.load_ms / bytes,
            answers: 0,
            ..*self
        }
    }
}

/// What prediction needs of a GGUF: its weights' count and its size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weights {
    pub params: u64,
    pub bytes: u64,
}

impl Weights {
    /// From the file's header (no weights loaded); none for a file that is not a GGUF.
    pub fn of(model: &Path) -> Option<Weights> {
        let header = crate::gguf::read(model).ok()?;
        let bytes = std::fs::metadata(model).ok()?.len();
        (header.parameters > 0).then_some(Weights {
            params: header.parameters,
            bytes,
        })
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    /// Samples by generator ([`key`]), oldest first.
    models: BTreeMap<String, Vec<Sample>>,
    /// When the route's note on a generator (over the budget, or passed over) was last
    /// shown, by generator: shown once a day at most.
    #[serde(default)]
    noted: BTreeMap<String, u64>,
}

/// How often a route's note is shown again.
const NOTE_EVERY_S: u64 = 24 * 3600;

/// The speeds file of one index.
pub struct Speeds {
    path: PathBuf,
}

impl Speeds {
    pub fn in_dir(state_dir: &Path) -> Speeds {
        Speeds {
            path: state_dir.join("speeds.json"),
        }
    }

    /// The file as it is now: read once per routing decision, however many generators
    /// are asked about. Only a regular file of a bounded size is read: anything else (a
    /// FIFO, a device, a link to one) is an empty record, and the next answer rewrites it.
    pub fn read(&self) -> Record {
        Record(
            crate::atomic::read_bounded(&self.path, MAX_FILE)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default(),
        )
    }

    /// [`Record::figures`] of the file as it is now.
    #[cfg(test)]
    fn figures(&self, model: &Path) -> Option<Figures> {
        self.read().figures(model)
    }

    /// [`Record::speed`] of the file as it is now.
    #[cfg(test)]
    fn speed(&self, model: &Path) -> Speed {
        self.read().speed(model, || true)
    }

    /// Adds one answer's sample for `model`. Best effort: a speeds file that cannot be
    /// written costs a later measurement, never an answer.
    pub fn record(&self, model: &Path, sample: Sample) {
        let Some(k) = key(model) else { return };
        if sample.is_empty() {
            return;
        }
        self.update(|stored| {
            let samples = stored.models.entry(k).or_default();
            samples.push(sample);
            // The last KEEP of each kind: busy answers never push the quiet ones out.
            let mut kept = Vec::new();
            for quiet in [true, false] {
                let of_kind: Vec<Sample> = samples
                    .iter()
                    .filter(|s| s.quiet() == quiet)
                    .cloned()
                    .collect();
                let extra = of_kind.len().saturating_sub(KEEP);
                kept.extend(of_kind.into_iter().skip(extra));
            }
            kept.sort_by_key(|s| s.at.unwrap_or(0));
            *samples = kept;
        });
    }

    /// Whether the route's note on `model` is due (not shown in the last day), marking it
    /// shown; false where the file cannot be written (no note every answer then).
    pub fn note_due(&self, model: &Path) -> bool {
        let Some(k) = key(model) else { return false };
        let due = self
            .read()
            .0
            .noted
            .get(&k)
            .is_none_or(|&at| now().saturating_sub(at) >= NOTE_EVERY_S);
        due && self.update(|stored| {
            stored.noted.insert(k, now());
        })
    }

    fn update(&self, change: impl FnOnce(&mut Stored)) -> bool {
        let Record(mut stored) = self.read();
        change(&mut stored);
        let written = serde_json::to_vec_pretty(&stored)
            .map_err(anyhow::Error::from)
            .and_then(|b| crate::atomic::write(&self.path, &b));
        if let Err(e) = &written {
            tracing::debug!("generator speeds not saved: {e:#}");
        }
        written.is_ok()
    }
}

/// The samples of a speeds file, read.
pub struct Record(Stored);

impl Record {
    /// The figures measured for the generator in `model`, once prefill and decode both
    /// have a sample: of its quiet samples where any has both, else of all.
    pub fn figures(&self, model: &Path) -> Option<Figures> {
        let samples = self.0.models.get(&key(model)?)?;
        let quiet: Vec<&Sample> = samples.iter().filter(|s| s.quiet()).collect();
        best(&quiet, true).or_else(|| best(&samples.iter().collect::<Vec<_>>(), false))
    }

    /// The quiet figures of `model` alone: what a prediction may start from.
    pub fn quiet_figures(&self, model: &Path) -> Option<Figures> {
        self.figures(model).filter(|f| f.quiet)
    }

    /// What routing knows of the local generator in `model` from its own answers;
    /// `quiet_now` is asked only of an old figure (whether to measure it again).
    pub fn speed(&self, model: &Path, quiet_now: impl FnOnce() -> bool) -> Speed {
        if !model.is_file() {
            return Speed::Missing;
        }
        match self.figures(model) {
            Some(f) => Speed::Measured(Measure {
                typical_s: f.typical_s(),
                quiet: f.quiet,
                retry: f.quiet && f.age_s.is_some_and(|a| a > RETRY_AFTER_S) && quiet_now(),
            }),
            None => Speed::Unmeasured,
        }
    }
}

fn best(samples: &[&Sample], quiet: bool) -> Option<Figures> {
    let best = |f: fn(&Sample) -> Option<f64>, fastest: fn(f64, f64) -> f64| {
        samples.iter().filter_map(|s| f(s)).reduce(fastest)
    };
    Some(Figures {
        prefill_tok_per_s: best(|s| s.prefill_tok_per_s, f64::max)?,
        decode_tok_per_s: best(|s| s.decode_tok_per_s, f64::max)?,
        load_ms: best(|s| s.load_ms, f64::min).unwrap_or(0.0),
        answers: samples.len(),
        age_s: samples
            .iter()
            .filter_map(|s| s.at)
            .max()
            .map(|at| now().saturating_sub(at)),
        quiet,
        others: best(|s| s.others, f64::max),
    })
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A generator's key: its file's full path and size, so a file replaced by another (a new
/// quantization under the same name) starts over.
fn key(model: &Path) -> Option<String> {
    let meta = std::fs::metadata(model).ok()?;
    let path = std::fs::canonicalize(model).ok()?;
    Some(format!("{} {}", path.display(), meta.len()))
}

#[cfg(test)]
mod tests;

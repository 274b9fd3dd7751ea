//! What this machine measured of each local generator: its prefill and decode speed and
//! load time over its last answers, kept in `speeds.json` in the index's state folder.
//! `auto` routing reads it to keep the best generator that answers within
//! `llm.answer_budget_s`; `rag doctor` shows it. Every local answer adds a sample, so the
//! figures follow the machine (a busy evening, new threads) without a separate benchmark.
//! A lost or damaged file only means the next answer measures again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ask::route::{Speed, RETRY_AFTER_S, TYPICAL_ANSWER_TOKENS, TYPICAL_PROMPT_TOKENS};

/// Samples kept per generator. Routing reads the fastest of them: a busy machine only ever
/// slows an answer down, so the fastest recent answer is the machine's own speed, and one
/// answer on a busy moment does not move the route.
const KEEP: usize = 5;
/// A prefill of fewer new tokens, or an answer of fewer tokens, says little about speed.
const MIN_PREFILL_TOKENS: usize = 64;
const MIN_DECODE_TOKENS: usize = 8;

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
}

impl Sample {
    /// The figures of an answer that prefilled `prefilled` new tokens in `prefill_ms` and
    /// generated `generated` in `decode_ms`; only the parts long enough to measure.
    pub fn of(
        (prefilled, prefill_ms): (usize, f64),
        (generated, decode_ms): (usize, f64),
        load_ms: Option<f64>,
    ) -> Sample {
        let rate =
            |n: usize, min: usize, ms: f64| (n >= min && ms > 0.0).then(|| n as f64 * 1e3 / ms);
        Sample {
            prefill_tok_per_s: rate(prefilled, MIN_PREFILL_TOKENS, prefill_ms),
            decode_tok_per_s: rate(generated, MIN_DECODE_TOKENS, decode_ms),
            load_ms,
            at: Some(now()),
        }
    }

    fn is_empty(&self) -> bool {
        self.prefill_tok_per_s.is_none()
            && self.decode_tok_per_s.is_none()
            && self.load_ms.is_none()
    }
}

/// The best of a generator's kept samples: the fastest prefill and decode, the quickest load.
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
}

impl Figures {
    /// Seconds a typical question takes: loading, prefilling a typical prompt and writing a
    /// typical answer ([`TYPICAL_PROMPT_TOKENS`], [`TYPICAL_ANSWER_TOKENS`]).
    pub fn typical_s(&self) -> f64 {
        self.load_ms / 1e3
            + TYPICAL_PROMPT_TOKENS / self.prefill_tok_per_s
            + TYPICAL_ANSWER_TOKENS / self.decode_tok_per_s
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    /// Samples by generator ([`key`]), oldest first.
    models: BTreeMap<String, Vec<Sample>>,
}

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
    /// are asked about.
    pub fn read(&self) -> Record {
        Record(
            std::fs::read(&self.path)
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
        self.read().speed(model)
    }

    /// Adds one answer's sample for `model`. Best effort: a speeds file that cannot be
    /// written costs a later measurement, never an answer.
    pub fn record(&self, model: &Path, sample: Sample) {
        let Some(k) = key(model) else { return };
        if sample.is_empty() {
            return;
        }
        let Record(mut stored) = self.read();
        let samples = stored.models.entry(k).or_default();
        samples.push(sample);
        let extra = samples.len().saturating_sub(KEEP);
        samples.drain(..extra);
        let written = serde_json::to_vec_pretty(&stored)
            .map_err(anyhow::Error::from)
            .and_then(|b| crate::atomic::write(&self.path, &b));
        if let Err(e) = written {
            tracing::debug!("generator speeds not saved: {e:#}");
        }
    }
}

/// The samples of a speeds file, read.
pub struct Record(Stored);

impl Record {
    /// The figures measured for the generator in `model`, once prefill and decode both
    /// have a sample.
    pub fn figures(&self, model: &Path) -> Option<Figures> {
        let samples = self.0.models.get(&key(model)?)?;
        let best = |f: fn(&Sample) -> Option<f64>, fastest: fn(f64, f64) -> f64| {
            samples.iter().filter_map(f).reduce(fastest)
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
        })
    }

    /// What routing knows of the local generator in `model`.
    pub fn speed(&self, model: &Path) -> Speed {
        if !model.is_file() {
            return Speed::Missing;
        }
        match self.figures(model) {
            Some(f) if f.age_s.is_some_and(|a| a > RETRY_AFTER_S) => Speed::Stale(f.typical_s()),
            Some(f) => Speed::Typical(f.typical_s()),
            None => Speed::Unmeasured,
        }
    }
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
mod tests {
    use super::*;

    #[test]
    fn the_fastest_of_the_last_answers_gives_the_typical_time() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.gguf");
        std::fs::write(&model, b"GGUF").unwrap();
        let speeds = Speeds::in_dir(dir.path());
        assert_eq!(speeds.speed(&model), Speed::Unmeasured);
        assert_eq!(speeds.speed(&dir.path().join("none.gguf")), Speed::Missing);
        // Too short to measure: nothing kept.
        speeds.record(&model, Sample::of((10, 100.0), (3, 100.0), None));
        assert_eq!(speeds.speed(&model), Speed::Unmeasured);
        // 1,000 tokens at 100 tok/s, 150 at 25 tok/s, a second's load: 17 s.
        speeds.record(
            &model,
            Sample::of((500, 5_000.0), (50, 2_000.0), Some(1_000.0)),
        );
        let f = speeds.figures(&model).unwrap();
        assert_eq!((f.prefill_tok_per_s, f.decode_tok_per_s), (100.0, 25.0));
        assert!((f.typical_s() - 17.0).abs() < 1e-9, "{f:?}");
        // A slow answer (a busy machine) does not move it; a faster one does.
        speeds.record(&model, Sample::of((500, 50_000.0), (50, 20_000.0), None));
        assert_eq!(speeds.figures(&model).unwrap().prefill_tok_per_s, 100.0);
        speeds.record(&model, Sample::of((500, 2_500.0), (50, 1_000.0), None));
        let f = speeds.figures(&model).unwrap();
        assert_eq!((f.prefill_tok_per_s, f.decode_tok_per_s), (200.0, 50.0));
        assert_eq!(f.load_ms, 1_000.0, "the quickest load");
        assert!(f.age_s.is_some_and(|a| a < 60), "just measured: {f:?}");
        // Only the last five are kept; a replaced file starts over.
        for _ in 0..KEEP {
            speeds.record(&model, Sample::of((500, 50_000.0), (50, 20_000.0), None));
        }
        assert_eq!(speeds.figures(&model).unwrap().prefill_tok_per_s, 10.0);
        std::fs::write(&model, b"GGUF and more").unwrap();
        assert_eq!(speeds.speed(&model), Speed::Unmeasured);
        // A damaged file is an empty record.
        std::fs::write(dir.path().join("speeds.json"), b"{not json").unwrap();
        assert_eq!(speeds.speed(&model), Speed::Unmeasured);
    }

    #[test]
    fn a_measure_older_than_an_hour_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.gguf");
        std::fs::write(&model, b"GGUF").unwrap();
        let speeds = Speeds::in_dir(dir.path());
        let mut old = Sample::of((500, 5_000.0), (50, 2_000.0), None);
        old.at = Some(now() - RETRY_AFTER_S - 60);
        speeds.record(&model, old.clone());
        assert_eq!(speeds.speed(&model), Speed::Stale(16.0));
        // Samples from before the time was kept are not stale.
        old.at = None;
        std::fs::remove_file(dir.path().join("speeds.json")).unwrap();
        speeds.record(&model, old);
        assert_eq!(speeds.speed(&model), Speed::Typical(16.0));
        // A new measure makes it current again.
        speeds.record(&model, Sample::of((500, 5_000.0), (50, 2_000.0), None));
        assert_eq!(speeds.speed(&model), Speed::Typical(16.0));
    }
}

//! Which generator answers, pure. `small`, `medium` and `large` are the user's choice; `auto`
//! (the default) takes the best installed generator, and steps down to a smaller one only on
//! evidence: the best one measured on a quiet machine over `llm.answer_budget_s`, and the
//! smaller one known to fit, measured here or predicted from the larger one's measured
//! throughput and the two files ([`Speed::Predicted`]). A generator never measured here is
//! never tried as a guess when a larger one is known; a figure taken while other processes
//! held the CPU is not the machine's speed and moves nothing; when nothing fits, the best
//! installed generator answers and the route says how long it takes and what trades quality
//! for time ([`Route::note`]).
//!
//! `llm.route_similarity` (off by default) adds the former per-question rule on top: a
//! question whose best span is at least that similar goes to the small generator. Measured
//! on the SQLite dev set it kept 84% of the 1.5B's keywords at 84% of its time (0.70), a
//! worse trade than the 1.5B alone when it fits the budget (docs/quality.md: routing).

use crate::config::{Route as ChosenRoute, Tier};

use serde::{Deserialize, Serialize};

/// What a question needs from its generator's speed: the prompt tokens a typical question
/// prefills and the tokens of a typical answer. From the SQLite dev set with the 1.5B
/// (2026-12-04): 1,185 prompt tokens p50, of which the shared instruction prefix (about
/// 180) comes from the prompt cache; answers of 100 to 200 tokens.
pub const TYPICAL_PROMPT_TOKENS: f64 = 1_000.0;
pub const TYPICAL_ANSWER_TOKENS: f64 = 150.0;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Route {
    /// `small`, `medium` or `large`
    pub model: Tier,
    pub reason: String,
    /// For a person, once: the route answers with a generator over the budget, or stepped
    /// down for time; how long it takes and which setting trades quality for time.
    #[serde(skip)]
    pub note: Option<String>,
}

/// What routing knows of a generator that can answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Speed {
    /// Its file is missing (or it is otherwise unusable): never chosen by `auto`.
    Missing,
    /// Present but not measured on this machine yet (or on a server, whose speed is its own).
    Unmeasured,
    /// Measured by its own answers here.
    Measured(Measure),
    /// Not measured on a quiet machine, but predicted from `from`, a larger generator that
    /// was: its throughput scaled by the two files' parameters and bytes.
    Predicted { typical_s: f64, from: Tier },
}

/// A generator's typical question, measured here.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measure {
    /// Seconds a typical question takes ([`TYPICAL_PROMPT_TOKENS`], [`TYPICAL_ANSWER_TOKENS`]).
    pub typical_s: f64,
    /// Taken while the machine was quiet. A figure taken while other processes held the CPU
    /// only says the generator is at least this fast.
    pub quiet: bool,
    /// Over an hour old, and the machine is quiet now: one that was over the budget is
    /// measured again by this answer, so an old figure does not pin `auto` for good.
    pub retry: bool,
}

impl Speed {
    /// Measured on a quiet machine: `typical_s`, for a figure that is the machine's own.
    #[cfg(test)]
    pub fn quiet(typical_s: f64) -> Speed {
        Speed::Measured(Measure {
            typical_s,
            quiet: true,
            retry: false,
        })
    }

    /// A typical question's seconds where known (measured, however, or predicted).
    pub fn seconds(self) -> Option<f64> {
        match self {
            Speed::Measured(m) => Some(m.typical_s),
            Speed::Predicted { typical_s, .. } => Some(typical_s),
            Speed::Missing | Speed::Unmeasured => None,
        }
    }

    /// Known to answer a typical question within `budget_s`: a measure (a busy one is an
    /// upper bound) or a prediction at or under it.
    fn fits(self, budget_s: f64) -> bool {
        self.seconds().is_some_and(|s| s <= budget_s)
    }

    /// Shown in a reason: "12.3 s here", "4.1 s predicted from the large one".
    fn said(self) -> String {
        match self {
            Speed::Measured(m) if m.quiet => format!("{:.1} s here", m.typical_s),
            Speed::Measured(m) => format!("{:.1} s here, measured while busy", m.typical_s),
            Speed::Predicted { typical_s, from } => {
                format!("{typical_s:.1} s predicted from the {} one", from.name())
            }
            Speed::Missing | Speed::Unmeasured => "not measured".into(),
        }
    }
}

/// How long a generator passed over as too slow stays passed over before `auto` measures it
/// again with one answer (on a quiet machine only).
pub const RETRY_AFTER_S: u64 = 3600;

/// The budget rule of `auto`: `budget_s` seconds per typical question.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub budget_s: f64,
    /// `llm.route_similarity`: at or above it the small generator answers (0 = off).
    pub similarity: f32,
}

/// Largest first: the order `auto` considers them in.
const BEST_FIRST: [Tier; 3] = [Tier::Large, Tier::Medium, Tier::Small];

/// The route for `choice`; `speed` says what is known of each generator.
pub fn route(
    choice: ChosenRoute,
    best_similarity: Option<f32>,
    budget: Budget,
    speed: impl Fn(Tier) -> Speed,
) -> Route {
    let to = |model: Tier, reason: &str| Route {
        model,
        reason: reason.into(),
        note: None,
    };
    match choice {
        ChosenRoute::Small => to(Tier::Small, "asked for the small model"),
        ChosenRoute::Medium => to(Tier::Medium, "asked for the medium model"),
        ChosenRoute::Large => to(Tier::Large, "asked for the large model"),
        ChosenRoute::Auto => {
            let table: Vec<(Tier, Speed)> = BEST_FIRST
                .iter()
                .map(|&t| (t, speed(t)))
                .filter(|(_, s)| *s != Speed::Missing)
                .collect();
            let best = auto(budget.budget_s, &table);
            match best_similarity {
                Some(s)
                    if budget.similarity > 0.0
                        && s >= budget.similarity
                        && best.model != Tier::Small
                        && table.iter().any(|(t, _)| *t == Tier::Small) =>
                {
                    let why = format!(
                        "auto: strong retrieval match ({s:.2} >= llm.route_similarity = {})",
                        budget.similarity
                    );
                    to(Tier::Small, &why)
                }
                _ => best,
            }
        }
    }
}

/// `auto` over the installed generators, best first.
fn auto(budget_s: f64, installed: &[(Tier, Speed)]) -> Route {
    let Some(&(top, top_speed)) = installed.first() else {
        return Route {
            model: Tier::Small,
            reason: "auto: no generator installed (rag models fetch)".into(),
            note: None,
        };
    };
    let best = |reason: String| Route {
        model: top,
        reason: format!("auto: the best installed generator; {reason}"),
        note: None,
    };
    let m = match top_speed {
        Speed::Missing | Speed::Unmeasured => {
            return best(format!(
                "not measured on this machine yet, so this answer measures it (llm.answer_budget_s = {budget_s})"
            ))
        }
        Speed::Predicted { typical_s, .. } => Measure {
            typical_s,
            quiet: true,
            retry: false,
        },
        Speed::Measured(m) => m,
    };
    let t = m.typical_s;
    if t <= budget_s {
        return best(format!(
            "a typical question takes {}, within llm.answer_budget_s = {budget_s}",
            top_speed.said()
        ));
    }
    if !m.quiet {
        return best(format!(
            "a typical question took {t:.1} s, over llm.answer_budget_s = {budget_s}, but only while other processes held the CPU: not this machine's speed, so it answers until a quiet answer measures it"
        ));
    }
    if m.retry {
        return best(format!(
            "a typical question took {t:.1} s over an hour ago, over llm.answer_budget_s = {budget_s}; the machine is quiet now, so this answer measures it again"
        ));
    }
    over_budget(top, t, budget_s, &installed[1..])
}

/// The best one is over the budget on a quiet machine: the largest smaller one known to fit
/// answers, else [`none_fits`].
fn over_budget(top: Tier, t: f64, budget_s: f64, smaller: &[(Tier, Speed)]) -> Route {
    let over = format!(
        "the {} generator takes {:.1} s here, over llm.answer_budget_s = {budget_s}",
        top.name(),
        t
    );
    if let Some(&(tier, s)) = smaller.iter().find(|(_, s)| s.fits(budget_s)) {
        let reason = format!("auto: {over}; the {} one fits: {}", tier.name(), s.said());
        let note = format!(
            "{over}, so the {} one answers ({}), with fewer right answers; `--model {}` or a larger llm.answer_budget_s for the {} one",
            tier.name(),
            s.said(),
            top.name(),
            top.name()
        );
        return Route {
            model: tier,
            reason,
            note: Some(note),
        };
    }
    none_fits(top, t, budget_s, smaller)
}

/// Nothing fits: the best installed generator answers, and the route says what a smaller
/// one would take where that is known.
fn none_fits(top: Tier, t: f64, budget_s: f64, smaller: &[(Tier, Speed)]) -> Route {
    let quicker = smaller
        .iter()
        .filter(|(_, s)| s.seconds().is_some_and(|x| x < t))
        .min_by(|a, b| {
            a.1.seconds()
                .partial_cmp(&b.1.seconds())
                .unwrap_or(std::cmp::Ordering::Equal)
        });
    let trade = match quicker {
        Some((tier, s)) => format!(
            "`--model {}` answers in {}, with fewer right answers",
            tier.name(),
            s.said()
        ),
        None => match smaller.last() {
            Some((tier, _)) => format!(
                "`--model {}` trades right answers for time (how much is not known here)",
                tier.name()
            ),
            None => "no smaller generator is installed (rag models fetch --minimal)".into(),
        },
    };
    Route {
        model: top,
        reason: format!(
            "auto: none fits llm.answer_budget_s = {budget_s}, so the best installed generator answers: a typical question takes {t:.1} s here; {trade}"
        ),
        note: Some(format!(
            "a typical question takes {t:.1} s here with the {} generator, over llm.answer_budget_s = {budget_s}; it answers as the best installed one. {trade}; a larger llm.answer_budget_s keeps it without this note",
            top.name(),
        )),
    }
}

#[cfg(test)]
mod tests;

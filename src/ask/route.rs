//! Which generator answers, pure. `small`, `medium` and `large` are the user's choice; `auto`
//! (the default) takes the best installed generator whose measured speed on this machine
//! answers a typical question within `llm.answer_budget_s`, so a new user's first answer
//! comes from the 1.5B where it is installed and fast enough, and from a smaller one where
//! it is not. A generator that was never measured here is tried (its first answer measures
//! it); one measured too slow is passed over for the next smaller one.
//!
//! `llm.route_similarity` (off by default) adds the former per-question rule on top: a
//! question whose best span is at least that similar goes to the small generator. Measured
//! on the SQLite dev set it kept 84% of the 1.5B's keywords at 84% of its time (0.70), a
//! worse trade than the 1.5B alone when it fits the budget (docs/quality.md: routing).
//! Routing long questions to a larger model was dropped on measurement earlier: 57 of 65
//! dev questions are longer than 20 words, and the 0.5B scored below the 135M on them.

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
}

/// What routing knows of a generator that can answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Speed {
    /// Its file is missing (or it is otherwise unusable): never chosen by `auto`.
    Missing,
    /// Present but not measured on this machine yet (or on a server, whose speed is its own).
    Unmeasured,
    /// Seconds a typical question takes, from the answers measured here.
    Typical(f64),
    /// The same, last measured more than [`RETRY_AFTER_S`] ago: one that was too slow then
    /// is tried again (the machine may have been busy), so one slow moment does not pin
    /// `auto` to a smaller generator for good.
    Stale(f64),
}

/// How long a generator passed over as too slow stays passed over before `auto` measures it
/// again with one answer.
pub const RETRY_AFTER_S: u64 = 3600;

/// The budget rule of `auto`: `budget_s` seconds per typical question.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub budget_s: f64,
    /// `llm.route_similarity`: at or above it the small generator answers (0 = off).
    pub similarity: f32,
}

/// The route for `choice`; `speed` says what is known of each generator.
pub fn route(
    choice: ChosenRoute,
    best_similarity: Option<f32>,
    budget: Budget,
    speed: impl Fn(Tier) -> Speed,
) -> Route {
    let to = |model: Tier, reason: String| Route { model, reason };
    match choice {
        ChosenRoute::Small => to(Tier::Small, "asked for the small model".into()),
        ChosenRoute::Medium => to(Tier::Medium, "asked for the medium model".into()),
        ChosenRoute::Large => to(Tier::Large, "asked for the large model".into()),
        ChosenRoute::Auto => {
            let best = within_budget(budget.budget_s, &speed);
            match best_similarity {
                Some(s)
                    if budget.similarity > 0.0
                        && s >= budget.similarity
                        && best.model != Tier::Small
                        && speed(Tier::Small) != Speed::Missing =>
                {
                    to(
                        Tier::Small,
                        format!(
                            "auto: strong retrieval match ({s:.2} >= llm.route_similarity = {})",
                            budget.similarity
                        ),
                    )
                }
                _ => best,
            }
        }
    }
}

/// The best installed generator that answers a typical question within `budget_s`.
fn within_budget(budget_s: f64, speed: &impl Fn(Tier) -> Speed) -> Route {
    let mut slower = Vec::new();
    for tier in [Tier::Large, Tier::Medium, Tier::Small] {
        let reason = match speed(tier) {
            Speed::Missing => continue,
            Speed::Unmeasured => format!(
                "auto: the best installed generator; not measured on this machine yet, so this answer measures it (budget {budget_s} s)"
            ),
            Speed::Typical(s) | Speed::Stale(s) if s <= budget_s => format!(
                "auto: the best installed generator that fits the budget: a typical question takes {s:.1} s here, llm.answer_budget_s = {budget_s}"
            ),
            Speed::Stale(s) => format!(
                "auto: the best installed generator; a typical question took {s:.1} s when last measured, over an hour ago (llm.answer_budget_s = {budget_s}), so this answer measures it again"
            ),
            Speed::Typical(s) => {
                slower.push(format!("{} {s:.1} s", tier.name()));
                continue;
            }
        };
        let reason = match slower.is_empty() {
            true => reason,
            false => format!("{reason}; slower: {}", slower.join(", ")),
        };
        return Route {
            model: tier,
            reason,
        };
    }
    Route {
        model: Tier::Small,
        reason: if slower.is_empty() {
            "auto: no generator installed (rag models fetch)".into()
        } else {
            format!(
                "auto: none fits llm.answer_budget_s = {budget_s} ({}); the small one is the fastest",
                slower.join(", ")
            )
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(similarity: f32) -> Budget {
        Budget {
            budget_s: 20.0,
            similarity,
        }
    }

    #[test]
    fn auto_takes_the_best_generator_that_fits_the_budget() {
        use ChosenRoute::*;
        use Speed::*;
        let pick = |large: Speed, medium: Speed, small: Speed| {
            route(Auto, Some(0.9), budget(0.0), |t| match t {
                Tier::Large => large,
                Tier::Medium => medium,
                Tier::Small => small,
            })
        };
        let r = pick(Typical(9.8), Typical(18.0), Typical(4.0));
        assert_eq!(r.model, Tier::Large);
        assert!(r.reason.contains("9.8 s"), "{}", r.reason);
        assert_eq!(pick(Unmeasured, Missing, Typical(4.0)).model, Tier::Large);
        let r = pick(Typical(31.0), Typical(18.0), Typical(4.0));
        assert_eq!(r.model, Tier::Medium);
        assert!(r.reason.contains("slower: large 31.0 s"), "{}", r.reason);
        assert_eq!(pick(Typical(31.0), Missing, Unmeasured).model, Tier::Small);
        let r = pick(Typical(90.0), Typical(40.0), Typical(25.0));
        assert_eq!(r.model, Tier::Small);
        assert!(r.reason.contains("none fits"), "{}", r.reason);
        assert_eq!(pick(Missing, Missing, Missing).model, Tier::Small);
        // Too slow over an hour ago: measured again; a stale figure within budget still fits.
        let r = pick(Stale(31.0), Typical(18.0), Typical(4.0));
        assert_eq!(r.model, Tier::Large);
        assert!(r.reason.contains("measures it again"), "{}", r.reason);
        let r = pick(Stale(9.0), Typical(18.0), Typical(4.0));
        assert!(r.reason.contains("fits the budget"), "{}", r.reason);
        // A fixed route is the user's choice, whatever is installed.
        assert_eq!(
            route(Large, None, budget(0.0), |_| Missing).model,
            Tier::Large
        );
        assert_eq!(
            route(Medium, None, budget(0.0), |_| Missing).model,
            Tier::Medium
        );
        assert_eq!(
            route(Small, None, budget(0.0), |_| Unmeasured).model,
            Tier::Small
        );
    }

    #[test]
    fn a_strong_match_goes_to_the_small_generator_only_when_asked() {
        let all = |_: Tier| Speed::Unmeasured;
        let auto = ChosenRoute::Auto;
        assert_eq!(route(auto, Some(0.8), budget(0.0), all).model, Tier::Large);
        assert_eq!(route(auto, Some(0.8), budget(0.7), all).model, Tier::Small);
        assert_eq!(route(auto, Some(0.6), budget(0.7), all).model, Tier::Large);
        assert_eq!(route(auto, None, budget(0.7), all).model, Tier::Large);
        let no_small = |t: Tier| match t {
            Tier::Small => Speed::Missing,
            _ => Speed::Unmeasured,
        };
        assert_eq!(
            route(auto, Some(0.9), budget(0.7), no_small).model,
            Tier::Large
        );
    }
}

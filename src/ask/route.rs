//! Which generator answers, pure. `small`, `medium` and `large` are the user's choice; `auto`
//! sends a question to the largest installed generator only when the evidence is a weak
//! match. Routing long questions to a larger model was dropped on measurement: on the dev
//! set (eval/sqlite/dev.yaml) 57 of 65 questions, asked as users ask, are longer than 20
//! words; sending them to Qwen2.5-Coder-0.5B scored 0.138 on answer keywords against 0.185
//! for SmolLM2-135M alone, with a first token 2.2 times later.

use crate::config::{Route as ChosenRoute, Tier};

use serde::{Deserialize, Serialize};

/// Below this best cosine similarity the evidence is weak enough to need a larger model.
/// Chosen on the dev set with the 1.5B as the large model (2026-12-03, `scripts/route_table.py`):
/// the lowest threshold that keeps about 90% of the 1.5B's keywords (0.508 of 0.569, at 79%
/// of its mean answer time); held-out confirms it (0.360 of 0.440 at 74%). At 0.55, the
/// threshold of the 0.5B era, auto kept half (0.292) at 36% of the time.
pub const CONFIDENT_SIMILARITY: f32 = 0.70;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Route {
    /// `small`, `medium` or `large`
    pub model: Tier,
    pub reason: String,
}

/// The route for `choice`; `installed` says whether a generator can answer (its file exists
/// or it is a server), so `auto` never picks one that is missing.
pub fn route(
    choice: ChosenRoute,
    best_similarity: Option<f32>,
    installed: impl Fn(Tier) -> bool,
) -> Route {
    let to = |model: Tier, reason: String| Route { model, reason };
    match choice {
        ChosenRoute::Small => to(Tier::Small, "the default small model".into()),
        ChosenRoute::Medium => to(Tier::Medium, "asked for the medium model".into()),
        ChosenRoute::Large => to(Tier::Large, "asked for the large model".into()),
        ChosenRoute::Auto => {
            let Some(bigger) = [Tier::Large, Tier::Medium]
                .into_iter()
                .find(|&t| installed(t))
            else {
                return to(
                    Tier::Small,
                    "auto: no medium or large model installed (scripts/setup.sh --large)".into(),
                );
            };
            match best_similarity {
                Some(s) if s < CONFIDENT_SIMILARITY => to(
                    bigger,
                    format!("auto: weak retrieval match ({s:.2} < {CONFIDENT_SIMILARITY})"),
                ),
                Some(s) => to(
                    Tier::Small,
                    format!("auto: strong retrieval match ({s:.2})"),
                ),
                None => to(
                    Tier::Small,
                    "auto: text-only retrieval gives no similarity".into(),
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_rule() {
        use ChosenRoute::*;
        let all = |_: Tier| true;
        let none = |_: Tier| false;
        let medium_only = |t: Tier| t == Tier::Medium;
        assert_eq!(route(Auto, Some(0.8), all).model, Tier::Small);
        assert_eq!(route(Auto, Some(0.3), all).model, Tier::Large);
        assert_eq!(route(Auto, Some(0.3), medium_only).model, Tier::Medium);
        assert_eq!(route(Auto, Some(0.3), none).model, Tier::Small);
        assert_eq!(route(Large, Some(0.9), none).model, Tier::Large);
        assert_eq!(route(Medium, Some(0.9), none).model, Tier::Medium);
        assert_eq!(route(Small, Some(0.1), all).model, Tier::Small);
    }
}

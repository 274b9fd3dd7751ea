//! Which generator answers, pure. `small` and `large` are the user's choice; `auto` sends a
//! question to the large model only when the evidence is a weak match. Routing long
//! questions to it was dropped on measurement: on the dev set (eval/sqlite/dev.yaml) 57 of
//! 65 questions, asked as users ask, are longer than 20 words; sending them to
//! Qwen2.5-Coder-0.5B scored 0.138 on answer keywords against 0.185 for SmolLM2-135M alone,
//! with a first token 2.2 times later.

use crate::config::Route as ChosenRoute;

use serde::{Deserialize, Serialize};

/// Below this best cosine similarity the evidence is weak enough to need the larger model.
pub const CONFIDENT_SIMILARITY: f32 = 0.55;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Route {
    /// `small` or `large`
    pub model: String,
    pub reason: String,
}

pub fn route(choice: ChosenRoute, best_similarity: Option<f32>, large_available: bool) -> Route {
    let small = |reason: String| Route {
        model: "small".into(),
        reason,
    };
    let large = |reason: String| Route {
        model: "large".into(),
        reason,
    };
    match choice {
        ChosenRoute::Large => large("asked for the large model".into()),
        ChosenRoute::Auto => {
            if !large_available {
                return small("auto: no large model installed (scripts/setup.sh --large)".into());
            }
            match best_similarity {
                Some(s) if s < CONFIDENT_SIMILARITY => large(format!(
                    "auto: weak retrieval match ({s:.2} < {CONFIDENT_SIMILARITY})"
                )),
                Some(s) => small(format!("auto: strong retrieval match ({s:.2})")),
                None => small("auto: text-only retrieval gives no similarity".into()),
            }
        }
        ChosenRoute::Small => small("the default small model".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_rule() {
        use ChosenRoute::*;
        assert_eq!(route(Auto, Some(0.8), true).model, "small");
        assert_eq!(route(Auto, Some(0.3), true).model, "large");
        assert_eq!(route(Auto, Some(0.3), false).model, "small");
        assert_eq!(route(Large, Some(0.9), false).model, "large");
        assert_eq!(route(Small, Some(0.1), true).model, "small");
    }
}

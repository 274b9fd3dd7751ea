//! Which generator answers, pure. `small` and `large` are the user's choice; `auto` sends a
//! question to the large model only when the small one is likely to struggle: the evidence
//! is a weak match, or the question is long (several parts to answer).

use serde::Serialize;

/// Below this best cosine similarity the evidence is weak enough to need the larger model.
pub const CONFIDENT_SIMILARITY: f32 = 0.55;
/// Questions longer than this many words go to the larger model.
pub const LONG_QUESTION_WORDS: usize = 20;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Route {
    /// `small` or `large`
    pub model: &'static str,
    pub reason: String,
}

pub fn route(
    choice: &str,
    best_similarity: Option<f32>,
    question: &str,
    large_available: bool,
) -> Route {
    let small = |reason: String| Route {
        model: "small",
        reason,
    };
    let large = |reason: String| Route {
        model: "large",
        reason,
    };
    match choice {
        "large" => large("asked for the large model".into()),
        "auto" => {
            if !large_available {
                return small("auto: no large model installed (scripts/setup.sh --large)".into());
            }
            let words = question.split_whitespace().count();
            if words > LONG_QUESTION_WORDS {
                return large(format!(
                    "auto: long question ({words} words > {LONG_QUESTION_WORDS})"
                ));
            }
            match best_similarity {
                Some(s) if s < CONFIDENT_SIMILARITY => large(format!(
                    "auto: weak retrieval match ({s:.2} < {CONFIDENT_SIMILARITY})"
                )),
                Some(s) => small(format!(
                    "auto: strong retrieval match ({s:.2}) and a short question"
                )),
                None => {
                    small("auto: text-only retrieval gives no similarity; short question".into())
                }
            }
        }
        _ => small("the default small model".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_rule() {
        assert_eq!(
            route("auto", Some(0.8), "what is a kv cache", true).model,
            "small"
        );
        assert_eq!(
            route("auto", Some(0.3), "what is a kv cache", true).model,
            "large"
        );
        assert_eq!(
            route("auto", Some(0.8), &"word ".repeat(30), true).model,
            "large"
        );
        assert_eq!(route("auto", Some(0.3), "x", false).model, "small");
        assert_eq!(route("large", Some(0.9), "x", false).model, "large");
        assert_eq!(route("small", Some(0.1), "x", true).model, "small");
    }
}

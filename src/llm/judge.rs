//! The generator as a judge of a citation: given a cited source and a sentence that cites
//! it, how likely the model finds that the source says what the sentence says, read from its
//! logits for "yes" against "no" at the first token of its reply (nothing is generated).
//! Words shared with the source cannot tell "the table is created automatically" from "the
//! table is never created" (eval/citations.jsonl); a model reading both can.

use anyhow::Result;

use super::{Llm, Message, Session, Token};

/// What the judge is told: one word back, and support meaning every fact. Asking whether
/// "the source states what the sentence says" let vaguer and more general sentences pass:
/// on the labelled sentences this wording ranks them better (docs/experiments, 2026-12-07).
const INSTRUCTIONS: &str =
    "You check citations. Read the source, then the sentence that cites it. \
Answer yes only if the source itself states every fact in the sentence: each name, number, option, \
function and claim. Answer no if the sentence adds anything the source does not say, is vaguer or \
more general than the source, or contradicts it. Answer with one word: yes or no.";

/// The first token of each way the model may write its verdict.
pub struct Verdicts {
    yes: Vec<Token>,
    no: Vec<Token>,
}

impl Verdicts {
    pub fn of(llm: &Llm) -> Verdicts {
        let firsts = |words: &[&str]| {
            let mut v: Vec<Token> = words
                .iter()
                .filter_map(|w| llm.tokenize(w, false).first().copied())
                .collect();
            v.sort_by_key(|t| t.0);
            v.dedup();
            v
        };
        Verdicts {
            yes: firsts(&["yes", "Yes", "YES", " yes", " Yes"]),
            no: firsts(&["no", "No", "NO", " no", " No"]),
        }
    }

    /// P(yes) among the two verdicts, from the logits of the reply's first token.
    pub fn p_yes(&self, logits: &[f32]) -> f32 {
        let mass = |ts: &[Token]| -> Vec<f32> {
            ts.iter()
                .filter_map(|t| logits.get(usize::try_from(t.0).ok()?).copied())
                .collect()
        };
        let (yes, no) = (mass(&self.yes), mass(&self.no));
        let max = yes
            .iter()
            .chain(&no)
            .copied()
            .fold(f32::NEG_INFINITY, f32::max);
        if !max.is_finite() {
            return 0.5;
        }
        let sum = |v: &[f32]| v.iter().map(|l| (l - max).exp()).sum::<f32>();
        let (y, n) = (sum(&yes), sum(&no));
        y / (y + n)
    }
}

/// The judge's prompt for one cited sentence: the source, then the sentence and the question.
pub fn messages(source: &str, sentence: &str) -> Vec<Message> {
    super::chat(
        INSTRUCTIONS,
        [
            "Source:\n",
            source.trim(),
            "\n\nSentence: ",
            sentence.trim(),
            "\n\nIs every fact in the sentence stated in the source? Answer yes or no.",
        ],
    )
}

/// P(yes) that `source` states what `sentence` says, on `session` (whose KV cache then holds
/// this prompt). A source too long for the context is cut from its end: the judge reads what
/// fits, as the reader did.
pub fn support(
    session: &mut Session<'_>,
    v: &Verdicts,
    source: &str,
    sentence: &str,
) -> Result<f32> {
    let room = session.n_ctx().saturating_sub(8);
    let mut source = source;
    let mut tokens = session.llm.chat_tokens(&messages(source, sentence))?;
    while tokens.len() > room && !source.is_empty() {
        let keep = source.len() * room / tokens.len() * 9 / 10;
        source = &source[..source.floor_char_boundary(keep)];
        tokens = session.llm.chat_tokens(&messages(source, sentence))?;
    }
    session.prefill(&tokens)?;
    Ok(v.p_yes(session.logits()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p_yes_weighs_every_way_of_writing_each_verdict() {
        let v = Verdicts {
            yes: vec![Token::new(1), Token::new(2)],
            no: vec![Token::new(3)],
        };
        let mut logits = vec![0.0f32; 5];
        assert!((v.p_yes(&logits) - 2.0 / 3.0).abs() < 1e-6);
        logits[3] = 10.0;
        assert!(v.p_yes(&logits) < 0.001);
        logits[1] = 30.0;
        assert!(v.p_yes(&logits) > 0.999);
        // Tokens outside the logits (another vocabulary) count as absent, not as a panic.
        let none = Verdicts {
            yes: vec![Token::new(99)],
            no: vec![Token::new(98)],
        };
        assert_eq!(none.p_yes(&logits), 0.5);
    }
}

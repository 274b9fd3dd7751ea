//! Follow-up questions, pure. "And how do I drop it afterwards?" names nothing to search for:
//! its subject is in the conversation. A question that leans on an earlier one is retrieved
//! with the previous question's words in front of it; a question that stands on its own is
//! retrieved as asked, so changing the subject in a chat still works.

/// Words that point back at something said before.
const BACK: &[&str] = &[
    "it",
    "its",
    "that",
    "this",
    "these",
    "those",
    "they",
    "them",
    "their",
    "there",
    "one",
    "ones",
    "same",
    "afterwards",
    "again",
    "instead",
    "also",
    "else",
    "too",
    "then",
];

/// Openings of a question that continues the previous one.
const CONTINUES: &[&str] = &[
    "and",
    "also",
    "but",
    "so",
    "then",
    "or",
    "what about",
    "how about",
];

/// Whether `question` needs the conversation to be understood.
pub fn leans_on_history(question: &str) -> bool {
    let q = question.trim().to_lowercase();
    let words: Vec<&str> = q
        .split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
        .collect();
    if words.len() <= 4 {
        return true;
    }
    CONTINUES
        .iter()
        .any(|c| q.starts_with(&format!("{c} ")) || q.starts_with(&format!("{c},")))
        || words.iter().any(|w| BACK.contains(w))
}

/// The retrieval query of `question` asked after `history` (earlier questions, oldest first).
pub fn query(history: &[String], question: &str) -> String {
    match history.last() {
        Some(prev) if leans_on_history(question) => format!("{} {}", prev.trim(), question.trim()),
        _ => question.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follow_up_carries_the_previous_question() {
        let h = vec!["How do I take untracked files along when I stash?".to_string()];
        assert_eq!(
            query(&h, "And how do I drop it afterwards?"),
            "How do I take untracked files along when I stash? And how do I drop it afterwards?"
        );
        assert_eq!(query(&h, "Why?"), format!("{} Why?", h[0]));
        // A new subject stands alone.
        let q = "How many dimensions do MiniLM embeddings have?";
        assert_eq!(query(&h, q), q);
        // No history: the question as asked.
        assert_eq!(query(&[], "And it?"), "And it?");
    }
}

//! Citation checking, pure: find `[S#]` markers in an answer, drop the ones that name no
//! packed source, and mark each remaining citation supported when the cited source shares
//! enough of the sentence's content words.

use std::collections::HashSet;

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Citation {
    /// `S3`
    pub id: String,
    pub supported: bool,
    /// Share of the sentence's content words found in the source (0..=1).
    pub overlap: f32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// The answer with markers that name no source removed.
    pub answer: String,
    pub citations: Vec<Citation>,
    /// Markers removed because no packed source has that number.
    pub invalid: Vec<String>,
}

/// A sentence is supported by a source when at least this share of its content words
/// appears in the source.
pub const SUPPORT_THRESHOLD: f32 = 0.5;

const STOP: &[&str] = &[
    "the",
    "and",
    "for",
    "are",
    "but",
    "not",
    "you",
    "all",
    "any",
    "can",
    "has",
    "have",
    "had",
    "was",
    "were",
    "its",
    "it's",
    "this",
    "that",
    "these",
    "those",
    "with",
    "from",
    "into",
    "than",
    "then",
    "they",
    "them",
    "their",
    "there",
    "which",
    "what",
    "when",
    "where",
    "who",
    "why",
    "how",
    "will",
    "would",
    "could",
    "should",
    "may",
    "might",
    "must",
    "does",
    "did",
    "done",
    "been",
    "being",
    "also",
    "such",
    "each",
    "other",
    "more",
    "most",
    "some",
    "only",
    "over",
    "very",
    "just",
    "about",
    "because",
    "while",
    "both",
    "between",
    "through",
    "our",
    "your",
    "his",
    "her",
    "one",
    "two",
    "use",
    "used",
    "using",
    "source",
    "sources",
    "according",
];

fn content_words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric() && c != '\'')
        .map(|w| w.trim_matches('\'').to_lowercase())
        .filter(|w| w.chars().count() >= 3 && !STOP.contains(&w.as_str()))
        .map(|w| stem(&w))
        .collect()
}

/// A light plural/verb stem so "tokens" matches "token" and "stores" matches "stored".
fn stem(w: &str) -> String {
    for suffix in ["ing", "ed", "es", "s"] {
        if let Some(s) = w.strip_suffix(suffix) {
            if s.chars().count() >= 3 {
                return s.to_string();
            }
        }
    }
    w.to_string()
}

/// Markers in `text`: (byte range of the whole bracket, numbers inside). Accepts `[S1]`,
/// `[S1, S2]` and `[S1][S2]`.
fn markers(text: &str) -> Vec<(std::ops::Range<usize>, Vec<usize>)> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'[' {
            if let Some(end) = text[i..].find(']') {
                let inner = &text[i + 1..i + end];
                let nums: Option<Vec<usize>> = inner
                    .split(',')
                    .map(|p| {
                        p.trim()
                            .strip_prefix('S')
                            .or_else(|| p.trim().strip_prefix('s'))
                            .and_then(|n| n.parse().ok())
                    })
                    .collect();
                if let Some(nums) = nums.filter(|n| !n.is_empty()) {
                    out.push((i..i + end + 1, nums));
                    i += end + 1;
                    continue;
                }
            }
        }
        i += 1;
    }
    out
}

/// Sentence spans: split after `.`, `!`, `?` or a newline, keeping citation markers that
/// follow the punctuation ("… decode. [S2]") with their sentence.
fn sentences(text: &str) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let (at, c) = chars[i];
        if matches!(c, '.' | '!' | '?' | '\n') {
            let mut end = at + c.len_utf8();
            // Absorb following spaces and markers.
            let rest = &text[end..];
            let trimmed = rest.trim_start_matches([' ', '\t']);
            let mut j = end + (rest.len() - trimmed.len());
            while text[j..].starts_with('[') {
                match text[j..].find(']') {
                    Some(e) if markers(&text[j..j + e + 1]).len() == 1 => {
                        j += e + 1;
                        end = j;
                    }
                    _ => break,
                }
            }
            if end > start {
                out.push(start..end);
            }
            start = end;
            while i < chars.len() && chars[i].0 < end {
                i += 1;
            }
            continue;
        }
        i += 1;
    }
    if start < text.len() {
        out.push(start..text.len());
    }
    out
}

/// Checks `answer` against `sources` (label number → source text).
pub fn check(answer: &str, sources: &[(usize, &str)]) -> Checked {
    let known: HashSet<usize> = sources.iter().map(|(n, _)| *n).collect();
    // Remove invalid markers (and invalid numbers inside lists).
    let mut cleaned = String::with_capacity(answer.len());
    let mut invalid = Vec::new();
    let mut last = 0;
    for (range, nums) in markers(answer) {
        cleaned.push_str(&answer[last..range.start]);
        let keep: Vec<usize> = nums.iter().copied().filter(|n| known.contains(n)).collect();
        invalid.extend(
            nums.iter()
                .filter(|n| !known.contains(n))
                .map(|n| format!("S{n}")),
        );
        if !keep.is_empty() {
            let list: Vec<String> = keep.iter().map(|n| format!("S{n}")).collect();
            cleaned.push_str(&format!("[{}]", list.join(", ")));
        } else if cleaned.ends_with(' ') {
            cleaned.pop();
        }
        last = range.end;
    }
    cleaned.push_str(&answer[last..]);

    let source_words: Vec<(usize, HashSet<String>)> = sources
        .iter()
        .map(|(n, t)| (*n, content_words(t).into_iter().collect()))
        .collect();
    let mut citations = Vec::new();
    for span in sentences(&cleaned) {
        let sentence = &cleaned[span];
        let found = markers(sentence);
        if found.is_empty() {
            continue;
        }
        let mut claim = sentence.to_string();
        for (r, _) in found.iter().rev() {
            claim.replace_range(r.clone(), " ");
        }
        let words = content_words(&claim);
        for n in found.iter().flat_map(|(_, nums)| nums.iter().copied()) {
            let Some((_, vocab)) = source_words.iter().find(|(m, _)| *m == n) else {
                continue;
            };
            let overlap = if words.is_empty() {
                0.0
            } else {
                words.iter().filter(|w| vocab.contains(*w)).count() as f32 / words.len() as f32
            };
            citations.push(Citation {
                id: format!("S{n}"),
                supported: overlap >= SUPPORT_THRESHOLD,
                overlap,
            });
        }
    }
    Checked {
        answer: cleaned,
        citations,
        invalid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: &str =
        "The KV cache stores the key and value vectors of every previous token at every layer.";
    const S2: &str = "Tomatoes need six hours of sun.";

    #[test]
    fn supported_and_unsupported_citations() {
        let c = check(
            "The KV cache stores key and value vectors for previous tokens [S1]. Tomatoes like the moon [S1].",
            &[(1, S1), (2, S2)],
        );
        assert_eq!(c.invalid, Vec::<String>::new());
        assert_eq!(c.citations.len(), 2);
        assert!(c.citations[0].supported, "{c:?}");
        assert!(!c.citations[1].supported, "{c:?}");
    }

    #[test]
    fn invalid_markers_are_removed() {
        let c = check(
            "Sun matters [S7]. Tomatoes need sun [S2, S9].",
            &[(1, S1), (2, S2)],
        );
        assert_eq!(c.answer, "Sun matters. Tomatoes need sun [S2].");
        assert_eq!(c.invalid, vec!["S7", "S9"]);
        assert_eq!(
            c.citations,
            vec![Citation {
                id: "S2".into(),
                supported: true,
                overlap: 1.0
            }]
        );
    }

    #[test]
    fn markers_after_the_full_stop_stay_with_their_sentence() {
        let c = check(
            "Tomatoes need sun. [S2] The cache holds vectors. [S1]",
            &[(1, S1), (2, S2)],
        );
        assert_eq!(c.citations.len(), 2);
        assert!(c.citations.iter().all(|x| x.supported), "{c:?}");
    }
}

//! Citation checking, pure: find `[S#]` markers in an answer, drop the ones that name no
//! packed source, and mark each remaining citation supported when the cited source shares
//! enough of the sentence's content words and holds, as written, every exact term the
//! sentence names (code, options, identifiers, numbers, upper-case names). Measured against
//! hand labels in eval/citations.jsonl (`rag eval --cite-labels`, docs/quality.md).

use std::collections::HashSet;

use serde::Serialize;

mod attribute;
pub use attribute::Attributor;

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Citation {
    /// `S3`
    pub id: String,
    pub supported: bool,
    /// Share of the sentence's content words found in the source (0..=1).
    pub overlap: f32,
    /// For a supported citation: the line of the source (0-based, within its text) that
    /// shares most of the sentence's content words, and that line.
    #[serde(skip)]
    pub quote: Option<(usize, String)>,
    /// The cited sentence without its markers, and the cited source's text: what the check
    /// compared (kept by `rag eval --answers --save-json`, so a person can label it).
    #[serde(skip)]
    pub claim: String,
    #[serde(skip)]
    pub cited_text: String,
    /// `llm.judge_citations`: the generator's P(yes) that the source states the sentence,
    /// asked of the citations the words support.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<f32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// The answer with markers that name no source removed.
    pub answer: String,
    pub citations: Vec<Citation>,
    /// Markers removed because no packed source has that number.
    pub invalid: Vec<String>,
    /// Sentences with three content words or more and no marker.
    pub uncited: Vec<String>,
}

/// A sentence is supported by a source when at least this share of its content words
/// appears in the source (and all of its numbers, see [`supports`]).
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
        // Numbers count whatever their length: they are the facts most worth checking.
        .filter(|w| {
            w.chars().any(|c| c.is_ascii_digit())
                || (w.chars().count() >= 3 && !STOP.contains(&w.as_str()))
        })
        .map(|w| stem(&w))
        .collect()
}

/// Whether a claim with content `words` is supported by a source with content `vocab`: enough
/// shared words, and every number of the claim in the source ("10 hours" is not supported
/// by "ten minutes").
fn supports(words: &[String], vocab: &HashSet<String>) -> bool {
    overlap(words, vocab) >= SUPPORT_THRESHOLD
        && words
            .iter()
            .filter(|w| w.chars().any(|c| c.is_ascii_digit()))
            .all(|w| vocab.contains(w))
}

/// A claim as a person reads it: the spaces its markers left collapsed.
fn tidy(claim: &str) -> String {
    let one: Vec<&str> = claim.split_whitespace().collect();
    let mut s = one.join(" ");
    for p in [".", ",", ";", ":", "!", "?"] {
        s = s.replace(&format!(" {p}"), p);
    }
    s
}

/// Whether the source text `cited` supports the sentence `claim` (markers already removed):
/// the check [`check`] makes of each citation, on its own.
pub fn claim_supported(claim: &str, cited: &str) -> bool {
    let vocab: HashSet<String> = content_words(cited).into_iter().collect();
    supports(&content_words(claim), &vocab) && names_hold(claim, &cited.to_lowercase())
}

/// The terms a sentence names exactly and a source must hold as written, lower-cased: each
/// word of its code spans, and outside them options (`-x`, `--flag`), identifiers
/// (`snake_case`, `key=value`, `camelCase`), numbers and upper-case names (`SQLITE_FULL`,
/// `CHECK`). "use the `--compare-column` option" is not supported by a text with no such
/// option, however many of its other words the text shares (eval/citations.jsonl).
fn exact_terms(claim: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut plain = String::new();
    for (i, segment) in claim.split('`').enumerate() {
        if i % 2 == 0 {
            plain.push_str(segment);
            plain.push(' ');
            continue;
        }
        // `s.lstrip('x')`: the method, not the user's variable, is what a source documents.
        for t in segment.split(|c: char| c.is_whitespace() || "(),;.'\"".contains(c)) {
            let t = t.trim_matches(|c| ".:;".contains(c));
            if t.chars().count() >= 2 {
                out.push(t.to_lowercase());
            }
        }
    }
    for t in plain.split(|c: char| !(c.is_alphanumeric() || "_-.=:/".contains(c))) {
        let t = t.trim_end_matches(|c| ".:;".contains(c));
        // An option as written: `-x`, `--flag` (not a list's dash before a word: "-The").
        if t.len() > 1
            && t.starts_with('-')
            && t.trim_start_matches('-')
                .starts_with(|c: char| c.is_ascii_lowercase())
        {
            out.push(t.to_lowercase());
            continue;
        }
        let t = t.trim_matches(|c| ".:;-".contains(c));
        let upper = t.chars().count() >= 2
            && t.chars().any(char::is_alphabetic)
            && !t.chars().any(char::is_lowercase);
        let camel = t
            .chars()
            .zip(t.chars().skip(1))
            .any(|(a, b)| a.is_lowercase() && b.is_uppercase());
        let marked = t.contains(['_', '=']) || t.chars().any(|c| c.is_ascii_digit());
        if !t.is_empty() && (marked || upper || camel) {
            out.push(t.to_lowercase());
        }
    }
    out
}

/// Whether the lower-cased source text holds every exact term of `claim`.
fn names_hold(claim: &str, cited_lower: &str) -> bool {
    exact_terms(claim)
        .iter()
        .all(|t| cited_lower.contains(t.as_str()))
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
pub(crate) fn markers(text: &str) -> Vec<(std::ops::Range<usize>, Vec<usize>)> {
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

/// Sentence spans: split after a full stop (`.`, `!`, `?` before whitespace) or a newline, keeping citation markers that
/// follow the punctuation ("… decode. [S2]") with their sentence.
pub(crate) fn sentences(text: &str) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let (at, c) = chars[i];
        // A full stop ends a sentence only before whitespace, a marker or the end: not in
        // "2.5", "llama.cpp" or "e.g".
        let next = chars.get(i + 1).map(|&(_, n)| n);
        let full_stop = matches!(c, '.' | '!' | '?')
            && next.is_none_or(|n| {
                n.is_whitespace() || n == '[' || matches!(n, '.' | '!' | '?' | '"' | ')')
            });
        // A newline before a lower-case word is a wrapped line, not a sentence end.
        let line_end = c == '\n' && !next.is_some_and(char::is_lowercase);
        if full_stop || line_end {
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
    let (cleaned, invalid) = drop_invalid_markers(answer, sources);
    let source_words: Vec<(usize, HashSet<String>)> = sources
        .iter()
        .map(|(n, t)| (*n, content_words(t).into_iter().collect()))
        .collect();
    let mut citations = Vec::new();
    let mut uncited = Vec::new();
    for span in sentences(&cleaned) {
        let sentence = &cleaned[span];
        let found = markers(sentence);
        if found.is_empty() {
            if content_words(sentence).len() >= 3 && !is_abstention(sentence) {
                uncited.push(sentence.trim().to_string());
            }
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
            let text = sources
                .iter()
                .find(|(m, _)| *m == n)
                .map_or("", |(_, t)| *t);
            let supported = supports(&words, vocab) && names_hold(&claim, &text.to_lowercase());
            citations.push(Citation {
                id: format!("S{n}"),
                supported,
                overlap: overlap(&words, vocab),
                quote: if supported {
                    best_line(&words, text)
                } else {
                    None
                },
                claim: tidy(&claim),
                cited_text: text.to_string(),
                judge: None,
            });
        }
    }
    Checked {
        answer: cleaned,
        citations,
        invalid,
        uncited,
    }
}

/// `answer` without markers naming no packed source, and those markers: they cite nothing.
fn drop_invalid_markers(answer: &str, sources: &[(usize, &str)]) -> (String, Vec<String>) {
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
    (cleaned, invalid)
}

/// The line of `source` that shares most content words with a claim (the first of equals),
/// as (0-based line number, trimmed line); `None` when no line shares any. The evidence a
/// reader checks the answer against, in the document's own words.
pub fn best_line(words: &[String], source: &str) -> Option<(usize, String)> {
    let claim: HashSet<&String> = words.iter().collect();
    let mut best: Option<(usize, usize)> = None;
    for (i, line) in source.lines().enumerate() {
        let line_words: HashSet<String> = content_words(line).into_iter().collect();
        let shared = claim.iter().filter(|w| line_words.contains(**w)).count();
        if shared > 0 && best.is_none_or(|(_, b)| shared > b) {
            best = Some((i, shared));
        }
    }
    best.map(|(i, _)| (i, source.lines().nth(i).unwrap_or("").trim().to_string()))
}

/// The stretch of `source` a judge reads for `claim`: the line that shares most of its
/// content words, widened line by line towards the neighbour that shares more (the earlier
/// one on a tie) while the stretch stays within `max_chars`; the whole source when it fits
/// or `max_chars` is 0. A judge's time grows with what it reads, and support for one
/// sentence sits in a few lines of a chunk (eval/citations.jsonl).
pub fn passage(claim: &str, source: &str, max_chars: usize) -> String {
    if max_chars == 0 || source.len() <= max_chars {
        return source.to_string();
    }
    let words: HashSet<String> = content_words(claim).into_iter().collect();
    let lines: Vec<&str> = source.lines().collect();
    let shared = |l: &str| {
        content_words(l)
            .into_iter()
            .collect::<HashSet<_>>()
            .intersection(&words)
            .count()
    };
    let scores: Vec<usize> = lines.iter().map(|l| shared(l)).collect();
    let best = (0..lines.len())
        .max_by_key(|&i| (scores[i], usize::MAX - i))
        .unwrap_or(0);
    let (mut lo, mut hi) = (best, best + 1);
    let mut len = lines.get(best).map_or(0, |l| l.len());
    loop {
        let before = lo.checked_sub(1).map(|i| (scores[i], lines[i].len(), i));
        let after = (hi < lines.len()).then(|| (scores[hi], lines[hi].len(), hi));
        let next = match (before, after) {
            (Some(b), Some(a)) => {
                if a.0 > b.0 {
                    a
                } else {
                    b
                }
            }
            (Some(b), None) => b,
            (None, Some(a)) => a,
            (None, None) => break,
        };
        if len + next.1 + 1 > max_chars {
            break;
        }
        len += next.1 + 1;
        if next.2 < lo {
            lo = next.2;
        } else {
            hi = next.2 + 1;
        }
    }
    let text = lines[lo..hi].join("\n");
    // One line longer than the whole budget: its start, cut at a character boundary.
    let cut = text.floor_char_boundary(max_chars.max(1) * 2);
    text[..cut.min(text.len())].to_string()
}

/// Share of `words` found in `vocab` (0 when there are no words).
fn overlap(words: &[String], vocab: &HashSet<String>) -> f32 {
    if words.is_empty() {
        0.0
    } else {
        words.iter().filter(|w| vocab.contains(*w)).count() as f32 / words.len() as f32
    }
}

/// The sentence says the documents hold no answer (the prompt asks for those words).
fn is_abstention(sentence: &str) -> bool {
    let s = sentence.to_lowercase();
    s.contains("not answer") || s.contains("not contain")
}

#[cfg(test)]
mod tests;

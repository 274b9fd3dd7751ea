//! Citations rag adds as the answer streams, where the generator wrote none: the source
//! that shares most of a sentence's content words gets its marker before the full stop.

use std::collections::HashSet;

use super::{content_words, is_abstention, markers, names_hold, overlap, sentences, supports};

/// Citations added by rag as the answer streams: when a sentence ends without a marker, the
/// marker of the source that shares most of its content words goes in before its full stop,
/// if that source holds at least [`SUPPORT_THRESHOLD`](super::SUPPORT_THRESHOLD) of them. A sentence no source supports
/// gets no marker, so it shows up as uncited rather than as a false attribution.
///
/// Why not let the model cite: SmolLM2-135M and Qwen2.5-0.5B write no markers, or only
/// markers; forcing a marker and letting the model's logits pick its number (constrained
/// decoding) picked the first or the last source about as often as the right one, and fed
/// back into the context, the markers made the models copy source headers.
pub struct Attributor {
    /// Label number, content words and lower-cased text of each packed source.
    sources: Vec<(usize, HashSet<String>, String)>,
    pub(super) written: String,
    /// Trailing whitespace not shown yet: a marker for the end of the text goes before it.
    pending: String,
    /// Where each added marker ends in the text.
    added: Vec<usize>,
}

impl Attributor {
    /// `sources`: label number and text of each packed source.
    pub fn new(sources: &[(usize, &str)]) -> Attributor {
        Attributor {
            sources: sources
                .iter()
                .map(|(n, t)| (*n, content_words(t).into_iter().collect(), t.to_lowercase()))
                .collect(),
            written: String::new(),
            pending: String::new(),
            added: Vec::new(),
        }
    }

    /// What to show for the next streamed `piece`. Trailing full stops and whitespace are
    /// held back until the next piece shows whether a sentence ended there ("hertz." then
    /// " Engineers") or not ("llama." then "cpp"); a marker then goes in before them.
    pub fn push(&mut self, piece: &str) -> String {
        self.mark(Some(piece));
        let mut out = std::mem::take(&mut self.pending);
        out.push_str(piece);
        self.written.push_str(piece);
        let body = out.trim_end_matches(is_stop_or_space).len();
        self.pending = out.split_off(body);
        out
    }

    /// Cuts the answer so far back to `text`, a prefix of what was shown (a loop's copy was
    /// dropped from it).
    pub fn rewind(&mut self, text: &str) {
        debug_assert!(self.written.starts_with(text));
        self.written = text.to_string();
        self.pending.clear();
        self.added.retain(|&end| end <= text.len());
    }

    /// Markers added to the answer so far.
    pub fn added(&self) -> usize {
        self.added.len()
    }

    /// The rest of the answer when it is over: a marker for its last sentence if that has
    /// none (when the answer was `cut_short`, only if it is finished), and the held full stop;
    /// trailing whitespace is dropped.
    pub fn finish(&mut self, cut_short: bool) -> String {
        // An answer cut short ends in an unfinished sentence: that one gets no marker.
        if !cut_short || self.written.trim_end().ends_with(['.', '!', '?']) {
            self.mark(None);
        }
        let out = self.pending.trim_end().to_string();
        self.pending.clear();
        self.written.truncate(self.written.trim_end().len());
        out
    }

    /// Puts a marker into the held text when `next` (`None`: end of text) shows that the
    /// sentence before it ended without one.
    fn mark(&mut self, next: Option<&str>) {
        let Some(at) = cite_point(&self.written, next) else {
            return;
        };
        let body = &self.written[..at];
        let open = &body[sentences(body).last().map_or(0, |r| r.start)..];
        let words = content_words(open);
        let mut best: Option<(usize, f32)> = None;
        for (n, vocab, text) in &self.sources {
            let o = overlap(&words, vocab);
            let held = supports(&words, vocab) && names_hold(open, text);
            if held && best.is_none_or(|(_, b)| o > b) {
                best = Some((*n, o));
            }
        }
        let Some((n, _)) = best else {
            return;
        };
        let m = format!(" [S{n}]");
        // `at` is where the held text starts: the marker goes in front of it.
        debug_assert_eq!(at, self.written.len() - self.pending.len());
        self.written.insert_str(at, &m);
        self.pending.insert_str(0, &m);
        self.added.push(at + m.len());
    }
}

fn is_stop_or_space(c: char) -> bool {
    c.is_whitespace() || matches!(c, '.' | '!' | '?')
}

/// Where a marker goes in `written`, when the token text `next` (`None`: end of text) shows
/// that its last sentence or line ended there without one: after its last word, before the
/// full stop and whitespace that follow it.
fn cite_point(written: &str, next: Option<&str>) -> Option<usize> {
    // Inside a fenced code block nothing is a sentence.
    if written.matches("```").count() % 2 == 1 {
        return None;
    }
    let body = written.trim_end_matches(is_stop_or_space);
    let tail = &written[body.len()..];
    let stop = tail.contains(['.', '!', '?']);
    let ended = match next {
        None => true,
        // A full stop followed by whitespace ends a sentence ("1742." then " Engineers").
        Some(t) if stop => {
            tail.trim_start_matches(['.', '!', '?'])
                .starts_with(char::is_whitespace)
                || t.starts_with(char::is_whitespace)
        }
        // A line ended without one (a list item), unless the next piece goes on in lower case:
        // a sentence wrapped onto the next line ("… used to\ntrack the …").
        // Whitespace alone cannot tell yet; it stays held.
        Some(t) => {
            tail.contains('\n')
                && t.trim_start()
                    .chars()
                    .next()
                    .is_some_and(|c| !c.is_lowercase())
        }
    };
    if !ended || body.is_empty() {
        return None;
    }
    let open = &body[sentences(body).last().map_or(0, |r| r.start)..];
    // Mid-answer, fragments of one or two words ("Answer:", "1.") are no claims; a short
    // answer that ends the text ("1742 hertz") is.
    let min_words = if next.is_none() && markers(written).is_empty() {
        1
    } else {
        3
    };
    let word = open.split_whitespace().last().unwrap_or("");
    let abbreviation = stop
        && (word.chars().count() == 1
            || word.contains('.')
            || ["etc", "vs", "approx", "Mr", "Mrs", "Dr", "St"].contains(&word));
    if !markers(open).is_empty()
        || open.split_whitespace().count() < min_words
        || is_abstention(open)
        || abbreviation
        // A lead-in to a list.
        || (!stop && body.ends_with(':'))
    {
        return None;
    }
    Some(body.len())
}

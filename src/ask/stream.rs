//! What happens to the model's text between llama.cpp and the terminal, pure: text is
//! released a whole sentence at a time, so an answer that reaches its token limit or a
//! repetition stop ends at its last complete sentence and the unfinished rest is dropped
//! (reported, never shown); a sentence that starts saying again what an earlier one said is
//! held back and dropped, and generation goes on (a second repeat right after it, or
//! [`MAX_SKIPS`] in all, ends the answer: that is a loop); and sentences the model left
//! uncited get a marker (see [`cite::Attributor`]).
//!
//! Why drop the sentence rather than end the answer: the 1.5B often restates one phrase of
//! an earlier sentence ("… using the journal_mode PRAGMA") and then goes on to say something
//! new; ending the answer there cut 34% of its SQLite dev answers (#43). The 135M loops
//! sentence after sentence, and the second repeat in a row still ends it.
//!
//! Why a sentence-level guard on top of llama.cpp-side loop detection (`llm::repeating_tail`):
//! SmolLM2-135M at temperature 0 repeats its answer sentence with a different separator or a
//! list number in front ("1. The crew …", "2. The crew …"), which no exact token repeat
//! catches, and the stream would show every copy.

use super::cite::{self, sentences};
use crate::llm::StopReason;

/// A repeat is declared once this many words of an earlier sentence came again (or all of
/// it, when it is shorter but has at least [`MIN_REPEAT_WORDS`]).
const REPEAT_WORDS: usize = 8;
const MIN_REPEAT_WORDS: usize = 3;
/// Repeated sentences dropped before the next one ends the answer.
pub const MAX_SKIPS: usize = 3;

/// Lowercase words of a sentence, without list numbering and citation markers; the second
/// value says whether the last word may still grow (the text ends inside it).
fn words(sentence: &str) -> (Vec<String>, bool) {
    let mut w: Vec<String> = sentence
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| {
            let marker =
                w.len() > 1 && w.starts_with('s') && w[1..].bytes().all(|b| b.is_ascii_digit());
            !marker
        })
        .collect();
    // "1. The crew…" and "2. The crew…" say the same thing.
    while w
        .first()
        .is_some_and(|x| x.bytes().all(|b| b.is_ascii_digit()))
    {
        w.remove(0);
    }
    let open = sentence.chars().last().is_some_and(char::is_alphanumeric);
    (w, open)
}

/// How the open sentence `now` relates to an earlier sentence `before`.
#[derive(Debug, PartialEq)]
enum Echo {
    /// It diverged, or is too short to tell.
    No,
    /// So far it is the start of `before`.
    Maybe,
    /// It repeats `before`.
    Yes,
}

fn echo(now: &(Vec<String>, bool), before: &[String]) -> Echo {
    let (w, open) = now;
    if w.is_empty() || before.len() < MIN_REPEAT_WORDS {
        return Echo::No;
    }
    let complete = if *open { w.len() - 1 } else { w.len() };
    // The first words of a sentence cannot tell yet: a copy may start with a new word.
    if complete < 3 {
        return Echo::Maybe;
    }
    // A copy may swap its first word or two ("Goodput is a measure …", then "It is a
    // measure …"): compare from up to two words in on either side.
    let mut best = Echo::No;
    for skip in 0..=2.min(complete) {
        for from in 0..=2.min(before.len() - 1) {
            let have = &w[skip..complete];
            let rest = &before[from..];
            if have.is_empty() && !*open {
                continue;
            }
            if have.len() > rest.len() || *have != rest[..have.len()] {
                continue;
            }
            if *open
                && !rest
                    .get(have.len())
                    .is_some_and(|b| b.starts_with(&w[complete]))
            {
                continue;
            }
            if have.len() >= REPEAT_WORDS.min(rest.len()).max(MIN_REPEAT_WORDS) {
                return Echo::Yes;
            }
            // Held while it may turn out a copy: a few words of delay, never a shown copy.
            best = Echo::Maybe;
        }
    }
    best
}

/// Lowercase words of `s` with their byte offsets, citation markers left out.
fn word_offsets(s: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in s.char_indices().chain(std::iter::once((s.len(), ' '))) {
        match (c.is_alphanumeric(), start) {
            (true, None) => start = Some(i),
            (false, Some(b)) => {
                let w = s[b..i].to_lowercase();
                let marker =
                    w.len() > 1 && w.starts_with('s') && w[1..].bytes().all(|x| x.is_ascii_digit());
                if !marker {
                    out.push((b, w));
                }
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// Whether `run` occurs as consecutive words in `pool`.
fn occurs(run: &[String], pool: &[String]) -> bool {
    run.len() <= pool.len() && pool.windows(run.len()).any(|w| w == run)
}

/// A stretch of [`REPEAT_WORDS`] words said before, anywhere in the sentence ("This is why
/// the KV cache grows linearly with …" after "The KV cache grows linearly with …"): `Err`.
/// Otherwise the word index from which the sentence's end repeats at least two earlier
/// words, to hold back while it may grow into such a stretch.
fn repeated_stretch(words: &[String], earlier: &[Vec<String>]) -> Result<Option<usize>, ()> {
    let n = words.len();
    let before = |at: usize| {
        let own = &words[..at];
        move |run: &[String]| occurs(run, own) || earlier.iter().any(|e| occurs(run, e))
    };
    for start in 0..n.saturating_sub(REPEAT_WORDS - 1) {
        if before(start)(&words[start..start + REPEAT_WORDS]) {
            return Err(());
        }
    }
    // Two words are enough to hold back: holding costs a word or two of delay, showing the
    // first words of a copy cannot be taken back.
    Ok((0..n.saturating_sub(1)).find(|&start| before(start)(&words[start..])))
}

/// Holds back each sentence until it is complete, and drops it if it repeats an earlier one.
#[derive(Default)]
pub struct LoopGuard {
    /// The text generated, less the repeated sentences already dropped.
    text: String,
    /// Bytes of `text` released.
    shown: usize,
    /// What was generated and never released: repeated sentences, the start of the repeat
    /// that ended the answer, or the unfinished sentence an answer cut at its token limit
    /// ended in (one line each).
    dropped: String,
    /// The repeated sentence being generated: where what goes with it starts (a lead-in, a
    /// list number), and where the sentence itself starts. Both are dropped once it ends.
    skipping: Option<(usize, usize)>,
    /// Where the text went on after the last repeated sentence dropped.
    resumed: Option<usize>,
    /// Repeated sentences dropped.
    skips: usize,
}

impl LoopGuard {
    /// The text to release after `piece`; `None` when the answer loops (a repeat right
    /// after a dropped one, or more than [`MAX_SKIPS`]): generation should stop, the repeat
    /// is dropped, and [`LoopGuard::finish`] releases the whole sentences held before it.
    pub fn push(&mut self, piece: &str) -> Option<String> {
        self.text.push_str(piece);
        if let Some((from, sentence)) = self.skipping {
            let Some(next) = self.after_sentence(sentence) else {
                return Some(String::new());
            };
            self.drop_range(from, next);
            self.skipping = None;
            self.resumed = Some(from);
        }
        let spans = sentences(&self.text);
        let all: Vec<Vec<String>> = spans
            .iter()
            .map(|r| words(&self.text[r.clone()]).0)
            .collect();
        let mut upto = self.text.len();
        for (i, span) in spans.iter().enumerate() {
            if span.end <= self.shown {
                continue;
            }
            match self.sentence_limit(&spans, &all, i, upto) {
                Some(u) => upto = u,
                None => return self.repeat_at(span.start, &spans[..i], upto),
            }
        }
        // The last sentence may still grow (or be cut by the token limit): only whole ones go,
        // and a list number before it ("2.") waits with it.
        if let Some(open) = spans.last() {
            let from = self.wordless_before(&spans[..spans.len() - 1], open.start);
            upto = upto.min(from.max(self.shown));
        }
        let out = self.text[self.shown..upto].to_string();
        self.shown = upto;
        Some(out)
    }

    /// How far the shown text may go once sentence `i` of `spans` is read (`all`: each
    /// sentence's words), from `upto`: None where the sentence repeats an earlier one.
    fn sentence_limit(
        &self,
        spans: &[std::ops::Range<usize>],
        all: &[Vec<String>],
        i: usize,
        mut upto: usize,
    ) -> Option<usize> {
        let span = &spans[i];
        let last = i + 1 == spans.len();
        // Only the last sentence can still grow; an earlier one is over.
        let now = if last {
            words(&self.text[span.clone()])
        } else {
            (all[i].clone(), false)
        };
        let mut maybe = false;
        for before in &all[..i] {
            match echo(&now, before) {
                Echo::Yes => return None,
                Echo::Maybe => maybe = true,
                Echo::No => {}
            }
        }
        // Complete words of this sentence (an open last word may still grow).
        let mut own = word_offsets(&self.text[span.clone()]);
        if last && now.1 {
            own.pop();
        }
        let (offsets, own): (Vec<usize>, Vec<String>) = own.into_iter().unzip();
        match repeated_stretch(&own, &all[..i]) {
            Err(()) => return None,
            Ok(Some(w)) if last => {
                // A copy that starts within the first three words ("This is why the KV
                // cache …") is held from the sentence's start, so no stub of it shows.
                let from = if w <= 3 { 0 } else { offsets[w] };
                upto = upto.min((span.start + from).max(self.shown));
            }
            Ok(_) => {}
        }
        if maybe && last {
            upto = upto.min(span.start.max(self.shown));
        }
        Some(upto)
    }

    /// What is still held when generation is over. `whole`: the generator ended the answer
    /// itself, so the held text is its last sentence, finished. Otherwise (a token limit, a
    /// full context) the held text is released only if it ends a sentence; else dropped.
    pub fn finish(&mut self, whole: bool) -> String {
        if let Some((from, _)) = self.skipping.take() {
            self.drop_range(from, self.text.len());
        }
        if !whole && !ends_sentence(&self.text[self.shown..]) {
            self.drop_held();
            return String::new();
        }
        let out = self.text[self.shown..].to_string();
        self.shown = self.text.len();
        out
    }

    /// Drops what is held, keeping it as [`LoopGuard::dropped`].
    pub fn drop_held(&mut self) {
        self.cut_at(self.shown);
    }

    /// Ends the text at `at` (the start of a repeating sentence): the whole sentences before
    /// it stay to be released by [`LoopGuard::finish`], the rest is dropped.
    fn cut_at(&mut self, at: usize) {
        let before = sentences(&self.text[..at.max(self.shown)]);
        let at = self.wordless_before(&before, at).max(self.shown);
        self.drop_range(at, self.text.len());
    }

    /// The sentence starting at `at` repeats an earlier one (`spans` end at `at`; `upto`:
    /// how far the text before it may be released): drop it and go on, or end the answer
    /// when it comes right after a dropped repeat or there were [`MAX_SKIPS`] already.
    fn repeat_at(
        &mut self,
        at: usize,
        spans: &[std::ops::Range<usize>],
        upto: usize,
    ) -> Option<String> {
        let sentence = at;
        let at = self.wordless_before(spans, at).max(self.shown);
        let right_after = self.resumed.is_some_and(|r| self.shown <= r);
        if right_after || self.skips >= MAX_SKIPS {
            self.cut_at(at);
            return None;
        }
        self.skips += 1;
        self.skipping = Some((at, sentence));
        let upto = upto.min(at).max(self.shown);
        let out = self.text[self.shown..upto].to_string();
        self.shown = upto;
        Some(out)
    }

    /// Where the text after the sentence starting at `from` begins, once a sentence with a
    /// word has started after it (so a citation marker after its full stop stays with it).
    fn after_sentence(&self, from: usize) -> Option<usize> {
        let spans = sentences(&self.text[from..]);
        let has_word = |r: &std::ops::Range<usize>| {
            let (w, open) = words(&self.text[from + r.start..from + r.end]);
            w.len() > usize::from(open)
        };
        let next = spans.get(1)?;
        spans[1..].iter().any(has_word).then_some(from + next.start)
    }

    /// Removes `from..to` from the text, keeping it as a line of [`LoopGuard::dropped`].
    fn drop_range(&mut self, from: usize, to: usize) {
        let gone = self.text[from..to].trim();
        if !gone.is_empty() {
            if !self.dropped.is_empty() {
                self.dropped.push('\n');
            }
            self.dropped.push_str(gone);
        }
        self.text.replace_range(from..to, "");
    }

    /// Text generated and never released (empty when nothing was dropped).
    pub fn dropped(&self) -> &str {
        &self.dropped
    }

    /// Repeated sentences dropped while the answer went on.
    pub fn skips(&self) -> usize {
        self.skips
    }

    /// Where the sentence at `at` starts once the spans right before it that lead into it
    /// (a list number, a bullet, a blank line, a line ending in a colon such as "For
    /// example:") count as part of it; `spans` end at `at`. So a lead-in waits for what it
    /// introduces and goes with it when that is dropped. A code fence is not one: it closes
    /// the block before.
    fn wordless_before(&self, spans: &[std::ops::Range<usize>], at: usize) -> usize {
        let mut at = at;
        for span in spans.iter().rev() {
            if span.start < self.shown || !leads_in(&self.text[span.clone()]) {
                break;
            }
            at = span.start;
        }
        at
    }
}

/// Whether `span` only leads into the sentence after it: what numbers a list item ("2.",
/// "3)", "-", "*"), whitespace, or a line that ends in a colon.
fn leads_in(span: &str) -> bool {
    let t = span.trim();
    if t.ends_with(':') {
        return true;
    }
    let digits = t.trim_end_matches(['.', ')']);
    t.is_empty()
        || matches!(t, "-" | "*" | "+")
        || (digits.len() < t.len()
            && !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `text` ends a sentence: a full stop, `!` or `?` last, before any closing quote,
/// bracket or citation marker (or nothing but whitespace).
fn ends_sentence(text: &str) -> bool {
    let mut t = text.trim_end();
    loop {
        let before = t.len();
        if let Some(open) = t.rfind('[').filter(|_| t.ends_with(']')) {
            if cite::markers(&t[open..]).len() == 1 {
                t = t[..open].trim_end();
            }
        }
        t = t.trim_end_matches(['"', '\'', ')', '*', '`', '\u{201d}', '\u{2019}']);
        if t.len() == before {
            break;
        }
    }
    t.is_empty() || t.ends_with(['.', '!', '?'])
}

/// The model's pieces in, the pieces to show out: the loop guard, then citations.
pub struct AnswerStream {
    guard: LoopGuard,
    cite: Option<cite::Attributor>,
    looped: bool,
}

impl AnswerStream {
    /// `sources`: label number and text of each packed source; `add_citations` turns the
    /// attributor on.
    pub fn new(sources: &[(usize, &str)], add_citations: bool) -> AnswerStream {
        AnswerStream {
            guard: LoopGuard::default(),
            cite: add_citations.then(|| cite::Attributor::new(sources)),
            looped: false,
        }
    }

    /// The text to show after the model's `piece`; `None`: the answer repeats itself, stop.
    pub fn push(&mut self, piece: &str) -> Option<String> {
        let Some(text) = self.guard.push(piece) else {
            self.looped = true;
            return None;
        };
        Some(match &mut self.cite {
            // Nothing released (the guard holds a sentence): nothing for the citer to judge.
            Some(a) if !text.is_empty() => a.push(&text),
            _ => text,
        })
    }

    /// The rest to show once generation is over. `cut`: llama.cpp-side loop detection
    /// stopped it, and `shown` (everything shown so far) was cut back to before the copy.
    /// `whole`: the generator ended the answer itself (not a limit), so what is held is
    /// its finished last sentence.
    pub fn finish(&mut self, shown: &str, cut: bool, whole: bool) -> String {
        // A repeat was cut at its sentence's start: what is held before it is whole sentences.
        let held = if self.looped {
            self.guard.finish(true)
        } else if cut {
            self.guard.drop_held();
            String::new()
        } else {
            self.guard.finish(whole)
        };
        let Some(a) = &mut self.cite else {
            return held;
        };
        let mut rest = String::new();
        if cut {
            a.rewind(shown);
        } else {
            rest = a.push(&held);
        }
        // Only whole sentences were shown, unless llama.cpp's loop cut took a copy off.
        rest.push_str(&a.finish(cut));
        rest
    }

    /// Text generated and never shown: the start of a repeat, or an unfinished last sentence.
    pub fn dropped(&self) -> &str {
        self.guard.dropped()
    }

    /// Whether the guard ended the answer at a repeated sentence (a loop).
    pub fn looped(&self) -> bool {
        self.looped
    }

    /// Repeated sentences dropped while the answer went on.
    pub fn skips(&self) -> usize {
        self.guard.skips()
    }

    /// Markers rag added to the answer.
    pub fn added_citations(&self) -> usize {
        self.cite.as_ref().map_or(0, |a| a.added())
    }

    /// Ends an answer that was not interrupted and stopped for `stop`: a repeated tail
    /// dropped from `raw` (the text shown so far), the stop reason made `Repetition` where
    /// the loop guard cut the answer, the last whole sentences released (an unfinished one
    /// dropped unless the generator ended the answer itself), and the citer's last words
    /// added to `raw`. Returns the text still to be shown and the stop reason. One-shot and
    /// batched answers end here alike.
    pub fn end(&mut self, raw: &mut String, stop: StopReason) -> (String, StopReason) {
        let cut = stop == StopReason::Repetition;
        if cut {
            *raw = drop_repeat(raw);
        }
        let stop = if self.looped() {
            StopReason::Repetition
        } else {
            stop
        };
        let rest = self.finish(raw, cut, stop == StopReason::EndOfText);
        raw.push_str(&rest);
        if !self.dropped().is_empty() {
            tracing::info!(
                stop = ?stop,
                dropped = self.dropped(),
                "the answer ends at its last whole sentence"
            );
        }
        (rest, stop)
    }

    /// How the stream ended, after [`AnswerStream::end`] or as it stood when interrupted.
    pub fn ended(&self) -> Ended {
        Ended {
            added_citations: self.added_citations(),
            dropped: self.dropped().to_string(),
            repeats_dropped: self.skips(),
        }
    }
}

/// How an answer's stream ended: the markers the citer added, and the text generated but
/// never shown (an unfinished last sentence at a limit, the start of a repeat).
pub struct Ended {
    pub added_citations: usize,
    pub dropped: String,
    pub repeats_dropped: usize,
}

/// `text` without its last copy of a stretch written twice at its end, with at most a few
/// whitespace characters between the copies (a loop llama.cpp-side detection cut).
pub fn drop_repeat(text: &str) -> String {
    let t = text.trim_end();
    let n = t.len();
    // The earliest start gives the longest doubled stretch: the whole loop.
    for (start, _) in t.char_indices() {
        for gap in 0..=4 {
            let Some(twice) = (n - start).checked_sub(gap) else {
                break;
            };
            if twice == 0 || twice % 2 == 1 {
                continue;
            }
            let half = twice / 2;
            let (a_end, b_start) = (start + half, n - half);
            if t.is_char_boundary(a_end)
                && t.is_char_boundary(b_start)
                && t[start..a_end] == t[b_start..]
                && t[a_end..b_start].chars().all(char::is_whitespace)
            {
                return t[..a_end].to_string();
            }
        }
    }
    t.to_string()
}

#[cfg(test)]
mod tests;

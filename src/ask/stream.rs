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
                    Echo::Yes => return self.repeat_at(span.start, &spans[..i], upto),
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
                Err(()) => return self.repeat_at(span.start, &spans[..i], upto),
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
mod tests {
    use super::*;

    fn guarded(pieces: &[&str]) -> (String, bool) {
        let mut g = LoopGuard::default();
        let mut out = String::new();
        for p in pieces {
            match g.push(p) {
                Some(t) => out.push_str(&t),
                None => {
                    out.push_str(&g.finish(true));
                    return (out, true);
                }
            }
        }
        out.push_str(&g.finish(true));
        (out, false)
    }

    #[test]
    fn a_repeated_sentence_is_dropped_and_never_shown() {
        let s = "The cache stores the key and value vectors of every token. ";
        let (out, looped) = guarded(&[
            s,
            "\n\n",
            "The cache stores the key and",
            " value vectors",
            " of every",
        ]);
        assert!(!looped);
        assert_eq!(out.trim_end(), s.trim_end());
        // Numbered copies are copies.
        let (out, looped) = guarded(&[
            "1. The crew of six rotates often.\n",
            "2. The crew of six rotates often.\n",
        ]);
        assert!(!looped);
        assert_eq!(out.trim_end(), "1. The crew of six rotates often.");
        // Token by token, the copy's list number is never shown either.
        let (out, looped) = guarded(&[
            "1.",
            " The crew of six",
            " rotates often.",
            "\n",
            "2.",
            " The",
            " crew of six",
            " rotates",
            " often",
            ".",
        ]);
        assert!(!looped);
        assert_eq!(out.trim_end(), "1. The crew of six rotates often.");
        // A copy with a new first word.
        let (out, looped) = guarded(&[
            "Goodput is a measure of how much a server can do in a single request. ",
            "It is a measure of how much a server can",
        ]);
        assert!(!looped);
        assert_eq!(
            out.trim_end(),
            "Goodput is a measure of how much a server can do in a single request."
        );
        let mut g = LoopGuard::default();
        let mut out = String::new();
        for p in [
            "Goodput is a measure of load. ",
            "It",
            " is",
            " a",
            " measure",
            " of",
            " load",
            ".",
        ] {
            match g.push(p) {
                Some(t) => out.push_str(&t),
                None => break,
            }
        }
        assert_eq!(
            out.trim_end(),
            "Goodput is a measure of load.",
            "no word of the copy is shown"
        );
    }

    #[test]
    fn a_stretch_said_before_drops_the_sentence_it_is_in() {
        let (out, looped) = guarded(&[
            "The KV cache grows linearly with the number of tokens. ",
            "This is why the KV cache grows",
            " linearly with the",
            " number of",
        ]);
        assert!(!looped);
        // Held from the start of the sentence the copy began in.
        assert_eq!(
            out.trim_end(),
            "The KV cache grows linearly with the number of tokens."
        );
        let mut a = AnswerStream::new(
            &[(1, "The KV cache grows linearly with the number of tokens.")],
            true,
        );
        let mut shown = String::new();
        for p in [
            "The KV cache grows linearly with the number of tokens.",
            " This is why the KV cache grows linearly with the number of",
        ] {
            if let Some(t) = a.push(p) {
                shown.push_str(&t);
            }
        }
        assert!(!a.looped());
        assert_eq!(a.skips(), 1);
        shown.push_str(&a.finish(&shown, false, false));
        assert_eq!(
            shown,
            "The KV cache grows linearly with the number of tokens [S1]."
        );
        // The sentence the copy started in is dropped whole, never shown half.
        let mut a = AnswerStream::new(
            &[(1, "The KV cache grows linearly with the number of tokens.")],
            true,
        );
        let mut shown = String::new();
        let pieces = [
            "The KV cache grows linearly with the number of tokens.",
            " It",
            " grows",
            " fast",
            " and",
            " then",
            " the KV cache grows linearly with the number of",
        ];
        for p in pieces {
            if let Some(t) = a.push(p) {
                shown.push_str(&t);
            }
        }
        assert!(!a.looped());
        assert_eq!(a.skips(), 1);
        shown.push_str(&a.finish(&shown, false, false));
        assert_eq!(
            shown,
            "The KV cache grows linearly with the number of tokens [S1]."
        );
        assert!(
            a.dropped().starts_with("It grows fast and then"),
            "{}",
            a.dropped()
        );
        // Within one sentence.
        let (_, looped) = guarded(&[
            "The model is told to answer only from the sources, so the model is told to answer only from the",
        ]);
        assert!(!looped);
        // Three shared words are no loop.
        assert_eq!(
            guarded(&[
                "The size of the cache grows. ",
                "It limits the size of the batch."
            ]),
            (
                "The size of the cache grows. It limits the size of the batch.".to_string(),
                false
            )
        );
    }

    #[test]
    fn the_answer_goes_on_after_a_dropped_repeat() {
        // A restated phrase is dropped with its sentence; what comes after it is shown.
        let mut g = LoopGuard::default();
        let mut out = String::new();
        for p in [
            "Keep the file by setting the PERSIST journaling mode using the journal_mode pragma.",
            " This zeroes the header by setting the PERSIST journaling mode using the journal_mode",
            " pragma.",
            " [S2]",
            " The header",
            " is zeroed instead.",
        ] {
            out.push_str(&g.push(p).expect("one repeat does not end the answer"));
        }
        out.push_str(&g.finish(true));
        assert_eq!(
            out,
            "Keep the file by setting the PERSIST journaling mode using the journal_mode pragma. The header is zeroed instead."
        );
        assert_eq!(g.skips(), 1);
        assert!(
            g.dropped().starts_with("This zeroes the header"),
            "{}",
            g.dropped()
        );
        assert!(
            g.dropped().ends_with("pragma. [S2]"),
            "the marker goes with its sentence"
        );
    }

    #[test]
    fn a_repeat_right_after_a_dropped_one_or_too_many_repeats_end_the_answer() {
        // A repeat right after a dropped one is a loop: the answer ends there.
        let (out, looped) = guarded(&[
            "1. The crew of six rotates often.\n",
            "2. The crew of six rotates often.\n",
            "3. The crew of six rotates often.\n",
        ]);
        assert!(looped);
        assert_eq!(out.trim_end(), "1. The crew of six rotates often.");
        // Repeats apart from each other are dropped up to MAX_SKIPS; the next ends it.
        let mut pieces = vec!["The cache stores keys and values of each token. ".to_string()];
        let facts = [
            "Prefill reads the prompt.",
            "Decode writes tokens.",
            "Batching shares weights.",
            "Quantization saves memory.",
        ];
        for fact in &facts[..=MAX_SKIPS] {
            pieces.push(format!("{fact} "));
            pieces.push("The cache stores keys and values of each token. ".into());
        }
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        let (out, looped) = guarded(&refs);
        assert!(looped);
        assert_eq!(out.matches("The cache stores").count(), 1, "{out}");
        assert!(out.contains(facts[MAX_SKIPS]), "{out}");
    }

    #[test]
    fn a_lead_in_goes_with_the_repeat_it_introduced_and_a_code_fence_stays() {
        // A closing code fence is not dropped with the repeat after it.
        let (out, _) = guarded(&[
            "Enable it with the auto_vacuum pragma set to FULL mode:\n```sql\nPRAGMA auto_vacuum = FULL;\n",
            "```\n",
            "This will enable it with the auto_vacuum pragma set to FULL mode.",
        ]);
        assert!(out.trim_end().ends_with("```"), "{out:?}");
        // A lead-in goes with the one repeat it introduced, and the answer goes on.
        let (out, looped) = guarded(&[
            "Set the journal mode to PERSIST with the journal_mode pragma. ",
            "For example:\n",
            "Set the journal mode to PERSIST with the journal_mode pragma.\n",
            "The header is zeroed instead.",
        ]);
        assert!(!looped);
        assert_eq!(
            out,
            "Set the journal mode to PERSIST with the journal_mode pragma.\nThe header is zeroed instead."
        );
        // A lead-in goes with the repeat it introduced.
        let (out, looped) = guarded(&[
            "Set the journal mode to PERSIST with the journal_mode pragma. For example:\n",
            "PRAGMA journal_mode=PERSIST;\n",
            "For example:\n",
            "PRAGMA journal_mode=PERSIST;\n",
        ]);
        assert!(!looped);
        assert_eq!(
            out.trim_end(),
            "Set the journal mode to PERSIST with the journal_mode pragma. For example:\nPRAGMA journal_mode=PERSIST;"
        );
    }

    #[test]
    fn a_sentence_that_only_starts_alike_is_released_in_full() {
        let (out, looped) = guarded(&[
            "The cache stores keys. ",
            "The cache",
            " grows with",
            " context.",
        ]);
        assert!(!looped);
        assert_eq!(out, "The cache stores keys. The cache grows with context.");
        // Held while it may be a repeat, released at the end of the text.
        let mut g = LoopGuard::default();
        assert_eq!(g.push("It is loud. It is").as_deref(), Some("It is loud."));
        assert_eq!(g.finish(true), " It is");
        // Short sentences may repeat ("Yes.").
        assert_eq!(guarded(&["Yes. Yes."]), ("Yes. Yes.".to_string(), false));
    }

    #[test]
    fn the_stream_cites_and_finishes_with_the_last_marker() {
        let mut a = AnswerStream::new(&[(1, "The regulator hums at 1742 hertz.")], true);
        let mut shown = String::new();
        for p in ["The", " regulator", " hums", " at", " 1742", " hertz", "\n"] {
            shown.push_str(&a.push(p).unwrap());
        }
        let rest = a.finish(&shown, false, true);
        assert_eq!(
            format!("{shown}{rest}"),
            "The regulator hums at 1742 hertz [S1]"
        );
        assert_eq!(a.added_citations(), 1);
    }

    #[test]
    fn only_whole_sentences_are_shown_and_a_limit_drops_the_unfinished_one() {
        let mut a = AnswerStream::new(&[(1, "The regulator hums at 1742 hertz.")], true);
        let mut shown = String::new();
        for p in [
            "The regulator",
            " hums at 1742",
            " hertz.",
            " It is",
            " loud and",
        ] {
            let t = a.push(p).unwrap();
            assert!(
                !t.contains("It is"),
                "an unfinished sentence is never released: {t:?}"
            );
            shown.push_str(&t);
        }
        assert_eq!(
            shown, "The regulator hums at 1742 hertz",
            "the full stop waits for what follows"
        );
        // The token limit: the open sentence is dropped, the finished one gets its marker.
        shown.push_str(&a.finish(&shown, false, false));
        assert_eq!(shown, "The regulator hums at 1742 hertz [S1].");
        assert_eq!(a.dropped(), "It is loud and");
        // A limit reached right after a full stop keeps the sentence.
        let mut g = LoopGuard::default();
        assert_eq!(
            g.push("It is loud. It hums [S1].").as_deref(),
            Some("It is loud.")
        );
        assert_eq!(g.finish(false), " It hums [S1].");
        assert_eq!(g.dropped(), "");
        // Version numbers and file names do not end a sentence; a line does.
        let mut g = LoopGuard::default();
        assert_eq!(g.push("Use llama.cpp 2.5 here").as_deref(), Some(""));
        assert_eq!(
            g.push("\n- then").as_deref(),
            Some("Use llama.cpp 2.5 here\n")
        );
        assert_eq!(g.finish(false), "");
        assert_eq!(g.dropped(), "- then");
        for (text, ends) in [
            ("Done.", true),
            ("Done.\" [S2]  ", true),
            ("  ", true),
            ("(see above).)", true),
            ("It is", false),
            ("It costs 2", false),
            ("The steps are:", false),
        ] {
            assert_eq!(ends_sentence(text), ends, "{text:?}");
        }
    }

    #[test]
    fn a_doubled_tail_loses_its_copy() {
        assert_eq!(
            drop_repeat("Intro. The cache stores keys. The cache stores keys. "),
            "Intro. The cache stores keys."
        );
        assert_eq!(drop_repeat("no loop here"), "no loop here");
        assert_eq!(drop_repeat("é€é€"), "é€");
        assert_eq!(
            drop_repeat("Answer:\n\nKV stores keys.\n\nAnswer:\n\nKV stores keys."),
            "Answer:\n\nKV stores keys."
        );
    }
}

//! Document → chunks, pure. Splits by structure with the `text-splitter` crate (Markdown
//! headings, then blocks, paragraphs, sentences; blank lines for code), sized in the
//! embedding model's own tokens. Each chunk carries its heading path, which is embedded with
//! it, its line range and a stable id.

use text_splitter::{ChunkConfig, ChunkSizer, MarkdownSplitter, TextSplitter};

use super::parse::Document;

/// Tokens of the chunk budget kept for the heading path, which is embedded with the text.
pub const HEADING_BUDGET: usize = 32;

#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    /// blake3 of path, heading and text: the same chunk gets the same id on every run and
    /// every Rust release (never `DefaultHasher`).
    pub id: String,
    pub path: String,
    /// `Guide > Install > Linux`; empty before the first heading.
    pub heading: String,
    /// 1-based, inclusive, in the file's own lines (text formats) or extracted text (PDF).
    pub line_start: u32,
    pub line_end: u32,
    pub text: String,
}

impl Chunk {
    /// What the embedder reads: the heading path gives a chunk its context.
    pub fn embed_text(&self) -> String {
        if self.heading.is_empty() {
            self.text.clone()
        } else {
            format!("{}\n\n{}", self.heading, self.text)
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct ChunkOptions {
    /// Largest chunk in embedder tokens, heading path included.
    pub max_tokens: usize,
    pub min_tokens: usize,
    pub overlap_tokens: usize,
}

pub fn chunk_id(path: &str, heading: &str, text: &str) -> String {
    let mut h = blake3::Hasher::new();
    for part in [path, heading, text] {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().to_hex()[..32].to_string()
}

/// Splits a document. `sizer` counts tokens without special tokens (the embedder's tokenizer).
pub fn chunk<S: ChunkSizer>(doc: &Document, sizer: &S, opts: ChunkOptions) -> Vec<Chunk> {
    let text = doc.text.as_str();
    let pieces = split_pieces(doc, sizer, opts);
    let headings = if doc.format.has_headings() {
        headings(text)
    } else {
        Vec::new()
    };
    let title = doc.title.clone().unwrap_or_default();
    let mut path = HeadingPath::default();

    let mut line = 1u32;
    let mut line_at = 0usize;
    let mut out = Vec::with_capacity(pieces.len());
    for (offset, piece) in pieces {
        if piece.trim().is_empty() {
            continue;
        }
        // Offsets only grow, so lines are counted incrementally.
        if offset >= line_at {
            line += count_newlines(&text[line_at..offset]);
            line_at = offset;
        } else {
            line = 1 + count_newlines(&text[..offset]);
            line_at = offset;
        }
        let trimmed = piece.trim_end();
        let line_end = line + count_newlines(trimmed);
        let heading = fit_heading(path.at(&headings, &title, offset, piece), sizer);
        out.push(Chunk {
            id: chunk_id(&doc.path, &heading, trimmed),
            path: doc.path.clone(),
            heading,
            line_start: line,
            line_end,
            text: trimmed.to_string(),
        });
    }
    out
}

/// The document's pieces with their offsets, sized to leave room for the embedded heading path.
fn split_pieces<'d, S: ChunkSizer>(
    doc: &'d Document,
    sizer: &S,
    opts: ChunkOptions,
) -> Vec<(usize, &'d str)> {
    let body_max = opts.max_tokens.saturating_sub(HEADING_BUDGET).max(8);
    let body_min = opts.min_tokens.clamp(1, body_max);
    // text-splitter requires the overlap to be below the desired size.
    let overlap = opts.overlap_tokens.min(body_min - 1);
    let config = ChunkConfig::new(body_min..=body_max)
        .with_sizer(sizer)
        .with_overlap(overlap)
        .expect("overlap is below capacity");
    let text = doc.text.as_str();
    let mut pieces: Vec<(usize, &str)> = Vec::new();
    // Plain text and code: the splitter's semantic levels are line breaks and blank lines,
    // so code splits between definitions and paragraphs stay whole when they fit.
    let (markdown, plain) = if doc.format.has_headings() {
        (Some(MarkdownSplitter::new(config)), None)
    } else {
        (None, Some(TextSplitter::new(config)))
    };
    for (start, window) in windows(text, WINDOW_BYTES) {
        let found: Vec<(usize, &str)> = match (&markdown, &plain) {
            (Some(m), _) => m.chunk_indices(window).collect(),
            (_, Some(p)) => p.chunk_indices(window).collect(),
            _ => Vec::new(),
        };
        pieces.extend(found.into_iter().map(|(o, p)| (start + o, p)));
    }
    pieces
}

fn count_newlines(s: &str) -> u32 {
    s.bytes().filter(|&b| b == b'\n').count() as u32
}

/// (byte offset, level, title) of each Markdown ATX heading outside fenced code.
fn headings(text: &str) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    let mut offset = 0;
    let mut fence: Option<&str> = None;
    for line in text.split_inclusive('\n') {
        let t = line.trim_start();
        if let Some(f) = fence {
            if t.starts_with(f) {
                fence = None;
            }
        } else if t.starts_with("```") {
            fence = Some("```");
        } else if t.starts_with("~~~") {
            fence = Some("~~~");
        } else {
            let level = t.chars().take_while(|&c| c == '#').count();
            if (1..=6).contains(&level) && t[level..].starts_with([' ', '\t']) {
                let title = t[level..].trim().trim_end_matches('#').trim();
                if !title.is_empty() {
                    out.push((offset, level, title.to_string()));
                }
            }
        }
        offset += line.len();
    }
    out
}

/// The heading path in force where a chunk starts; a chunk that opens with its own heading
/// gets that heading too. Chunks arrive in offset order, so the stack of open headings is
/// carried from one chunk to the next: a file of 300,000 headings took a minute when each
/// chunk walked every heading from the top.
#[derive(Default)]
struct HeadingPath<'a> {
    /// Headings consumed so far, and where the last chunk started.
    next: usize,
    start: usize,
    stack: Vec<(usize, &'a str)>,
}

impl<'a> HeadingPath<'a> {
    fn at(
        &mut self,
        headings: &'a [(usize, usize, String)],
        title: &str,
        offset: usize,
        piece: &str,
    ) -> String {
        let lead = piece.len() - piece.trim_start().len();
        let start = offset + lead;
        if start < self.start {
            // Overlapping chunks may step back a little: start over.
            *self = HeadingPath::default();
        }
        self.start = start;
        while let Some((at, level, text)) = headings.get(self.next) {
            if *at > start {
                break;
            }
            while self.stack.last().is_some_and(|(l, _)| *l >= *level) {
                self.stack.pop();
            }
            self.stack.push((*level, text));
            self.next += 1;
        }
        let mut parts: Vec<&str> = self.stack.iter().map(|(_, t)| *t).collect();
        if !title.is_empty() && parts.first() != Some(&title) {
            parts.insert(0, title);
        }
        parts.join(" > ")
    }
}

/// Text is split in windows of at most this many bytes: text-splitter measures the next
/// semantic unit whole, so on a 9 MB file of one line it tokenized the rest of the file
/// for every chunk (6 minutes). Most documents fit one window and split exactly as before.
const WINDOW_BYTES: usize = 64 * 1024;

/// `text` cut into windows of at most `max` bytes, each with its offset: at the last blank
/// line of a window, else its last line break, else its last space, else a char boundary.
fn windows(text: &str, max: usize) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = 0;
    while text.len() - start > max {
        let mut end = start + max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let window = &text[start..end];
        let cut = window
            .rfind("\n\n")
            .map(|i| i + 2)
            .or_else(|| window.rfind('\n').map(|i| i + 1))
            .or_else(|| window.rfind(' ').map(|i| i + 1))
            .filter(|&i| i > 0)
            .unwrap_or(window.len());
        out.push((start, &text[start..start + cut]));
        start += cut;
    }
    out.push((start, &text[start..]));
    out
}

/// Keeps the heading path within its token budget by dropping its outermost parts.
fn fit_heading<S: ChunkSizer>(heading: String, sizer: &S) -> String {
    let mut h = heading;
    while !h.is_empty() && sizer.size(&h) > HEADING_BUDGET - 2 {
        h = match h.split_once(" > ") {
            Some((_, rest)) => rest.to_string(),
            None => h.chars().take(h.chars().count() / 2).collect(),
        };
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::parse::parse;

    /// One token per whitespace-separated word: enough to test structure without a model.
    struct Words;
    impl ChunkSizer for Words {
        fn size(&self, s: &str) -> usize {
            s.split_whitespace().count()
        }
    }

    #[test]
    fn windows_cut_at_blank_lines_then_lines_then_spaces_and_cover_the_text() {
        let text = "aaaa\n\nbbbb\ncccc dddd eeee";
        let w = windows(text, 9);
        assert_eq!(w[0], (0, "aaaa\n\n"));
        assert_eq!(w[1], (6, "bbbb\n"));
        let joined: String = w.iter().map(|(_, s)| *s).collect();
        assert_eq!(joined, text);
        assert!(w
            .iter()
            .all(|(o, s)| &text[*o..*o + s.len()] == *s && s.len() <= 9));
        assert_eq!(windows("short", 9), vec![(0, "short")]);
        let cafe = "é".repeat(10);
        assert!(windows(&cafe, 3)
            .iter()
            .all(|(_, s)| s.len() <= 3 && !s.is_empty()));
    }

    #[test]
    fn a_long_single_line_and_many_headings_chunk_correctly() {
        let line = "word ".repeat(60_000);
        let doc = parse("long.txt", line.as_bytes()).unwrap();
        let chunks = chunk(&doc, &Words, opts(100));
        assert!(chunks.iter().all(|c| c.line_start == 1 && c.line_end == 1));
        let words: usize = chunks
            .iter()
            .map(|c| c.text.split_whitespace().count())
            .sum();
        assert_eq!(words, 60_000, "no text lost at window cuts");
        let heads: String = (0..20_000)
            .map(|i| format!("# h{i}\n\nbody {i}\n"))
            .collect();
        let doc = parse("heads.md", heads.as_bytes()).unwrap();
        let chunks = chunk(&doc, &Words, opts(40));
        let last = chunks.last().unwrap();
        assert!(last.heading.ends_with("h19999"), "{}", last.heading);
    }

    /// The speed guard for the input above, in `make stress` rather than `make test`. No
    /// count of work tells the windowed chunker from the unwindowed one (both ask the sizer
    /// for the same text; the quadratic part is text-splitter's own scan of a window), and a
    /// wall-clock bound fails on a slow or busy machine (71 s against a 60 s bound on an idle
    /// 2-core one, 2026-12-03). So the bound is a ratio measured side by side: 2 MB takes
    /// about 8 times as long as 256 KB when the cost is linear in the number of 64 KB
    /// windows, about 60 times when one scan covers the whole line.
    #[test]
    #[ignore = "a speed guard: make stress runs it"]
    fn a_2_mb_single_line_chunks_in_time_linear_in_its_length() {
        let time = |bytes: usize| {
            let doc = parse("long.txt", "word ".repeat(bytes / 5).as_bytes()).unwrap();
            let started = std::time::Instant::now();
            let chunks = chunk(&doc, &Words, opts(100));
            assert!(!chunks.is_empty());
            started.elapsed().as_secs_f64()
        };
        let small = time(256_000);
        let big = time(2_000_000);
        assert!(
            big < 20.0 * small,
            "2 MB took {big:.1} s, {:.1} times 256 KB's {small:.1} s",
            big / small
        );
    }

    fn opts(max: usize) -> ChunkOptions {
        ChunkOptions {
            max_tokens: max,
            min_tokens: 1,
            overlap_tokens: 0,
        }
    }

    #[test]
    fn heading_paths_and_lines() {
        let md = "# Guide\nintro words here\n\n## Install\n\n### Linux\napt install it\n\n## Use\nrun it\n";
        let doc = parse("g.md", md.as_bytes()).unwrap();
        let chunks = chunk(&doc, &Words, opts(HEADING_BUDGET + 6));
        let linux = chunks
            .iter()
            .find(|c| c.text.contains("apt install"))
            .unwrap();
        // The path in force where the chunk starts (it may open with "## Install").
        assert!(linux.heading.starts_with("Guide > Install"), "{linux:?}");
        assert_eq!(linux.line_end, 7);
        let hs = headings(md);
        let at = md.find("apt install").unwrap();
        assert_eq!(
            HeadingPath::default().at(&hs, "", at, "apt install it"),
            "Guide > Install > Linux"
        );
        let used = chunks.iter().find(|c| c.text.contains("run it")).unwrap();
        assert_eq!(used.heading, "Guide > Use");
        assert_eq!(used.line_end, 10);
        for c in &chunks {
            let lines: Vec<&str> = md.lines().collect();
            let first = c.text.lines().next().unwrap();
            assert_eq!(lines[c.line_start as usize - 1], first, "{c:?}");
        }
    }

    #[test]
    fn fenced_code_is_not_a_heading_and_stays_whole() {
        let md = "# A\n\n```sh\n# not a heading\necho hi\n```\n\ntext after\n";
        let doc = parse("a.md", md.as_bytes()).unwrap();
        let chunks = chunk(&doc, &Words, opts(HEADING_BUDGET + 12));
        let code = chunks.iter().find(|c| c.text.contains("echo hi")).unwrap();
        assert!(
            code.text.contains("```sh") && code.text.contains("# not a heading"),
            "{code:?}"
        );
        assert_eq!(code.heading, "A");
    }

    #[test]
    fn ids_are_stable_and_sizes_bounded() {
        let text = "word ".repeat(500);
        let doc = parse("a.txt", text.as_bytes()).unwrap();
        let a = chunk(&doc, &Words, opts(HEADING_BUDGET + 50));
        let b = chunk(&doc, &Words, opts(HEADING_BUDGET + 50));
        assert_eq!(a, b);
        assert!(a.len() >= 10);
        assert!(a.iter().all(|c| Words.size(&c.text) <= 50));
        assert_eq!(chunk_id("p", "h", "t"), chunk_id("p", "h", "t"));
        assert_ne!(chunk_id("p", "h", "t"), chunk_id("p", "ht", ""));
    }
}

//! Property tests over the code that reads what users' files and models give it: every
//! parser, the chunker, prompt packing and the citation checker. Inputs are built from
//! each format's structural pieces (headings, fences, tags, tables, directives), stray
//! Unicode and control characters, by a small seeded generator, so a failure names its seed
//! and replays exactly. (proptest would add shrinking, but its dependency tree changes
//! features of crates lance builds on, which costs a 20-minute rebuild of lance; a batch of
//! such additions is due, and proptest goes with it.)
//!
//! `make test` runs a few hundred cases per property; `RAG_FUZZ_CASES=N` (as `make stress`
//! does) runs more. Inputs that ever failed are kept in `regressions` below.

use crate::ask::{cite, prompt};
use crate::ingest::{chunk, parse};
use crate::store::Hit;

/// xorshift64*: deterministic and dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
}

const WORDS: &[&str] = &[
    "pragma",
    "foreign_keys",
    "the",
    "index",
    "--flag",
    "x=1",
    "4096",
    "café",
    "漢字",
    "🦀",
    "a.b.c",
    "SELECT",
    "\u{200b}",
    "\u{feff}",
    "\t",
    "\r\n",
    "\0",
    "\x1b[31m",
    "résumé",
    "[S1]",
    "[S2, S9]",
    "&amp;",
    "ﬁ",
    "\u{0301}",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
];

fn pieces(path: &str) -> &'static [&'static str] {
    match parse::Format::of(path) {
        Some(parse::Format::Markdown) => &[
            "\n# ",
            "\n## ",
            "\n###### ",
            "\n```\n",
            "\n```rust\n",
            "\n- ",
            "\n1. ",
            "\n| a | b |\n|---|---|\n",
            "\n> ",
            "\n---\n",
            "---\ntitle: x\ntags: [a, b]\n---\n",
            "[link](http://x)",
            "**",
            "\n\n",
        ],
        Some(parse::Format::Html) => &[
            "<div>",
            "</div>",
            "<p>",
            "</p>",
            "<h1>",
            "</h1>",
            "<h2>",
            "<script>x</script>",
            "<!--",
            "-->",
            "<pre>",
            "</pre>",
            "<table><tr><td>",
            "</td></tr></table>",
            "<nav>",
            "<title>T</title>",
            "<br>",
            "&lt;",
            "<li>",
            "<a href=x>",
            "\n",
        ],
        Some(parse::Format::Rst) => &[
            "\n=====\n",
            "\n-----\n",
            "\n.. code-block:: python\n\n   ",
            "::\n\n   ",
            "\n.. note::\n",
            "\n* ",
            "\n\n",
        ],
        Some(parse::Format::AsciiDoc) => &[
            "\n= ",
            "\n== ",
            "\n=== ",
            "\n----\n",
            "\n[source,sh]\n",
            "\n* ",
            "\n....\n",
            "\n\n",
        ],
        _ => &[
            "fn x() {\n",
            "}\n",
            "// ",
            "/* ",
            "*/",
            "\"",
            "'",
            "\n\n",
            "    ",
            "def f():\n",
        ],
    }
}

fn document(rng: &mut Rng, path: &str) -> String {
    let mut s = String::new();
    let n = 1 + rng.below(400);
    for _ in 0..n {
        if rng.below(3) == 0 {
            s.push_str(rng.pick(pieces(path)));
        } else {
            s.push_str(rng.pick(WORDS));
            s.push(' ');
        }
    }
    s
}

fn cases() -> u64 {
    std::env::var("RAG_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150)
}

const PATHS: &[&str] = &["a.md", "a.html", "a.rst", "a.adoc", "a.txt", "a.rs", "a.py"];

fn tokenizer() -> tokenizers::Tokenizer {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/models/minilm/tokenizer.json");
    let mut t = tokenizers::Tokenizer::from_file(path).expect("models/minilm (scripts/setup.sh)");
    t.with_truncation(None).unwrap();
    t.with_padding(None);
    t
}

/// Parses and chunks one input; panics (with the seed in the message) on a broken property.
fn parse_and_chunk(seed: u64, path: &str, bytes: &[u8], tok: &tokenizers::Tokenizer) {
    let opts = chunk::ChunkOptions {
        max_tokens: 120,
        min_tokens: 60,
        overlap_tokens: 10,
    };
    let Ok(doc) = parse::parse(path, bytes) else {
        return; // a clean error is fine: the file is reported as failed
    };
    let lines = String::from_utf8_lossy(bytes)
        .lines()
        .count()
        .max(doc.text.lines().count()) as u32;
    for c in chunk::chunk(&doc, tok, opts) {
        let n = tok.encode(c.embed_text().as_str(), false).unwrap().len();
        assert!(
            n <= opts.max_tokens,
            "seed {seed} {path}: a chunk of {n} tokens"
        );
        assert!(
            1 <= c.line_start && c.line_start <= c.line_end && c.line_end <= lines.max(1),
            "seed {seed} {path}: lines {}-{} of {lines}",
            c.line_start,
            c.line_end
        );
        assert!(
            !c.text.trim().is_empty(),
            "seed {seed} {path}: an empty chunk"
        );
    }
}

#[test]
fn parsers_and_the_chunker_hold_their_promises_on_any_input() {
    let tok = tokenizer();
    for seed in 1..=cases() {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let path = rng.pick(PATHS);
        let text = document(&mut rng, path);
        let mut bytes = text.into_bytes();
        if rng.below(8) == 0 && !bytes.is_empty() {
            // Invalid UTF-8 somewhere.
            let at = rng.below(bytes.len());
            bytes[at] = 0xff;
        }
        parse_and_chunk(seed, path, &bytes, &tok);
    }
}

#[test]
fn packing_stays_within_its_budget_and_the_citation_checker_never_panics() {
    let count = |s: &str| s.split_whitespace().count() + s.len() / 40;
    for seed in 1..=cases() * 4 {
        let mut rng = Rng(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1);
        let hits: Vec<(Hit, f32)> = (0..rng.below(12))
            .map(|i| {
                let text = document(&mut rng, "a.md");
                let lines = text.lines().count().max(1) as u32;
                (
                    Hit {
                        id: format!("c{i}"),
                        path: format!("d/{}.md", rng.below(4)),
                        heading: rng.pick(WORDS).to_string(),
                        line_start: 1,
                        line_end: lines,
                        text,
                        score: 0.5,
                    },
                    0.5,
                )
            })
            .collect();
        let question = document(&mut rng, "a.txt");
        let overhead = count(&question) + 20;
        let budget = overhead + rng.below(3000);
        let packed = prompt::pack(&question, &hits, budget, overhead, &count);
        assert!(
            packed.prompt_tokens <= budget,
            "seed {seed}: {} tokens packed into {budget}",
            packed.prompt_tokens
        );
        assert_eq!(
            packed.sources.len() + packed.dropped.len(),
            hits.len(),
            "seed {seed}"
        );
        let sources: Vec<(usize, &str)> = packed
            .sources
            .iter()
            .map(|s| (s.n, s.hit.text.as_str()))
            .collect();
        let answer = document(&mut rng, "a.txt");
        let checked = cite::check(&answer, &sources);
        for c in &checked.citations {
            assert!(
                sources.iter().any(|(n, _)| format!("S{n}") == c.id),
                "seed {seed}: {}",
                c.id
            );
        }
    }
}

/// Inputs that once broke a property, kept so they never break it again.
#[test]
fn regressions() {
    let tok = tokenizer();
    let cases: &[(&str, &str)] = &[
        ("deep.html", "<div><div><div><p>x</p></div></div></div>"),
        ("heads.md", "# a\n# b\n# c\n"),
    ];
    for (i, (path, text)) in cases.iter().enumerate() {
        parse_and_chunk(i as u64, path, text.as_bytes(), &tok);
    }
}

//! Property tests (proptest) over the code that reads what users' files give it: the parser
//! of every format and the chunker (packing and the citation checker: `ask::fuzz`, on the
//! same generated documents). Inputs
//! are built from each format's structural pieces (headings, fences, tags, tables,
//! directives, PDF objects), stray Unicode and control characters; proptest shrinks a
//! failing input to a small one and records its seed under `proptest-regressions/`, which
//! is committed, so every input that ever failed is replayed first on every later run.
//!
//! `make test` runs a few hundred cases per property; `RAG_FUZZ_CASES=N` (as `make stress`
//! does) runs more. Hand-picked inputs that once failed are kept in `regressions` below.
//! (proptest joined once it was measured not to change the features of any crate lance
//! builds on: `cargo tree -e features` is the same with and without it.)

use proptest::prelude::*;
use proptest::sample::{select, Index};

use crate::ingest::{chunk, parse};

pub(crate) const WORDS: &[&str] = &[
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

/// One word with its space, or one of the format's structural pieces.
fn piece(path: &'static str) -> BoxedStrategy<String> {
    prop_oneof![
        1 => select(pieces(path)).prop_map(String::from),
        2 => select(WORDS).prop_map(|w| format!("{w} ")),
    ]
    .boxed()
}

/// A document of `path`'s format: up to 400 words and structural pieces.
pub(crate) fn document(path: &'static str) -> impl Strategy<Value = String> {
    prop::collection::vec(piece(path), 1..400).prop_map(|v| v.concat())
}

/// A document for one of the text formats, with one byte made invalid UTF-8 one time in eight.
fn text_file() -> impl Strategy<Value = (&'static str, Vec<u8>)> {
    select(PATHS).prop_flat_map(|path| {
        (
            Just(path),
            document(path),
            prop::option::weighted(0.125, any::<Index>()),
        )
            .prop_map(|(path, text, broken)| {
                let mut bytes = text.into_bytes();
                if let (Some(at), false) = (broken, bytes.is_empty()) {
                    let i = at.index(bytes.len());
                    bytes[i] = 0xff;
                }
                (path, bytes)
            })
    })
}

/// A real PDF (fixtures/docs/pump-manual.pdf) with up to eight bytes overwritten: broken
/// objects, lengths, offsets and streams, parsed by pdf-extract and lopdf.
fn pdf_file() -> impl Strategy<Value = Vec<u8>> {
    const PDF: &[u8] = include_bytes!("../../fixtures/docs/pump-manual.pdf");
    prop::collection::vec((any::<Index>(), any::<u8>()), 0..8).prop_map(|edits| {
        let mut bytes = PDF.to_vec();
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        bytes
    })
}

fn cases() -> u32 {
    std::env::var("RAG_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150)
}

pub(crate) fn config(scale: u32) -> ProptestConfig {
    ProptestConfig {
        cases: cases().saturating_mul(scale),
        ..ProptestConfig::default()
    }
}

const PATHS: &[&str] = &["a.md", "a.html", "a.rst", "a.adoc", "a.txt", "a.rs", "a.py"];

fn tokenizer() -> tokenizers::Tokenizer {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/models/minilm/tokenizer.json");
    let mut t = tokenizers::Tokenizer::from_file(path).expect("models/minilm (make models)");
    t.with_truncation(None).unwrap();
    t.with_padding(None);
    t
}

/// Parses and chunks one input and checks every chunk: within the token limit, inside the
/// file's lines, not empty.
fn parse_and_chunk(
    path: &str,
    bytes: &[u8],
    tok: &tokenizers::Tokenizer,
) -> Result<(), TestCaseError> {
    let opts = chunk::ChunkOptions {
        max_tokens: 120,
        min_tokens: 60,
        overlap_tokens: 10,
    };
    let Ok(doc) = parse::parse(path, bytes) else {
        return Ok(()); // a clean error is fine: the file is reported as failed
    };
    let lines = String::from_utf8_lossy(bytes)
        .lines()
        .count()
        .max(doc.text.lines().count()) as u32;
    for c in chunk::chunk(&doc, tok, opts) {
        let n = tok.encode(c.embed_text().as_str(), false).unwrap().len();
        prop_assert!(n <= opts.max_tokens, "{path}: a chunk of {n} tokens");
        prop_assert!(
            1 <= c.line_start && c.line_start <= c.line_end && c.line_end <= lines.max(1),
            "{path}: lines {}-{} of {lines}",
            c.line_start,
            c.line_end
        );
        prop_assert!(!c.text.trim().is_empty(), "{path}: an empty chunk");
    }
    Ok(())
}

thread_local! {
    static TOKENIZER: tokenizers::Tokenizer = tokenizer();
}

proptest! {
    #![proptest_config(config(1))]

    #[test]
    fn parsers_and_the_chunker_hold_their_promises_on_any_input((path, bytes) in text_file()) {
        TOKENIZER.with(|tok| parse_and_chunk(path, &bytes, tok))?;
    }

    #[test]
    fn a_damaged_pdf_parses_or_fails_cleanly(bytes in pdf_file()) {
        TOKENIZER.with(|tok| parse_and_chunk("a.pdf", &bytes, tok))?;
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
    for (path, text) in cases {
        parse_and_chunk(path, text.as_bytes(), &tok).unwrap();
    }
}

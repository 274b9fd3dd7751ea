//! Bytes → text, per format. Output text keeps the source's line structure where the format
//! has lines (so line ranges point into the real file), and marks headings the Markdown way
//! (`# Title`) so one chunker handles every format. Owns binary detection and content hashes.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Format {
    Markdown,
    Text,
    Rst,
    AsciiDoc,
    Html,
    Code,
    Pdf,
}

impl Format {
    /// The format for a path, from its extension; `None` for files rag does not read.
    pub fn of(path: &str) -> Option<Format> {
        let name = path.rsplit('/').next().unwrap_or(path).to_ascii_lowercase();
        let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
        Some(match ext {
            "md" | "markdown" | "mdx" => Format::Markdown,
            "txt" | "text" | "" if !name.is_empty() => Format::Text,
            "rst" => Format::Rst,
            "adoc" | "asciidoc" => Format::AsciiDoc,
            "html" | "htm" | "xhtml" => Format::Html,
            "pdf" => Format::Pdf,
            e if CODE_EXTENSIONS.contains(&e) => Format::Code,
            _ => return None,
        })
    }

    /// Whether headings in the text are Markdown headings the chunker should follow.
    pub fn has_headings(self) -> bool {
        !matches!(self, Format::Code | Format::Text)
    }
}

const CODE_EXTENSIONS: &[&str] = &[
    "rs", "py", "js", "mjs", "ts", "tsx", "jsx", "go", "c", "h", "cc", "cpp", "hpp", "cxx", "java",
    "kt", "swift", "rb", "php", "cs", "scala", "sh", "bash", "zsh", "lua", "sql", "toml", "yaml",
    "yml", "json", "hs", "ml", "ex", "exs", "erl", "clj", "r", "jl", "zig", "nim", "dart", "pl",
    "proto", "cmake", "mk", "css", "scss", "vue", "svelte",
];

/// A parsed file (serialized between the parse worker and the ingest; see `isolate`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Document {
    pub path: String,
    pub format: Format,
    pub text: String,
    pub title: Option<String>,
    pub tags: Vec<String>,
    /// Problems that did not stop parsing (for example invalid UTF-8).
    pub warnings: Vec<String>,
}

/// The parsers' version, raised by a change that can turn a file that failed into one that
/// parses: a file that failed under an older version is parsed again on the next ingest,
/// without `--retry-failed`. 2 (2026-12-07): HTML in Sphinx's Read the Docs theme, whose
/// wrappers were taken for navigation ("no text").
pub const PARSERS: u32 = 2;

/// Parses `bytes` of the file at `path` (used for the format and in messages).
pub fn parse(path: &str, bytes: &[u8]) -> Result<Document> {
    let format = Format::of(path).ok_or_else(|| anyhow!("unsupported file type"))?;
    let mut warnings = Vec::new();
    if bytes.is_empty() {
        bail!("empty file");
    }
    if format == Format::Pdf {
        let text = pdf_text(bytes)?;
        return Ok(Document {
            path: path.into(),
            format,
            text,
            title: None,
            tags: vec![],
            warnings,
        });
    }
    let text = decode_text(bytes, &mut warnings)?;
    let (text, title, tags) = match format {
        Format::Markdown => front_matter(&text, &mut warnings),
        Format::Html => {
            let (body, title) = html_text(&text);
            (body, title, vec![])
        }
        Format::Rst => (underlined_headings(&text), None, vec![]),
        Format::AsciiDoc => (asciidoc_headings(&text), None, vec![]),
        Format::Text | Format::Code | Format::Pdf => (text, None, vec![]),
    };
    if text.trim().is_empty() {
        bail!("no text");
    }
    Ok(Document {
        path: path.into(),
        format,
        text,
        title,
        tags,
        warnings,
    })
}

/// A text file's bytes as `\n`-ended text: binaries refused, bad UTF-8 kept lossily with a warning.
fn decode_text(bytes: &[u8], warnings: &mut Vec<String>) -> Result<String> {
    let utf16 = utf16_text(bytes);
    if let Some(Err(e)) = &utf16 {
        bail!("{e}");
    }
    // A NUL byte in the first 8 KiB is how git and ripgrep tell binary files too.
    if utf16.is_none() && bytes.iter().take(8192).any(|&b| b == 0) {
        bail!("binary file (NUL bytes)");
    }
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let text = match (utf16, std::str::from_utf8(bytes)) {
        (Some(Ok(t)), _) => Ok(t),
        (_, r) => r.map(str::to_string),
    };
    let text = match text {
        Ok(s) => s.to_string(),
        Err(e) => {
            warnings.push(format!(
                "invalid UTF-8 at byte {}; decoded lossily",
                e.valid_up_to()
            ));
            String::from_utf8_lossy(bytes).into_owned()
        }
    };
    Ok(text.replace("\r\n", "\n"))
}

/// Text that starts with a UTF-16 byte order mark (Windows editors write it), decoded;
/// `None` when there is no such mark.
fn utf16_text(bytes: &[u8]) -> Option<Result<String>> {
    let (le, rest) = match bytes {
        [0xff, 0xfe, rest @ ..] => (true, rest),
        [0xfe, 0xff, rest @ ..] => (false, rest),
        _ => return None,
    };
    let units: Vec<u16> = rest
        .chunks_exact(2)
        .map(|p| {
            let pair = [p[0], p[1]];
            if le {
                u16::from_le_bytes(pair)
            } else {
                u16::from_be_bytes(pair)
            }
        })
        .collect();
    Some(String::from_utf16(&units).map_err(|_| anyhow!("invalid UTF-16 after a byte order mark")))
}

/// Splits YAML front matter off Markdown. The front matter's lines are blanked, not removed,
/// so line numbers still match the file.
fn front_matter(text: &str, warnings: &mut Vec<String>) -> (String, Option<String>, Vec<String>) {
    #[derive(Deserialize, Default)]
    struct Front {
        title: Option<String>,
        #[serde(default)]
        tags: Tags,
    }
    #[derive(Deserialize, Default)]
    #[serde(untagged)]
    enum Tags {
        #[default]
        None,
        One(String),
        Many(Vec<String>),
    }
    let Some(rest) = text.strip_prefix("---\n") else {
        return (text.to_string(), None, vec![]);
    };
    let Some(end) = rest
        .find("\n---\n")
        .or_else(|| rest.strip_suffix("\n---").map(|r| r.len()))
    else {
        return (text.to_string(), None, vec![]);
    };
    let yaml = &rest[..end];
    let front: Front = match serde_yaml::from_str::<BTreeMap<String, serde_yaml::Value>>(yaml) {
        Ok(_) => serde_yaml::from_str(yaml).unwrap_or_default(),
        Err(e) => {
            warnings.push(format!(
                "front matter is not valid YAML ({e}); kept as text"
            ));
            return (text.to_string(), None, vec![]);
        }
    };
    let n_lines = yaml.lines().count() + 2;
    let body_start = (4 + end + 5).min(text.len());
    let body = format!("{}{}", "\n".repeat(n_lines), &text[body_start..]);
    let tags = match front.tags {
        Tags::None => vec![],
        Tags::One(t) => t
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        Tags::Many(v) => v,
    };
    (body, front.title, tags)
}

/// reStructuredText: a line underlined (and optionally overlined) with punctuation is a
/// heading; levels follow the order in which styles (character, overlined or not) first
/// appear, as in docutils.
fn underlined_headings(text: &str) -> String {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let mut styles: Vec<(char, bool)> = Vec::new();
    let is_rule = |l: &str| {
        let l = l.trim_end();
        let mut chars = l.chars();
        match chars.next() {
            Some(c) if "=-~^\"'`#*+:._".contains(c) => l.len() >= 3 && chars.all(|x| x == c),
            _ => false,
        }
    };
    for i in 1..lines.len() {
        let title = lines[i - 1].trim();
        if is_rule(lines[i])
            && !title.is_empty()
            && !is_rule(title)
            && lines[i].trim_end().len() >= title.len().min(3)
        {
            let c = lines[i].chars().next().unwrap_or('=');
            let overlined = i >= 2 && is_rule(lines[i - 2]);
            let style = (c, overlined);
            let level = styles.iter().position(|&s| s == style).unwrap_or_else(|| {
                styles.push(style);
                styles.len() - 1
            });
            out[i - 1] = format!("{} {}", "#".repeat((level + 1).min(6)), title);
            out[i] = String::new();
            if overlined {
                out[i - 2] = String::new();
            }
        }
    }
    out.join("\n")
}

/// AsciiDoc: `= Title`, `== Section`, … become Markdown headings.
fn asciidoc_headings(text: &str) -> String {
    text.split('\n')
        .map(|l| {
            let level = l.chars().take_while(|&c| c == '=').count();
            if (1..=6).contains(&level) && l[level..].starts_with(' ') {
                format!("{}{}", "#".repeat(level), &l[level..])
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether an element is site chrome rather than content, by the names documentation
/// generators give it: `class="mainmenu"`, `id="sidebar"`, `fancy_toc`, `md-nav`,
/// `sphinxsidebar`, `role="navigation"`. On SQLite's pages the menu and the table of
/// contents otherwise open the first chunk of every page with the same forty words.
fn is_chrome(e: &scraper::node::Element) -> bool {
    const ENDINGS: &[&str] = &[
        "nav",
        "navbar",
        "navigation",
        "menu",
        "sidebar",
        "toc",
        "breadcrumb",
        "breadcrumbs",
    ];
    if e.attr("role")
        .is_some_and(|r| r.eq_ignore_ascii_case("navigation"))
    {
        return true;
    }
    let names = e.attr("class").into_iter().chain(e.attr("id"));
    names
        .flat_map(|v| v.split(|c: char| c.is_whitespace() || c == '-' || c == '_'))
        .map(|t| {
            t.trim_end_matches(|c: char| c.is_ascii_digit())
                .to_ascii_lowercase()
        })
        .any(|t| t == "nosearch" || ENDINGS.iter().any(|end| t.ends_with(end)))
}

/// HTML: the visible text, one block per line, headings as Markdown headings, and the
/// `<title>`. Scripts, styles, navigation, menus, tables of contents, headers, footers and
/// forms are dropped.
fn html_text(html: &str) -> (String, Option<String>) {
    use scraper::{Html, Selector};
    let doc = Html::parse_document(html);
    let title = Selector::parse("title").ok().and_then(|sel| {
        doc.select(&sel)
            .next()
            .map(|t| t.text().collect::<Vec<_>>().join(" "))
            .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|t| !t.is_empty())
    });
    let mut out = String::new();
    html_blocks(doc.tree.root(), &mut out);
    (out, title)
}

/// Elements whose text is not the page's content.
const HTML_DROPPED: &[&str] = &[
    "script", "style", "nav", "header", "footer", "noscript", "template", "form", "svg", "head",
];

/// Elements that start a line of their own.
const HTML_BLOCKS: &[&str] = &[
    "p",
    "div",
    "li",
    "br",
    "tr",
    "pre",
    "section",
    "article",
    "blockquote",
    "table",
    "ul",
    "ol",
    "dt",
    "dd",
    "main",
];

/// Whether `node` holds the page's main content (`<main>`, `<article>`, `role="main"`): a
/// wrapper named for the navigation beside it is not chrome. Read the Docs' Sphinx theme
/// names the body `wy-body-for-nav` and the content's column `wy-nav-content-wrap`; taken for
/// navigation, every page of a manual in that theme read as "no text".
fn holds_content(node: ego_tree::NodeRef<'_, scraper::Node>) -> bool {
    node.descendants().any(|d| match d.value() {
        scraper::Node::Element(e) => {
            matches!(e.name(), "main" | "article")
                || e.attr("role")
                    .is_some_and(|r| r.eq_ignore_ascii_case("main"))
        }
        _ => false,
    })
}

/// Appends the visible text under `node` to `out`, a line per block.
fn html_blocks(node: ego_tree::NodeRef<'_, scraper::Node>, out: &mut String) {
    use scraper::Node;
    for child in node.children() {
        match child.value() {
            Node::Text(t) => {
                let t = t.split_whitespace().collect::<Vec<_>>().join(" ");
                if !t.is_empty() {
                    if !out.is_empty() && !out.ends_with(['\n', ' ']) {
                        out.push(' ');
                    }
                    out.push_str(&t);
                }
            }
            Node::Element(e) => {
                let name = e.name();
                if HTML_DROPPED.contains(&name) || (is_chrome(e) && !holds_content(child)) {
                    continue;
                }
                let heading = match name.as_bytes() {
                    [b'h', d @ b'1'..=b'6'] => usize::from(d - b'0'),
                    _ => 0,
                };
                let block = heading > 0 || HTML_BLOCKS.contains(&name);
                if block && !out.is_empty() && !out.ends_with('\n') {
                    out.push('\n');
                }
                if heading > 0 {
                    out.push('\n');
                    out.push_str(&"#".repeat(heading));
                    out.push(' ');
                }
                html_blocks(child, out);
                if block && !out.ends_with('\n') {
                    out.push('\n');
                }
            }
            _ => {}
        }
    }
}

/// PDF text with pdf-extract (pure Rust). It is known to panic on some malformed files; a
/// panic there is one bad file, not a crashed ingest.
fn pdf_text(bytes: &[u8]) -> Result<String> {
    let bytes = bytes.to_vec();
    let result = std::panic::catch_unwind(move || pdf_extract::extract_text_from_mem(&bytes));
    match result {
        Ok(Ok(text)) if !text.trim().is_empty() => Ok(text),
        Ok(Ok(_)) => bail!("PDF has no extractable text (scanned images?)"),
        Ok(Err(e)) => bail!("unreadable PDF: {e}"),
        Err(_) => bail!("unreadable PDF (the PDF parser failed on it)"),
    }
}

/// blake3 of the file's bytes: what decides whether a file changed.
pub fn content_hash(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf16_and_utf8_byte_order_marks_are_decoded() {
        let mut le = vec![0xff, 0xfe];
        le.extend(
            "# Café\n\nThé text.\n"
                .encode_utf16()
                .flat_map(|u| u.to_le_bytes()),
        );
        let doc = parse("a.md", &le).unwrap();
        assert!(doc.text.contains("Thé text."), "{}", doc.text);
        let mut be = vec![0xfe, 0xff];
        be.extend("plain".encode_utf16().flat_map(|u| u.to_be_bytes()));
        assert_eq!(parse("a.txt", &be).unwrap().text, "plain");
        assert_eq!(parse("a.txt", b"\xef\xbb\xbfhi").unwrap().text, "hi");
        assert!(
            parse("a.txt", &[0xff, 0xfe, 0x00, 0xd8]).is_err(),
            "a lone surrogate"
        );
    }

    #[test]
    fn formats_from_extensions() {
        assert_eq!(Format::of("a/b.md"), Some(Format::Markdown));
        assert_eq!(Format::of("README"), Some(Format::Text));
        assert_eq!(Format::of("x.rs"), Some(Format::Code));
        assert_eq!(Format::of("x.png"), None);
    }

    #[test]
    fn front_matter_keeps_line_numbers() {
        let d = parse("a.md", b"---\ntitle: Hello\ntags: [a, b]\n---\n# H\nbody\n").unwrap();
        assert_eq!(d.title.as_deref(), Some("Hello"));
        assert_eq!(d.tags, vec!["a", "b"]);
        assert_eq!(d.text.lines().nth(4), Some("# H"));
    }

    #[test]
    fn rst_and_html_headings() {
        let d = parse("a.rst", b"Title\n=====\n\ntext\n\nSub\n---\nmore\n").unwrap();
        assert!(d.text.starts_with("# Title\n"), "{}", d.text);
        assert!(d.text.contains("\n## Sub\n"), "{}", d.text);
        let d = parse("b.rst", b"=====\nDoc\n=====\n\nPart\n====\n\nx\n").unwrap();
        assert!(
            d.text.contains("\n# Doc\n") && d.text.contains("\n## Part\n"),
            "{}",
            d.text
        );
        let h = parse("a.html", b"<html><head><title>The  Title</title><script>x()</script></head><body><nav>menu</nav><div class=\"menu mainmenu\">Home About</div><div class=fancy-toc1>1. Intro</div><ul id=sidebar><li>Other</li></ul><h2>Part</h2><p>Hello <b>world</b></p></body></html>").unwrap();
        assert_eq!(h.title.as_deref(), Some("The Title"));
        for chrome in ["Home", "Intro", "Other"] {
            assert!(!h.text.contains(chrome), "{chrome}: {}", h.text);
        }
        assert!(h.text.contains("## Part"), "{}", h.text);
        assert!(h.text.contains("Hello world"), "{}", h.text);
        assert!(
            !h.text.contains("menu") && !h.text.contains("x()"),
            "{}",
            h.text
        );
    }

    #[test]
    fn a_read_the_docs_page_keeps_its_content_and_drops_its_navigation() {
        let page = r#"<html><head><title>QEMU disk image utility</title></head>
<body class="wy-body-for-nav"><div class="wy-grid-for-nav">
<nav class="wy-nav-side"><div class="wy-menu wy-menu-vertical">Contents About</div></nav>
<section data-toggle="wy-nav-shift" class="wy-nav-content-wrap">
<div class="wy-nav-content"><div class="rst-content">
<div role="navigation" aria-label="Page navigation"><ul class="wy-breadcrumbs"><li>Home</li></ul></div>
<div role="main" class="document"><section id="qemu-img"><h1>QEMU disk image utility</h1>
<p>qemu-img allows you to create, convert and modify images offline.</p></section></div>
</div></div></section></div></body></html>"#;
        let d = parse("qemu-img.html", page.as_bytes()).unwrap();
        assert!(d.text.contains("# QEMU disk image utility"), "{}", d.text);
        assert!(
            d.text.contains("qemu-img allows you to create"),
            "{}",
            d.text
        );
        for chrome in ["Contents About", "Home"] {
            assert!(!d.text.contains(chrome), "{chrome}: {}", d.text);
        }
    }

    #[test]
    fn bad_bytes() {
        assert!(parse("a.txt", b"").is_err());
        assert!(parse("a.txt", b"ab\0cd")
            .unwrap_err()
            .to_string()
            .contains("binary"));
        let d = parse("a.txt", b"caf\xe9 au lait").unwrap();
        assert_eq!(d.warnings.len(), 1);
        assert!(parse("a.pdf", b"%PDF-1.4 garbage").is_err());
    }
}

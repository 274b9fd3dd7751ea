//! Eval files: a YAML list of cases, parsed with serde_yaml and checked before anything
//! runs, so a mistake in case 40 is reported at once with its line and column, not after a
//! minute of retrieval. Owns what "a span from an expected source" means.

use std::path::Path;

use anyhow::{Context, Result};
use globset::{Glob, GlobMatcher};
use serde::Deserialize;

use crate::exit::ExitError;

/// One question and what a right answer draws on. Every string is charged to the parse's
/// [`budget`], so YAML aliases cannot expand a small file into gigabytes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    #[serde(default, deserialize_with = "budget::maybe")]
    pub id: Option<String>,
    /// Free-form label (howto, symptom, lookup, followup…), reported per kind.
    #[serde(default, deserialize_with = "budget::maybe")]
    pub kind: Option<String>,
    #[serde(deserialize_with = "budget::text")]
    pub question: String,
    /// File names, paths or globs, each optionally with `:START-END` lines.
    #[serde(deserialize_with = "one_or_many")]
    pub expect_sources: Vec<String>,
    /// Strings a correct answer holds (case-insensitive, whitespace collapsed).
    #[serde(default, deserialize_with = "one_or_many")]
    pub answer_contains: Vec<String>,
    /// Earlier questions of the same conversation, oldest first (follow-up cases).
    #[serde(default, deserialize_with = "one_or_many")]
    pub history: Vec<String>,
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    let v = match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    };
    budget::charge(v.iter().map(|s| s.len()).sum::<usize>() + v.len())?;
    Ok(v)
}

/// How much text one parse may hold. serde_yaml bounds alias jumps at 100 per event, which
/// still lets a 1 MB file that aliases one long list from every case expand to ~22 GB; so
/// each string a case keeps is charged here, against a budget proportional to the file,
/// and the parse fails (naming the aliases) instead of exhausting memory.
mod budget {
    use std::cell::Cell;

    use serde::de::{Deserialize, Deserializer, Error};

    thread_local! {
        static LEFT: Cell<usize> = const { Cell::new(usize::MAX) };
    }

    /// Bytes of text (plus one per string) that parsing `text` may keep: what the file
    /// holds sixteen times over, at least 16 MiB.
    pub fn set_for(text: &str) {
        LEFT.with(|l| l.set(text.len().saturating_mul(16).max(16 << 20)));
    }

    pub fn charge<E: Error>(bytes: usize) -> Result<(), E> {
        LEFT.with(|l| match l.get().checked_sub(bytes) {
            Some(left) => {
                l.set(left);
                Ok(())
            }
            None => Err(E::custom(
                "the cases expand to more text than the file could hold sixteen times over, through YAML aliases (*name): write the repeated lists out, or alias fewer of them",
            )),
        })
    }

    pub fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        let s = String::deserialize(d)?;
        charge(s.len() + 1)?;
        Ok(s)
    }

    pub fn maybe<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        let s = Option::<String>::deserialize(d)?;
        charge(s.as_ref().map_or(0, |s| s.len() + 1))?;
        Ok(s)
    }
}

/// An expected source: which files, and optionally which lines of them.
#[derive(Debug, Clone)]
pub struct Expect {
    matcher: Matcher,
    lines: Option<(u32, u32)>,
}

#[derive(Debug, Clone)]
enum Matcher {
    /// A bare file name: matches that name in any folder.
    Name(String),
    /// A path: matches it exactly or as a suffix after a `/`.
    Path(String),
    /// A glob; without a `/` it is matched against the file name only.
    Glob { glob: GlobMatcher, name_only: bool },
}

impl Expect {
    pub fn parse(spec: &str) -> Result<Expect, String> {
        let spec = spec.trim();
        let (pattern, lines) = match spec.rsplit_once(':') {
            Some((p, range)) if !p.is_empty() && range.contains('-') => {
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                match (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
                    (Ok(a), Ok(b)) if a >= 1 && a <= b => (p, Some((a, b))),
                    _ => {
                        return Err(format!(
                            "`{spec}`: the line range after `:` must be START-END with 1 <= START <= END"
                        ))
                    }
                }
            }
            _ => (spec, None),
        };
        if pattern.is_empty() {
            return Err("an empty expected source".into());
        }
        let name_only = !pattern.contains('/');
        let matcher = if pattern.contains(['*', '?', '[', '{']) {
            let glob = Glob::new(pattern)
                .map_err(|e| format!("`{pattern}` is not a valid glob: {e}"))?
                .compile_matcher();
            Matcher::Glob { glob, name_only }
        } else if name_only {
            Matcher::Name(pattern.to_string())
        } else {
            Matcher::Path(pattern.trim_start_matches("./").to_string())
        };
        Ok(Expect { matcher, lines })
    }

    /// Whether the span `path:start-end` comes from this expected source.
    pub fn matches(&self, path: &str, start: u32, end: u32) -> bool {
        let name = path.rsplit('/').next().unwrap_or(path);
        let file = match &self.matcher {
            Matcher::Name(n) => name == n,
            Matcher::Path(p) => path == p || path.ends_with(&format!("/{p}")),
            Matcher::Glob { glob, name_only } => {
                if *name_only {
                    glob.is_match(name)
                } else {
                    glob.is_match(path)
                        || path
                            .char_indices()
                            .filter(|&(_, c)| c == '/')
                            .any(|(i, _)| glob.is_match(&path[i + 1..]))
                }
            }
        };
        file && self.lines.is_none_or(|(a, b)| start <= b && a <= end)
    }
}

/// A case with its expectations compiled.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub case: Case,
    /// `id`, or `case N` (from 1) when the file gives none.
    pub id: String,
    pub expect: Vec<Expect>,
}

/// Reads and checks an eval file. Errors exit 2 and name the file, and the line and column
/// for YAML errors, or the case for a bad value.
pub fn load(path: &Path) -> Result<Vec<Compiled>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the eval file {}", path.display()))
        .map_err(|e| ExitError::usage(format!("{e:#}")))?;
    parse(&text).map_err(|e| ExitError::usage(format!("{}:{e}", path.display())))
}

/// [`load`] on text; errors start with `LINE:COLUMN: ` when YAML gives a position.
pub fn parse(text: &str) -> Result<Vec<Compiled>, String> {
    budget::set_for(text);
    let cases: Vec<Case> = serde_yaml::from_str(text).map_err(|e| match e.location() {
        Some(l) => format!("{}:{}: {e}", l.line(), l.column()),
        None => format!(" {e}"),
    })?;
    if cases.is_empty() {
        return Err(
            " no cases: the file must be a YAML list of cases with `question` and `expect_sources`"
                .into(),
        );
    }
    let mut out = Vec::with_capacity(cases.len());
    let mut ids = std::collections::HashSet::new();
    for (i, case) in cases.into_iter().enumerate() {
        let id = case.id.clone().unwrap_or_else(|| format!("case {}", i + 1));
        let bad = |what: String| format!(" case {} ({id}): {what}", i + 1);
        if case.question.trim().is_empty() {
            return Err(bad("`question` is empty".into()));
        }
        if case.expect_sources.is_empty() {
            return Err(bad(
                "`expect_sources` is empty: name at least one file".into()
            ));
        }
        if case.answer_contains.iter().any(|s| s.trim().is_empty()) {
            return Err(bad("`answer_contains` holds an empty string".into()));
        }
        if !ids.insert(id.clone()) {
            return Err(bad("this id is used by an earlier case".into()));
        }
        let expect = case
            .expect_sources
            .iter()
            .map(|s| Expect::parse(s))
            .collect::<Result<Vec<_>, _>>()
            .map_err(bad)?;
        out.push(Compiled { case, id, expect });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_cannot_expand_a_small_file_past_its_budget() {
        let long: Vec<String> = (0..1000).map(|i| format!("  - \"{i:0>98}\"")).collect();
        let mut yaml = format!(
            "- question: q0\n  expect_sources: a.md\n  answer_contains: &big\n{}\n",
            long.join("\n")
        );
        for i in 1..2000 {
            yaml.push_str(&format!(
                "- question: q{i}\n  expect_sources: a.md\n  answer_contains: *big\n"
            ));
        }
        assert!(yaml.len() < 250_000, "a small file: {} bytes", yaml.len());
        let e = parse(&yaml).unwrap_err();
        assert!(e.contains("YAML aliases"), "{e}");
        // A few aliases within the budget are fine.
        let few = yaml
            .lines()
            .take(1003 + 3 * 20)
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(parse(&few).unwrap().len(), 21);
    }

    #[test]
    fn yaml_errors_carry_line_and_column() {
        let e = parse("- question: a\n  expect_sources: [x.md]\n- question: [b\n").unwrap_err();
        assert!(e.starts_with("3:"), "{e}");
        let e = parse("- question: a\n  expect_source: x.md\n").unwrap_err();
        assert!(e.starts_with("2:3:") && e.contains("expect_source"), "{e}");
        let e = parse("- question: a\n").unwrap_err();
        assert!(e.contains("expect_sources"), "{e}");
    }

    #[test]
    fn bad_values_name_the_case() {
        let e = parse("- question: ' '\n  expect_sources: a.md\n").unwrap_err();
        assert!(e.contains("case 1") && e.contains("question"), "{e}");
        let e = parse("- id: q\n  question: a\n  expect_sources: ['a.md:9-3']\n").unwrap_err();
        assert!(e.contains("case 1 (q)") && e.contains("START-END"), "{e}");
        let e = parse(
            "- id: q\n  question: a\n  expect_sources: a\n- id: q\n  question: b\n  expect_sources: b\n",
        )
        .unwrap_err();
        assert!(e.contains("case 2 (q)"), "{e}");
        assert!(parse("[]").unwrap_err().contains("no cases"));
    }

    /// The three dev sets `make eval` runs parse, hold 60 cases or more each with at least
    /// 20 held out, and never share a case between their parts (a second tuning part,
    /// dev2.yaml, and a second held-out part, heldout2.yaml, where a set has them).
    #[test]
    fn the_dev_sets_parse_and_keep_their_parts_apart() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("eval");
        for set in ["sqlite", "python", "bash"] {
            let dev = load(&root.join(set).join("dev.yaml")).unwrap();
            let held = load(&root.join(set).join("heldout.yaml")).unwrap();
            assert!(dev.len() + held.len() >= 60 && held.len() >= 20, "{set}");
            let ids: std::collections::HashSet<&str> = dev.iter().map(|c| c.id.as_str()).collect();
            assert_eq!(ids.len(), dev.len(), "{set}: ids are unique");
            let optional = |name: &str| {
                let path = root.join(set).join(name);
                path.exists()
                    .then(|| load(&path).unwrap())
                    .unwrap_or_default()
            };
            let (dev2, held2) = (optional("dev2.yaml"), optional("heldout2.yaml"));
            let mut seen = ids;
            for c in dev2.iter().chain(&held).chain(&held2) {
                assert!(seen.insert(c.id.as_str()), "{set}: {} in two parts", c.id);
                assert!(!c.case.answer_contains.is_empty(), "{set}: {}", c.id);
            }
        }
    }

    #[test]
    fn expected_sources_match_names_paths_globs_and_lines() {
        let m = |spec: &str, path: &str, a: u32, b: u32| {
            Expect::parse(spec).unwrap().matches(path, a, b)
        };
        assert!(m("pragma.html", "docs/pragma.html", 1, 5));
        assert!(!m("pragma.html", "docs/xpragma.html", 1, 5));
        assert!(m("docs/pragma.html", "docs/pragma.html", 1, 5));
        assert!(m("docs/pragma.html", "site/docs/pragma.html", 1, 5));
        assert!(!m("docs/pragma.html", "mydocs/pragma.html", 1, 5));
        assert!(m("lang_*.html", "sqlite/lang_select.html", 1, 5));
        assert!(!m("lang_*.html", "sqlite/pragma.html", 1, 5));
        assert!(m("docs/**/*.md", "docs/a/b/c.md", 1, 5));
        assert!(m("a.md:10-20", "a.md", 18, 30));
        assert!(!m("a.md:10-20", "a.md", 21, 30));
        let one = parse("- question: q\n  expect_sources: a.md\n  answer_contains: x\n").unwrap();
        assert_eq!(one[0].case.answer_contains, vec!["x"]);
        assert_eq!(one[0].id, "case 1");
    }
}

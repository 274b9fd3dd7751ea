//! What `rag eval` reports: the summary as a flat map of named metrics (what baselines
//! and `--min` read), deltas against a baseline, quality gates, the table for people and
//! the JUnit file for CI systems. Pure: the caller prints and writes.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// Figures of one retrieval mode over the whole set.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ModeSummary {
    pub hit1: f64,
    pub hit5: f64,
    pub hit10: f64,
    pub mrr10: f64,
    pub ndcg10: f64,
    /// Share of cases with answer strings whose strings are all in the packed context.
    pub context_recall: Option<f64>,
    /// Median prompt tokens of the packed context.
    pub prompt_tokens_p50: Option<f64>,
    /// Mean milliseconds the generators' help to retrieval took per question
    /// (`retrieval.expand`, `retrieval.rerank`), where asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub help_ms_mean: Option<f64>,
}

/// Figures of the generated answers (`--answers`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AnswerSummary {
    pub model: String,
    /// Share of answers (of cases with answer strings) holding every string.
    pub keywords: Option<f64>,
    /// Keywords over the cases whose packed context held every string: how often the
    /// generator turns a context that has the answer into an answer that states it.
    #[serde(default)]
    pub reader: Option<f64>,
    /// Share of supported citations that name an expected source.
    pub citations: Option<f64>,
    /// Share of cases where rag's retrieval check abstained.
    pub abstained: f64,
    /// Share of answered (not abstained) cases where the model declined on its own.
    pub false_refusals: Option<f64>,
    /// Uncited sentences per answer.
    pub uncited_per_answer: Option<f64>,
    /// Share of answers a repetition stop ended (a sentence that repeated an earlier one,
    /// or a loop of tokens).
    #[serde(default)]
    pub repetition_stops: Option<f64>,
    /// Share of answers that dropped a sentence repeating an earlier one and went on.
    #[serde(default)]
    pub repeats_dropped: Option<f64>,
    /// Share of answers that reached their token limit or a full context (their unfinished
    /// last sentence left out).
    #[serde(default)]
    pub limit_stops: Option<f64>,
    pub prompt_tokens_p50: Option<f64>,
    pub prompt_tokens_p95: Option<f64>,
    pub ttft_ms_p50: Option<f64>,
    pub ttft_ms_p95: Option<f64>,
    pub decode_tok_per_s_p50: Option<f64>,
    pub decode_tok_per_s_p95: Option<f64>,
    /// Whole answer, retrieval to the last token: what a person waits for in all.
    #[serde(default)]
    pub answer_ms_p50: Option<f64>,
    #[serde(default)]
    pub answer_ms_p95: Option<f64>,
    #[serde(default)]
    pub answer_ms_mean: Option<f64>,
    /// Speculative decoding: the share of drafted tokens the generator kept.
    #[serde(default)]
    pub draft_acceptance: Option<f64>,
}

/// Metrics where lower is better: a rise is the regression.
const LOWER_IS_BETTER: &[&str] = &[
    "abstained",
    "false_refusals",
    "uncited_per_answer",
    "repetition_stops",
    "repeats_dropped",
    "limit_stops",
];
/// Metrics never gated on a regression: machine speed, not quality.
const NOT_GATED: &[&str] = &[
    "prompt_tokens_p50",
    "help_ms_mean",
    "prompt_tokens_p95",
    "ttft_ms_p50",
    "ttft_ms_p95",
    "decode_tok_per_s_p50",
    "decode_tok_per_s_p95",
    "answer_ms_p50",
    "answer_ms_p95",
    "answer_ms_mean",
    "draft_acceptance",
];

/// Every figure as `mode.metric` or `answers.metric`, the names `--min`, `--baseline` and
/// `--json`'s `metrics` use.
pub fn flatten(
    modes: &BTreeMap<String, ModeSummary>,
    answers: Option<&AnswerSummary>,
) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (mode, s) in modes {
        for (name, v) in [
            ("hit@1", Some(s.hit1)),
            ("hit@5", Some(s.hit5)),
            ("hit@10", Some(s.hit10)),
            ("mrr@10", Some(s.mrr10)),
            ("ndcg@10", Some(s.ndcg10)),
            ("context_recall", s.context_recall),
            ("prompt_tokens_p50", s.prompt_tokens_p50),
            ("help_ms_mean", s.help_ms_mean),
        ] {
            if let Some(v) = v {
                out.insert(format!("{mode}.{name}"), v);
            }
        }
    }
    if let Some(a) = answers {
        for (name, v) in [
            ("keywords", a.keywords),
            ("reader", a.reader),
            ("citations", a.citations),
            ("abstained", Some(a.abstained)),
            ("false_refusals", a.false_refusals),
            ("uncited_per_answer", a.uncited_per_answer),
            ("repetition_stops", a.repetition_stops),
            ("repeats_dropped", a.repeats_dropped),
            ("limit_stops", a.limit_stops),
            ("prompt_tokens_p50", a.prompt_tokens_p50),
            ("prompt_tokens_p95", a.prompt_tokens_p95),
            ("ttft_ms_p50", a.ttft_ms_p50),
            ("ttft_ms_p95", a.ttft_ms_p95),
            ("decode_tok_per_s_p50", a.decode_tok_per_s_p50),
            ("decode_tok_per_s_p95", a.decode_tok_per_s_p95),
            ("answer_ms_p50", a.answer_ms_p50),
            ("answer_ms_p95", a.answer_ms_p95),
            ("answer_ms_mean", a.answer_ms_mean),
            ("draft_acceptance", a.draft_acceptance),
        ] {
            if let Some(v) = v {
                out.insert(format!("answers.{name}"), v);
            }
        }
    }
    out
}

fn metric_name(key: &str) -> &str {
    key.rsplit_once('.').map_or(key, |(_, m)| m)
}

/// A failed quality gate, for the report and the JUnit file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    pub metric: String,
    pub message: String,
}

/// Parses `--min hit@5=0.8,keywords=0.4`. A name without a prefix means the main retrieval
/// mode for retrieval metrics and `answers.` for answer metrics.
pub fn parse_floors(spec: &str, main_mode: &str) -> Result<Vec<(String, f64)>, String> {
    let answer_metrics = ["keywords", "reader", "citations"];
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, value) = part.split_once('=').ok_or_else(|| {
            format!("`{part}` in --min is not NAME=VALUE (for example hit@5=0.8)")
        })?;
        let value: f64 = value
            .trim()
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .ok_or_else(|| format!("`{part}` in --min: `{value}` is not a number"))?;
        let name = name.trim().to_ascii_lowercase();
        let key = if name.contains('.') {
            name
        } else if answer_metrics.contains(&name.as_str()) {
            format!("answers.{name}")
        } else {
            format!("{main_mode}.{name}")
        };
        let known = [
            "hit@1",
            "hit@5",
            "hit@10",
            "mrr@10",
            "ndcg@10",
            "context_recall",
            "keywords",
            "reader",
            "citations",
        ];
        if !known.contains(&metric_name(&key)) {
            return Err(format!(
                "`{part}` in --min: unknown metric; use one of {}",
                known.join(", ")
            ));
        }
        out.push((key, value));
    }
    Ok(out)
}

/// Gates: every floor must hold (a metric missing from the run fails: the floor was asked
/// for), and with a baseline no gated metric may get worse by more than `max_regression`.
pub fn gates(
    metrics: &BTreeMap<String, f64>,
    floors: &[(String, f64)],
    baseline: Option<&BTreeMap<String, f64>>,
    max_regression: Option<f64>,
) -> Vec<Failure> {
    let mut out = Vec::new();
    for (key, floor) in floors {
        match metrics.get(key) {
            Some(v) if *v + 1e-9 >= *floor => {}
            Some(v) => out.push(Failure {
                metric: key.clone(),
                message: format!("{key} = {v:.3} is below the floor {floor}"),
            }),
            None => out.push(Failure {
                metric: key.clone(),
                message: format!(
                    "{key} was not measured in this run (--answers needed?) but --min asks for it"
                ),
            }),
        }
    }
    if let (Some(base), Some(max)) = (baseline, max_regression) {
        for (key, &now) in metrics {
            let name = metric_name(key);
            let Some(&then) = base.get(key) else { continue };
            if NOT_GATED.contains(&name) {
                continue;
            }
            let drop = if LOWER_IS_BETTER.contains(&name) {
                now - then
            } else {
                then - now
            };
            if drop > max + 1e-9 {
                out.push(Failure {
                    metric: key.clone(),
                    message: format!(
                        "{key} went from {then:.3} to {now:.3}, worse by {drop:.3} (--max-regression {max})"
                    ),
                });
            }
        }
    }
    out
}

/// `metric: now (±delta)` for the metrics both runs have.
pub fn deltas(
    metrics: &BTreeMap<String, f64>,
    baseline: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    metrics
        .iter()
        .filter_map(|(k, v)| baseline.get(k).map(|b| (k.clone(), v - b)))
        .collect()
}

fn cell(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"))
}

fn whole(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.0}"))
}

/// The table for people.
pub fn table(
    modes: &BTreeMap<String, ModeSummary>,
    order: &[String],
    answers: Option<&AnswerSummary>,
    deltas: Option<&BTreeMap<String, f64>>,
) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:<8} {:>14} {:>14} {:>14} {:>14} {:>14} {:>15} {:>8}",
        "mode", "hit@1", "hit@5", "hit@10", "MRR@10", "nDCG@10", "context recall", "prompt"
    );
    for mode in order {
        let Some(s) = modes.get(mode) else { continue };
        let c = |name: &str, v: Option<f64>| {
            format!("{}{}", cell(v), delta(deltas, &format!("{mode}.{name}")))
        };
        let _ = writeln!(
            t,
            "{:<8} {:>14} {:>14} {:>14} {:>14} {:>14} {:>15} {:>8}",
            mode,
            c("hit@1", Some(s.hit1)),
            c("hit@5", Some(s.hit5)),
            c("hit@10", Some(s.hit10)),
            c("mrr@10", Some(s.mrr10)),
            c("ndcg@10", Some(s.ndcg10)),
            c("context_recall", s.context_recall),
            whole(s.prompt_tokens_p50),
        );
    }
    for (mode, ms) in order
        .iter()
        .filter_map(|m| Some((m, modes.get(m)?.help_ms_mean?)))
    {
        let _ = writeln!(
            t,
            "{mode}: the generators' help took {:.2} s per question",
            ms / 1e3
        );
    }
    if let Some(a) = answers {
        answer_lines(&mut t, a, deltas);
    }
    t
}

/// The answer lines under the retrieval table (with `--answers`): quality, then speed, each
/// with its change since the baseline where one is given.
fn answer_lines(t: &mut String, a: &AnswerSummary, deltas: Option<&BTreeMap<String, f64>>) {
    let c = |name: &str, v: Option<f64>| {
        format!("{}{}", cell(v), delta(deltas, &format!("answers.{name}")))
    };
    let _ = writeln!(
        t,
        "\nanswers ({}): keywords {} (given the context {}) · citations {} · abstained {} · false refusals {} · uncited {}/answer",
        a.model,
        c("keywords", a.keywords),
        c("reader", a.reader),
        c("citations", a.citations),
        c("abstained", Some(a.abstained)),
        c("false_refusals", a.false_refusals),
        cell(a.uncited_per_answer),
    );
    let _ = writeln!(
        t,
        "stopped by a repetition {} · a repeated sentence dropped {} · at the token limit {}",
        c("repetition_stops", a.repetition_stops),
        c("repeats_dropped", a.repeats_dropped),
        c("limit_stops", a.limit_stops),
    );
    let _ = writeln!(
        t,
        "prompt tokens p50 {} p95 {} · first token p50 {} ms p95 {} ms · decode p50 {} tok/s p95 {} tok/s",
        whole(a.prompt_tokens_p50),
        whole(a.prompt_tokens_p95),
        whole(a.ttft_ms_p50),
        whole(a.ttft_ms_p95),
        whole(a.decode_tok_per_s_p50),
        whole(a.decode_tok_per_s_p95),
    );
    let _ = writeln!(
        t,
        "whole answer p50 {} ms p95 {} ms mean {} ms{}",
        whole(a.answer_ms_p50),
        whole(a.answer_ms_p95),
        whole(a.answer_ms_mean),
        a.draft_acceptance.map_or(String::new(), |x| format!(
            " · drafts kept {}",
            cell(Some(x))
        )),
    );
}

/// ` (+0.012)` after a metric that moved since the baseline, ` (=)` after one that did not,
/// nothing without a baseline: a reviewer reads the change, not the value.
fn delta(deltas: Option<&BTreeMap<String, f64>>, key: &str) -> String {
    match deltas.and_then(|d| d.get(key)) {
        Some(x) if x.abs() >= 0.0005 => format!(" ({x:+.3})"),
        Some(_) => " (=)".to_string(),
        None => String::new(),
    }
}

/// One JUnit test case: a name and, when it failed, why.
pub struct JunitCase {
    pub name: String,
    pub failure: Option<String>,
}

/// A JUnit XML document: one suite per list, one case per entry.
pub fn junit(suites: &[(String, Vec<JunitCase>)], seconds: f64) -> String {
    let tests: usize = suites.iter().map(|(_, c)| c.len()).sum();
    let failures: usize = suites
        .iter()
        .flat_map(|(_, c)| c)
        .filter(|c| c.failure.is_some())
        .count();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        x,
        "<testsuites name=\"rag eval\" tests=\"{tests}\" failures=\"{failures}\" time=\"{seconds:.3}\">"
    );
    for (name, cases) in suites {
        let f = cases.iter().filter(|c| c.failure.is_some()).count();
        let _ = writeln!(
            x,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{f}\">",
            xml_escape(name),
            cases.len()
        );
        for c in cases {
            match &c.failure {
                None => {
                    let _ = writeln!(
                        x,
                        "    <testcase classname=\"{}\" name=\"{}\"/>",
                        xml_escape(name),
                        xml_escape(&c.name)
                    );
                }
                Some(msg) => {
                    let _ = writeln!(
                        x,
                        "    <testcase classname=\"{}\" name=\"{}\">\n      <failure message=\"{}\"/>\n    </testcase>",
                        xml_escape(name),
                        xml_escape(&c.name),
                        xml_escape(msg)
                    );
                }
            }
        }
        x.push_str("  </testsuite>\n");
    }
    x.push_str("</testsuites>\n");
    x
}

/// Escapes text for XML attributes and content; characters XML 1.0 forbids are dropped.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' | '\r' => out.push(' '),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn floors_parse_and_resolve_names() {
        let f = parse_floors("hit@5=0.8, keywords=0.4,text.hit@1=0.5", "hybrid").unwrap();
        assert_eq!(
            f,
            vec![
                ("hybrid.hit@5".to_string(), 0.8),
                ("answers.keywords".to_string(), 0.4),
                ("text.hit@1".to_string(), 0.5)
            ]
        );
        assert!(parse_floors("hit@5", "hybrid")
            .unwrap_err()
            .contains("NAME=VALUE"));
        assert!(parse_floors("hit@5=x", "hybrid")
            .unwrap_err()
            .contains("not a number"));
        assert!(parse_floors("hit@5=nan", "hybrid").is_err());
        assert!(parse_floors("recall=1", "hybrid")
            .unwrap_err()
            .contains("unknown metric"));
    }

    #[test]
    fn floors_and_regressions_decide_failures() {
        let now = m(&[
            ("hybrid.hit@5", 0.80),
            ("answers.false_refusals", 0.10),
            ("answers.ttft_ms_p50", 900.0),
        ]);
        assert!(gates(&now, &[("hybrid.hit@5".into(), 0.8)], None, None).is_empty());
        let f = gates(&now, &[("hybrid.hit@5".into(), 0.81)], None, None);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].metric, "hybrid.hit@5");
        let f = gates(&now, &[("answers.keywords".into(), 0.1)], None, None);
        assert!(f[0].message.contains("not measured"));
        let base = m(&[
            ("hybrid.hit@5", 0.83),
            ("answers.false_refusals", 0.05),
            ("answers.ttft_ms_p50", 100.0),
        ]);
        // hit@5 fell by 0.03 and false refusals rose by 0.05; latency is never gated.
        let f = gates(&now, &[], Some(&base), Some(0.02));
        let names: Vec<&str> = f.iter().map(|x| x.metric.as_str()).collect();
        assert_eq!(names, vec!["answers.false_refusals", "hybrid.hit@5"]);
        assert!(gates(&now, &[], Some(&base), Some(0.05)).is_empty());
        assert!(gates(&now, &[], Some(&base), None).is_empty());
        let d = deltas(&now, &base);
        assert!((d["hybrid.hit@5"] + 0.03).abs() < 1e-9);
    }

    #[test]
    fn junit_is_escaped_and_counted() {
        let x = junit(
            &[(
                "retrieval.hybrid".into(),
                vec![
                    JunitCase {
                        name: "a<b>&\"c\"".into(),
                        failure: None,
                    },
                    JunitCase {
                        name: "q2".into(),
                        failure: Some("no expected source in the top 5\u{1}".into()),
                    },
                ],
            )],
            1.5,
        );
        assert!(x.contains("tests=\"2\" failures=\"1\""), "{x}");
        assert!(x.contains("name=\"a&lt;b&gt;&amp;&quot;c&quot;\""), "{x}");
        assert!(
            x.contains("<failure message=\"no expected source in the top 5\"/>"),
            "{x}"
        );
        assert!(!x.contains('\u{1}'));
    }
}

//! `rag eval FILE.yaml`: retrieval and answer quality on a set of questions with known
//! sources, measured with the same engine `rag ask` uses, loaded once for the whole run.
//! [`cases`] reads the file, [`metrics`] scores one case, [`report`] summarises, gates and
//! formats; this module runs the cases and hands the result to the printer.

mod answers;
pub mod cases;
pub mod labels;
pub mod metrics;
pub mod plot;
pub mod report;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::config::Mode;
use crate::config::Settings;
use crate::engine::Answerer;
use crate::exit::{Exit, ExitError};
use crate::retrieve::Query;
use crate::retrieve::Ranked;
use crate::ui::Ui;
use answers::{answer_case, summarise_answers, CaseAnswer};
use cases::Compiled;
use report::{AnswerSummary, Failure, JunitCase, ModeSummary};

pub struct EvalOptions {
    pub file: PathBuf,
    /// Retrieval modes to measure; the first is the one `ask` uses and gates read.
    pub modes: Vec<Mode>,
    pub answers: bool,
    pub json: bool,
    pub junit: Option<PathBuf>,
    pub save_json: Option<PathBuf>,
    pub baseline: Option<PathBuf>,
    pub max_regression: Option<f64>,
    pub min: Option<String>,
    /// Where to draw the report (`--report`), and earlier runs to draw beside this one.
    pub report: Option<PathBuf>,
    pub report_with: Vec<PathBuf>,
    /// `--cite-labels`: labelled cited sentences the citation check is scored on.
    pub cite_labels: Option<PathBuf>,
    /// `--cite-judge`: the generator that also judges each labelled sentence.
    pub cite_judge: Option<crate::config::Tier>,
    pub verbose: bool,
    /// Top-k, filter: the retrieval settings of `ask`.
    pub query: Query,
}

/// What one case gave in one retrieval mode.
#[derive(Debug, Clone, Serialize)]
struct CaseMode {
    /// Rank (from 1) of the first span from an expected source within the top 10.
    first_hit: Option<usize>,
    /// Paths of the top 5 spans.
    top: Vec<String>,
    /// Whether every answer string is in the packed context (None without strings).
    context_has_answer: Option<bool>,
    prompt_tokens: usize,
    /// What the generators' help cost this case's retrieval, where asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    helped: Option<crate::retrieve::Helped>,
    #[serde(skip)]
    ranking: metrics::Ranking,
}

#[derive(Debug, Clone, Serialize)]
struct CaseResult {
    id: String,
    kind: Option<String>,
    question: String,
    retrieval: BTreeMap<String, CaseMode>,
    answer: Option<CaseAnswer>,
}

#[derive(Debug, Serialize)]
struct EvalReport {
    file: String,
    cases: usize,
    top_k: usize,
    /// The retrieval mode answers came from (the first of --modes).
    main_mode: String,
    modes: BTreeMap<String, ModeSummary>,
    answers: Option<AnswerSummary>,
    metrics: BTreeMap<String, f64>,
    deltas: Option<BTreeMap<String, f64>>,
    failures: Vec<Failure>,
    elapsed_ms: f64,
    /// `--cite-labels`: the citation check against the labelled sentences.
    #[serde(skip_serializing_if = "Option::is_none")]
    cite_check: Option<labels::Scored>,
    results: Vec<CaseResult>,
}

/// The citation check against the labelled sentences, with `judge`'s verdicts where asked.
fn check_citations(
    engine: &Answerer,
    labelled: &[labels::Labelled],
    judge: Option<crate::config::Tier>,
    ui: &Ui,
) -> Result<labels::Scored> {
    let Some(tier) = judge else {
        return Ok(labels::Scored::of(labelled));
    };
    let cited: Vec<(&str, &str)> = labelled
        .iter()
        .map(|l| (l.claim.as_str(), l.cited_text.as_str()))
        .collect();
    let bar = ui.progress(cited.len() as u64, "judging");
    let p_yes = engine.judge(tier, &cited, |_| bar.inc(1))?;
    bar.finish_and_clear();
    Ok(labels::Scored::judged(labelled, tier.name(), &p_yes))
}

fn mode_name(m: Mode) -> String {
    format!("{m:?}").to_lowercase()
}

/// The retrieval query for a case: a follow-up carries the earlier questions' context.
fn query_text(c: &Compiled) -> String {
    crate::ask::followup_query(&c.case.history, &c.case.question)
}

pub fn run(settings: &Settings, o: &EvalOptions, ui: &Ui) -> Result<Exit> {
    let started = Instant::now();
    let cases = cases::load(&o.file)?;
    let main = o.modes.first().copied().unwrap_or(Mode::Hybrid);
    let floors = gate_floors(o, main)?;
    let baseline = o.baseline.as_ref().map(|p| load_baseline(p)).transpose()?;
    // Read before the run, so a wrong path fails now and not after an hour of answers.
    let earlier = earlier_runs(o)?;
    let labelled = o.cite_labels.as_deref().map(labels::load).transpose()?;
    let needs_vectors = o.modes.iter().any(|m| *m != Mode::Text);
    let engine_mode = if needs_vectors {
        Mode::Hybrid
    } else {
        Mode::Text
    };
    // Without answers only prompts are packed (the vocabularies do); a judge needs weights.
    let vocab_only = !o.answers && o.cite_judge.is_none();
    let engine = Answerer::open(settings, engine_mode, vocab_only)?;

    let results = run_cases(&engine, &cases, main, o, ui)?;

    let modes: BTreeMap<String, ModeSummary> = o
        .modes
        .iter()
        .map(|&m| (mode_name(m), summarise_mode(&results, &mode_name(m))))
        .collect();
    let answers = o
        .answers
        .then(|| summarise_answers(&results, &mode_name(main)));
    let flat = report::flatten(&modes, answers.as_ref());
    let deltas = baseline.as_ref().map(|b| report::deltas(&flat, b));
    let failures = report::gates(&flat, &floors, baseline.as_ref(), o.max_regression);
    let out = EvalReport {
        file: o.file.display().to_string(),
        cases: cases.len(),
        top_k: o.query.top_k,
        main_mode: mode_name(main),
        modes,
        answers,
        metrics: flat,
        deltas,
        failures,
        elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
        cite_check: labelled
            .map(|l| check_citations(&engine, &l, o.cite_judge, ui))
            .transpose()?,
        results,
    };
    write_outputs(&out, o, &cases, main)?;
    if let Some(path) = &o.report {
        draw_report(path, &out, earlier, o)?;
    }
    print(&out, o, &cases, main, ui)?;
    Ok(if out.failures.is_empty() {
        Exit::Success
    } else {
        Exit::QualityGate
    })
}

/// The `--min` floors, with the gate options checked before the engine loads, so a typo
/// fails at once and not after an hour of answers.
fn gate_floors(o: &EvalOptions, main: Mode) -> Result<Vec<(String, f64)>> {
    let floors = match &o.min {
        Some(spec) => report::parse_floors(spec, &mode_name(main)).map_err(ExitError::usage)?,
        None => vec![],
    };
    if o.max_regression
        .is_some_and(|x| !(x.is_finite() && x >= 0.0))
    {
        return Err(ExitError::usage(
            "--max-regression must be a number of 0 or more (for example 0.02)".into(),
        ));
    }
    Ok(floors)
}

/// The files a CI job reads (`--junit`, `--save-json`), written before the printout so they
/// exist even when printing fails.
fn write_outputs(out: &EvalReport, o: &EvalOptions, cases: &[Compiled], main: Mode) -> Result<()> {
    if let Some(path) = &o.junit {
        let xml = report::junit(&junit_suites(out, cases, main), out.elapsed_ms / 1e3);
        std::fs::write(path, xml)
            .with_context(|| format!("writing the JUnit file {}", path.display()))?;
    }
    if let Some(path) = &o.save_json {
        std::fs::write(path, serde_json::to_string_pretty(out)?)
            .with_context(|| format!("writing the JSON report {}", path.display()))?;
    }
    Ok(())
}

/// The runs `--report` draws beside this one: the baseline, then each `--report-with`.
fn earlier_runs(o: &EvalOptions) -> Result<Vec<plot::Run>> {
    let mut runs = Vec::new();
    if o.report.is_none() {
        return Ok(runs);
    }
    if let Some(b) = &o.baseline {
        let mut before = plot::Run::from_file(b).map_err(|e| ExitError::usage(format!("{e:#}")))?;
        before.label = format!("baseline: {}", before.label);
        runs.push(before);
    }
    for p in &o.report_with {
        runs.push(plot::Run::from_file(p).map_err(|e| ExitError::usage(format!("{e:#}")))?);
    }
    Ok(runs)
}

/// `--report`: this run, the baseline and every `--report-with` run in one picture.
fn draw_report(
    path: &std::path::Path,
    out: &EvalReport,
    earlier: Vec<plot::Run>,
    o: &EvalOptions,
) -> Result<()> {
    let this = serde_json::to_value(out)?;
    // Named as it is saved (`--save-json dev-rerank.json`: `dev-rerank`), as the saved runs
    // beside it are; else "this run".
    let saved = o.save_json.as_deref().and_then(std::path::Path::file_stem);
    let name = saved.map_or_else(|| "this run".into(), |s| s.to_string_lossy().into_owned());
    let label = out
        .answers
        .as_ref()
        .map_or_else(|| name.clone(), |a| format!("{name}: {}", a.model));
    let mut runs = vec![plot::Run::from_report(&label, &this)?];
    runs.extend(earlier);
    plot::distinct_labels(&mut runs);
    let title = format!(
        "rag eval {}",
        o.file.file_name().map_or_else(
            || o.file.display().to_string(),
            |n| n.to_string_lossy().into_owned()
        )
    );
    plot::write(path, &title, &runs)
}

/// Every case in every mode (and answered, with `--answers`), under one progress bar.
fn run_cases(
    engine: &Answerer,
    cases: &[Compiled],
    main: Mode,
    o: &EvalOptions,
    ui: &Ui,
) -> Result<Vec<CaseResult>> {
    let steps = cases.len() * (o.modes.len() + usize::from(o.answers));
    let bar = ui.progress(steps as u64, "eval");
    let mut results = Vec::with_capacity(cases.len());
    for c in cases {
        let mut per_mode = BTreeMap::new();
        for &mode in &o.modes {
            per_mode.insert(mode_name(mode), retrieval_case(engine, c, mode, o)?);
            bar.inc(1);
        }
        let answer = if o.answers {
            let a = answer_case(engine, c, main, o, ui)?;
            bar.inc(1);
            Some(a)
        } else {
            None
        };
        results.push(CaseResult {
            id: c.id.clone(),
            kind: c.case.kind.clone(),
            question: c.case.question.clone(),
            retrieval: per_mode,
            answer,
        });
    }
    bar.finish_and_clear();
    Ok(results)
}

fn retrieval_case(
    engine: &Answerer,
    c: &Compiled,
    mode: Mode,
    o: &EvalOptions,
) -> Result<CaseMode> {
    let text = query_text(c);
    let q = |k: usize| Query {
        text: text.clone(),
        mode,
        top_k: k,
        filter: o.query.filter.clone(),
        verbose: false,
    };
    // The context `ask` would pack, from its own top-k; the ranks from the top 10
    // (retrieved again when k is not 10, since the candidate pool depends on k).
    let retrieval = engine.retrieval(&q(o.query.top_k), &c.case.question)?;
    let ranked10 = if o.query.top_k == 10 {
        retrieval.ranked.clone()
    } else {
        engine.retrieve(&q(10))?.0
    };
    let matches: Vec<Option<usize>> = ranked10.iter().map(|r| matched(c, r)).collect();
    let ranking = metrics::ranking(&matches, c.expect.len());
    let prep = engine.prepare(&c.case.question, &retrieval)?;
    let context: String = prep
        .packed
        .sources
        .iter()
        .map(|s| s.hit.text.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    Ok(CaseMode {
        first_hit: matches.iter().position(Option::is_some).map(|i| i + 1),
        top: ranked10
            .iter()
            .take(5)
            .map(|r| r.hit.path.clone())
            .collect(),
        context_has_answer: metrics::contains_all(&context, &c.case.answer_contains),
        prompt_tokens: prep.packed.prompt_tokens,
        helped: (retrieval.helped != Default::default()).then_some(retrieval.helped),
        ranking,
    })
}

/// Which expected source (index) the span comes from, if any.
fn matched(c: &Compiled, r: &Ranked) -> Option<usize> {
    c.expect
        .iter()
        .position(|e| e.matches(&r.hit.path, r.hit.line_start, r.hit.line_end))
}

fn summarise_mode(results: &[CaseResult], mode: &str) -> ModeSummary {
    let per: Vec<&CaseMode> = results
        .iter()
        .filter_map(|r| r.retrieval.get(mode))
        .collect();
    let avg = |f: &dyn Fn(&metrics::Ranking) -> f64| {
        metrics::mean(per.iter().map(|m| Some(f(&m.ranking)))).unwrap_or(0.0)
    };
    let tokens: Vec<f64> = per.iter().map(|m| m.prompt_tokens as f64).collect();
    ModeSummary {
        hit1: avg(&|r| r.hit1),
        hit5: avg(&|r| r.hit5),
        hit10: avg(&|r| r.hit10),
        mrr10: avg(&|r| r.mrr10),
        ndcg10: avg(&|r| r.ndcg10),
        context_recall: metrics::mean(
            per.iter()
                .map(|m| m.context_has_answer.map(|b| f64::from(u8::from(b)))),
        ),
        prompt_tokens_p50: metrics::percentile(&tokens, 50.0),
        help_ms_mean: metrics::mean(
            per.iter()
                .map(|m| m.helped.map(|h| h.expand_ms + h.rerank_ms)),
        ),
    }
}

/// The `metrics` of an earlier `rag eval --json` run.
fn load_baseline(path: &std::path::Path) -> Result<BTreeMap<String, f64>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the baseline {}", path.display()))
        .map_err(|e| ExitError::usage(format!("{e:#}")))?;
    #[derive(serde::Deserialize)]
    struct Old {
        metrics: BTreeMap<String, f64>,
    }
    let old: Old = serde_json::from_str(&text).map_err(|e| {
        ExitError::usage(format!(
            "{}: not the output of `rag eval --json` ({e}); make one with `rag eval --json FILE > {}`",
            path.display(),
            path.display()
        ))
    })?;
    Ok(old.metrics)
}

/// One JUnit suite: a case per question, failed with the message `failure` gives.
fn suite(
    name: String,
    r: &EvalReport,
    cases: &[Compiled],
    failure: impl Fn(&CaseResult, &Compiled) -> Option<String>,
) -> (String, Vec<JunitCase>) {
    let list = r
        .results
        .iter()
        .zip(cases)
        .map(|(res, c)| JunitCase {
            name: res.id.clone(),
            failure: failure(res, c),
        })
        .collect();
    (name, list)
}

fn junit_suites(r: &EvalReport, cases: &[Compiled], main: Mode) -> Vec<(String, Vec<JunitCase>)> {
    let mut suites = Vec::new();
    for mode in r.modes.keys() {
        suites.push(suite(format!("retrieval.{mode}"), r, cases, |res, c| {
            let m = res.retrieval.get(mode)?;
            (m.ranking.hit5 < 1.0).then(|| {
                format!(
                    "no span of {} in the top 5 (got {})",
                    c.case.expect_sources.join(", "),
                    m.top.join(", ")
                )
            })
        }));
    }
    if r.answers.is_some() {
        suites.push(suite(
            format!("answers.{}", mode_name(main)),
            r,
            cases,
            |res, c| {
                let a = res.answer.as_ref()?;
                if a.keywords == Some(false) {
                    Some(format!(
                        "the answer lacks {:?}: {}",
                        c.case.answer_contains, a.text
                    ))
                } else if a.refusal {
                    Some(format!("the model declined: {}", a.text))
                } else {
                    None
                }
            },
        ));
    }
    let gates = r
        .failures
        .iter()
        .map(|f| JunitCase {
            name: f.metric.clone(),
            failure: Some(f.message.clone()),
        })
        .collect::<Vec<_>>();
    suites.push(("gates".to_string(), gates));
    suites
}

fn print(r: &EvalReport, o: &EvalOptions, cases: &[Compiled], main: Mode, ui: &Ui) -> Result<()> {
    if o.json {
        return ui.json(r);
    }
    if o.verbose {
        let mode = mode_name(main);
        for (res, c) in r.results.iter().zip(cases) {
            let m = &res.retrieval[&mode];
            if m.ranking.hit5 < 1.0 || m.context_has_answer == Some(false) {
                ui.stderr(&format!(
                    "miss {}: {} | expected {} | top {} | context {}",
                    res.id,
                    res.question,
                    c.case.expect_sources.join(", "),
                    m.top.join(", "),
                    m.context_has_answer
                        .map_or("-", |b| if b { "has it" } else { "lacks it" })
                ));
            }
            if let Some(a) = &res.answer {
                if a.keywords == Some(false) || a.refusal {
                    ui.stderr(&format!("wrong {}: {} → {}", res.id, res.question, a.text));
                }
            }
        }
    }
    ui.outln(&format!(
        "{}: {} cases, top_k {}, {:.1} s",
        r.file,
        r.cases,
        r.top_k,
        r.elapsed_ms / 1e3
    ))?;
    let order: Vec<String> = o.modes.iter().map(|&m| mode_name(m)).collect();
    ui.out(&report::table(
        &r.modes,
        &order,
        r.answers.as_ref(),
        r.deltas.as_ref(),
    ))?;
    if let Some(c) = &r.cite_check {
        for line in c.lines() {
            ui.outln(&line)?;
        }
    }
    for f in &r.failures {
        ui.outln(&format!("FAIL {}", f.message))?;
    }
    Ok(())
}

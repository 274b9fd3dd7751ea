//! `rag eval --report FILE`: the runs drawn, for people who would rather look than read:
//! keywords against mean answer time (one point per run: a route, a lever, a baseline),
//! hit@1/5/10 per retrieval mode, and each case's rank of its first expected source. An SVG
//! drawn by plotters' SVG backend (text as SVG text: no font files), or an HTML page that
//! holds that SVG and the figures as a table; static, no scripts, no external assets.
//! Runs are read from the JSON `rag eval --json` writes, so a saved run and this one are
//! drawn the same way.

use std::collections::BTreeMap;

use anyhow::{anyhow, Context, Result};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use serde_json::Value;

/// What the report draws of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub label: String,
    /// Answer keywords and mean whole-answer seconds (runs with `--answers`).
    pub keywords: Option<f64>,
    pub answer_s: Option<f64>,
    /// The main mode's context recall, and the generators' help per question in seconds
    /// (`--expand`, `--rerank`), for the table.
    pub context_recall: Option<f64>,
    pub help_s: Option<f64>,
    /// hit@1, hit@5, hit@10 per retrieval mode.
    pub hits: BTreeMap<String, [f64; 3]>,
    /// Rank (from 1) of each case's first expected source in `main_mode`, None past 10.
    pub ranks: Vec<Option<u64>>,
    pub main_mode: String,
    /// The question set and part the run measured (`python/dev` for eval/python/dev.yaml):
    /// what tells apart runs of one route on several sets.
    pub set: String,
}

impl Run {
    /// A run from the JSON report of `rag eval --json` / `--save-json`.
    pub fn from_report(label: &str, v: &Value) -> Result<Run> {
        let modes = v["modes"]
            .as_object()
            .ok_or_else(|| anyhow!("no `modes` object: is this a `rag eval --json` report?"))?;
        let hits = modes
            .iter()
            .map(|(m, s)| {
                let f = |k: &str| s[k].as_f64().unwrap_or(0.0);
                (m.clone(), [f("hit1"), f("hit5"), f("hit10")])
            })
            .collect();
        // The mode the answers came from: the first of --modes, which the flat metrics
        // name for keywords' own mode; fall back to any mode present.
        let main_mode =
            main_mode(v).unwrap_or_else(|| modes.keys().next().cloned().unwrap_or_default());
        let ranks = v["results"]
            .as_array()
            .map(|rs| {
                rs.iter()
                    .map(|r| r["retrieval"][&main_mode]["first_hit"].as_u64())
                    .collect()
            })
            .unwrap_or_default();
        Ok(Run {
            label: label.to_string(),
            keywords: v["answers"]["keywords"].as_f64(),
            answer_s: v["answers"]["answer_ms_mean"].as_f64().map(|ms| ms / 1e3),
            context_recall: modes
                .get(&main_mode)
                .and_then(|m| m["context_recall"].as_f64()),
            help_s: modes
                .get(&main_mode)
                .and_then(|m| m["help_ms_mean"].as_f64())
                .map(|ms| ms / 1e3),
            hits,
            ranks,
            main_mode,
            set: set_name(v["file"].as_str().unwrap_or_default()),
        })
    }

    /// A saved run: labelled with its file's stem (`small.json` → `small`).
    pub fn from_file(path: &std::path::Path) -> Result<Run> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the eval report {}", path.display()))?;
        let v: Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a `rag eval --json` report", path.display()))?;
        let label = path.file_stem().map_or_else(
            || path.display().to_string(),
            |s| s.to_string_lossy().into_owned(),
        );
        Run::from_report(&label, &v).with_context(|| format!("reading {}", path.display()))
    }
}

/// `eval/python/dev.yaml` → `python/dev`: the case file and the folder it is in.
fn set_name(file: &str) -> String {
    let p = std::path::Path::new(file);
    let name = |p: Option<&std::path::Path>, stem: bool| {
        p.and_then(|p| if stem { p.file_stem() } else { p.file_name() })
            .map(|s| s.to_string_lossy().into_owned())
    };
    match (name(p.parent(), false), name(Some(p), true)) {
        (Some(dir), Some(part)) if !dir.is_empty() => format!("{dir}/{part}"),
        (_, part) => part.unwrap_or_default(),
    }
}

/// Runs with the same label (one route's run saved under one name in each set's project)
/// are named by their set as well: `python/dev: dev-auto`.
pub fn distinct_labels(runs: &mut [Run]) {
    let labels: Vec<String> = runs.iter().map(|r| r.label.clone()).collect();
    for r in runs.iter_mut() {
        if labels.iter().filter(|l| **l == r.label).count() > 1 && !r.set.is_empty() {
            r.label = format!("{}: {}", r.set, r.label);
        }
    }
}

/// The mode answers came from: saved as `main_mode` (runs before it was saved: hybrid
/// when measured, else the first).
fn main_mode(v: &Value) -> Option<String> {
    if let Some(m) = v["main_mode"].as_str() {
        return Some(m.to_string());
    }
    let modes = v["modes"].as_object()?;
    modes
        .keys()
        .find(|k| *k == "hybrid")
        .or_else(|| modes.keys().next())
        .cloned()
}

const W: u32 = 1200;
const H: u32 = 900;
const FONT: &str = "sans-serif";

/// The report as one SVG document.
pub fn svg(title: &str, runs: &[Run]) -> Result<String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(draw)?;
        let root = root.titled(title, (FONT, 22)).map_err(draw)?;
        let (top, bottom) = root.split_vertically(H / 2 - 20);
        let (left, right) = top.split_horizontally(W / 2);
        speed_panel(&left, runs)?;
        hits_panel(&right, runs)?;
        ranks_panel(&bottom, runs)?;
        root.present().map_err(draw)?;
    }
    Ok(out)
}

fn draw<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing the report: {e:?}")
}

fn color(i: usize) -> RGBColor {
    // Colour-blind-safe (Okabe–Ito), in a fixed order so the same run keeps its colour
    // in every panel.
    const C: [(u8, u8, u8); 8] = [
        (0, 114, 178),
        (230, 159, 0),
        (0, 158, 115),
        (204, 121, 167),
        (86, 180, 233),
        (213, 94, 0),
        (240, 228, 66),
        (0, 0, 0),
    ];
    let (r, g, b) = C[i % C.len()];
    RGBColor(r, g, b)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// Keywords (y) against mean whole-answer time (x), one labelled point per run.
fn speed_panel(area: &Area, runs: &[Run]) -> Result<()> {
    let points: Vec<(usize, &Run, f64, f64)> = runs
        .iter()
        .enumerate()
        .filter_map(|(i, r)| Some((i, r, r.answer_s?, r.keywords?)))
        .collect();
    let xmax = points.iter().map(|p| p.2).fold(1.0_f64, f64::max) * 1.25;
    let mut chart = ChartBuilder::on(area)
        .caption("Answer keywords against mean answer time", (FONT, 17))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(52)
        .build_cartesian_2d(0.0..xmax, 0.0..1.0)
        .map_err(draw)?;
    chart
        .configure_mesh()
        .x_desc("mean answer time (s)")
        .y_desc("keywords")
        .draw()
        .map_err(draw)?;
    if points.is_empty() {
        chart
            .draw_series(std::iter::once(Text::new(
                "no answers in these runs (rag eval --answers)",
                (xmax * 0.1, 0.5),
                (FONT, 15),
            )))
            .map_err(draw)?;
        return Ok(());
    }
    for (i, r, x, y) in points {
        let c = color(i);
        chart
            .draw_series(std::iter::once(Circle::new((x, y), 6, c.filled())))
            .map_err(draw)?;
        chart
            .draw_series(std::iter::once(Text::new(
                format!("{} ({y:.2}, {x:.1} s)", r.label),
                (x, y + 0.035),
                (FONT, 13),
            )))
            .map_err(draw)?;
    }
    Ok(())
}

/// hit@10, hit@5 and hit@1 as nested bars (light to dark) per mode and run.
fn hits_panel(area: &Area, runs: &[Run]) -> Result<()> {
    let mut modes: Vec<&String> = runs.iter().flat_map(|r| r.hits.keys()).collect();
    modes.sort();
    modes.dedup();
    let per = runs.len().max(1);
    let slots = modes.len() * (per + 1);
    let mut chart = ChartBuilder::on(area)
        .caption(
            "Retrieval: hit@10, hit@5, hit@1 per mode (light to dark)",
            (FONT, 17),
        )
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(52)
        .build_cartesian_2d(0.0..slots.max(1) as f64, 0.0..1.3)
        .map_err(draw)?;
    let group = (per + 1) as f64;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("share of questions")
        .draw()
        .map_err(draw)?;
    // Each group named under its bars' top, inside the plot (plotters' numeric x axis has
    // no category labels).
    for (g, mode) in modes.iter().enumerate() {
        chart
            .draw_series(std::iter::once(Text::new(
                mode.to_string(),
                (g as f64 * group + 0.1, 1.06),
                (FONT, 14),
            )))
            .map_err(draw)?;
    }
    for (g, mode) in modes.iter().enumerate() {
        for (i, r) in runs.iter().enumerate() {
            let Some(h) = r.hits.get(*mode) else { continue };
            let x0 = g as f64 * group + i as f64 + 0.1;
            let c = color(i);
            for (k, v) in h.iter().enumerate().rev() {
                // hit@10 drawn first and lightest, hit@1 last and solid.
                let shade = c.mix([1.0, 0.6, 0.3][k]);
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(x0, 0.0), (x0 + 0.8, *v)],
                        shade.filled(),
                    )))
                    .map_err(draw)?;
            }
        }
    }
    legend(&chart, runs)
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// One coloured square and label per run, in the top right of the plot.
fn legend(chart: &Chart, runs: &[Run]) -> Result<()> {
    let area = chart.plotting_area();
    let (x0, x1) = {
        let r = area.get_x_range();
        (r.start, r.end)
    };
    let (y0, y1) = {
        let r = area.get_y_range();
        (r.start, r.end)
    };
    let (w, h) = (x1 - x0, y1 - y0);
    for (i, r) in runs.iter().enumerate() {
        let y = y1 - h * (0.03 + 0.06 * i as f64);
        let x = x0 + w * 0.70;
        area.draw(&Rectangle::new(
            [(x, y), (x + w * 0.03, y - h * 0.035)],
            color(i).filled(),
        ))
        .map_err(draw)?;
        area.draw(&Text::new(r.label.clone(), (x + w * 0.045, y), (FONT, 13)))
            .map_err(draw)?;
    }
    Ok(())
}

/// Each case's rank of its first expected source (1 best; "none" past 10), per run.
fn ranks_panel(area: &Area, runs: &[Run]) -> Result<()> {
    let n = runs.iter().map(|r| r.ranks.len()).max().unwrap_or(0).max(1);
    let mode = runs.first().map_or("", |r| r.main_mode.as_str());
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "Rank of the first expected source per case ({mode}; top row: none in the top 10; colours as above)"
            ),
            (FONT, 17),
        )
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(52)
        .build_cartesian_2d(0.0..(n as f64 + 1.0), 0.0..12.0)
        .map_err(draw)?;
    chart
        .configure_mesh()
        .x_desc("case (in file order)")
        .y_desc("rank")
        .y_labels(12)
        .y_label_formatter(&|y: &f64| match y.round() as i64 {
            11 => "none".into(),
            r @ 1..=10 => r.to_string(),
            _ => String::new(),
        })
        .draw()
        .map_err(draw)?;
    let width = 0.6 / runs.len().max(1) as f64;
    for (i, r) in runs.iter().enumerate() {
        let c = color(i);
        let dx = -0.3 + width * (i as f64 + 0.5);
        chart
            .draw_series(r.ranks.iter().enumerate().map(|(k, rank)| {
                let y = rank.map_or(11.0, |x| x.min(10) as f64);
                Circle::new((k as f64 + 1.0 + dx, y), 3, c.filled())
            }))
            .map_err(draw)?;
    }
    Ok(())
}

/// An HTML page: the SVG inline, then every run's figures as a table.
pub fn html(title: &str, runs: &[Run], svg: &str) -> String {
    let mut rows = String::new();
    for r in runs {
        let f = |x: Option<f64>, d: usize| x.map_or("–".to_string(), |v| format!("{v:.d$}"));
        let hits: Vec<String> = r
            .hits
            .iter()
            .map(|(m, h)| format!("{m} {:.3} / {:.3} / {:.3}", h[0], h[1], h[2]))
            .collect();
        rows += &format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            escape(&r.label),
            f(r.keywords, 3),
            f(r.answer_s, 1),
            f(r.context_recall, 3),
            f(r.help_s, 2),
            escape(&hits.join("; "))
        );
    }
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title>\n\
         <style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}}</style></head><body>\n\
         {svg}\n<table><tr><th>run</th><th>keywords</th><th>mean answer s</th>\
         <th>context recall</th><th>help s per question</th><th>hit@1 / hit@5 / hit@10</th></tr>\n{rows}</table>\n</body></html>\n",
        t = escape(title)
    )
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Writes the report: HTML for `.html`/`.htm`, SVG otherwise.
pub fn write(path: &std::path::Path, title: &str, runs: &[Run]) -> Result<()> {
    let svg = svg(title, runs)?;
    let html = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("html") || e.eq_ignore_ascii_case("htm"));
    let body = if html {
        self::html(title, runs, &svg)
    } else {
        svg
    };
    crate::atomic::write(path, body.as_bytes())
        .with_context(|| format!("writing the report {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(keywords: f64, ms: f64, ranks: &[Option<u64>]) -> Value {
        serde_json::json!({
            "main_mode": "hybrid",
            "modes": {"hybrid": {"hit1": 0.5, "hit5": 0.8, "hit10": 0.9,
                                 "context_recall": 0.7, "help_ms_mean": 1500.0},
                      "text": {"hit1": 0.4, "hit5": 0.7, "hit10": 0.8}},
            "answers": {"keywords": keywords, "answer_ms_mean": ms},
            "results": ranks.iter().map(|r| serde_json::json!({
                "retrieval": {"hybrid": {"first_hit": r, "context_has_answer": true},
                              "text": {"first_hit": r, "context_has_answer": null}}
            })).collect::<Vec<_>>()
        })
    }

    #[test]
    fn a_run_is_read_from_the_json_report() {
        let r = Run::from_report("large", &report(0.4, 12_500.0, &[Some(1), None])).unwrap();
        assert_eq!(r.keywords, Some(0.4));
        assert_eq!(r.answer_s, Some(12.5));
        assert_eq!(r.hits["text"], [0.4, 0.7, 0.8]);
        assert_eq!(r.ranks, vec![Some(1), None]);
        assert_eq!(r.main_mode, "hybrid");
        let err = Run::from_report("x", &serde_json::json!({"cases": 3})).unwrap_err();
        assert!(format!("{err:#}").contains("rag eval --json"), "{err:#}");
    }

    #[test]
    fn the_svg_draws_every_run_and_the_html_escapes_labels() {
        let runs = vec![
            Run::from_report("small", &report(0.2, 8_000.0, &[Some(1), Some(3)])).unwrap(),
            Run::from_report("<large>", &report(0.45, 60_000.0, &[Some(2), None])).unwrap(),
        ];
        let svg = svg("dev.yaml", &runs).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(
            svg.contains("small (0.20, 8.0 s)"),
            "a labelled point per run"
        );
        assert!(svg.contains("0.45, 60.0 s)"));
        // One circle per case and run in the ranks panel, one per run in the speed panel.
        assert!(svg.matches("<circle").count() >= 2 * 2 + 2);
        let page = html("dev & held-out", &runs, &svg);
        assert!(page.contains("<title>dev &amp; held-out</title>"));
        assert!(page.contains("<td>&lt;large&gt;</td>"));
        // The main mode's context recall and the generators' help per question, in seconds.
        assert!(page.contains("<td>0.700</td><td>1.50</td>"), "{page}");
        // No external assets: nothing is loaded from anywhere (the SVG namespace is a name).
        for attr in ["src=", "href=", "url(", "@import"] {
            assert!(!page.contains(attr), "{attr} in the page");
        }
    }

    #[test]
    fn runs_of_one_name_on_several_sets_are_told_apart_by_set() {
        let mut runs = Vec::new();
        for file in [
            "/x/eval/python/dev.yaml",
            "/x/eval/bash/dev.yaml",
            "held.yaml",
        ] {
            let mut v = report(0.5, 9_000.0, &[Some(1)]);
            v["file"] = file.into();
            runs.push(Run::from_report("dev-auto", &v).unwrap());
        }
        runs.push(Run::from_report("small", &report(0.2, 4_000.0, &[Some(1)])).unwrap());
        distinct_labels(&mut runs);
        let labels: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "python/dev: dev-auto",
                "bash/dev: dev-auto",
                "held: dev-auto",
                "small"
            ]
        );
    }

    #[test]
    fn a_retrieval_only_run_says_where_the_answers_would_be() {
        let mut v = report(0.0, 0.0, &[Some(1)]);
        v["answers"] = Value::Null;
        let r = Run::from_report("retrieval", &v).unwrap();
        assert_eq!(r.keywords, None);
        let svg = svg("t", &[r]).unwrap();
        assert!(svg.contains("rag eval --answers"));
    }
}

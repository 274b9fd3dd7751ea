//! `rag eval`: retrieval (and with `--answers`, answer) quality on a YAML question set, in
//! each retrieval mode asked for; the harness itself is [`crate::eval`].

use anyhow::Result;

use crate::cli::EvalArgs;
use crate::config::{Mode, Settings};
use crate::eval::{self, EvalOptions};
use crate::exit::Exit;
use crate::ui::Ui;

pub fn run(settings: &Settings, a: &EvalArgs, verbose: bool, ui: &Ui) -> Result<Exit> {
    eval::run(settings, &options(settings, a, verbose), ui)
}

fn options(settings: &Settings, a: &EvalArgs, verbose: bool) -> EvalOptions {
    EvalOptions {
        file: a.file.clone(),
        modes: modes(settings.retrieval.mode, &a.modes),
        answers: a.answers,
        json: a.json,
        junit: a.junit.clone(),
        save_json: a.save_json.clone(),
        baseline: a.baseline.clone(),
        max_regression: a.max_regression,
        min: a.min.clone(),
        report: a.report.clone(),
        report_with: a.report_with.clone(),
        cite_labels: a.cite_labels.clone(),
        cite_judge: a.cite_judge,
        verbose,
        query: super::query(settings, "", &a.retrieval, verbose),
    }
}

/// The modes asked for, each once in the order given; without `--modes`, the configured
/// one first and then the others.
fn modes(configured: Mode, asked: &[Mode]) -> Vec<Mode> {
    let mut seen = Vec::new();
    if asked.is_empty() {
        seen.push(configured);
    }
    let rest = if asked.is_empty() {
        &[Mode::Hybrid, Mode::Vector, Mode::Text][..]
    } else {
        asked
    };
    for m in rest {
        if !seen.contains(m) {
            seen.push(*m);
        }
    }
    seen
}

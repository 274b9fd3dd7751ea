//! `rag ask --batch FILE`: many questions in one process. The index, the embedder and each
//! generator load once, and the prompt cache keeps the shared instruction prefix warm, so a
//! script asking 50 questions pays the start-up once instead of 50 times.
//!
//! Input: one question per line, or a JSON object per line with `question` and optionally
//! `id`, `top_k`, `mode` and `path` (a glob, like `--path`); blank lines are skipped; `-`
//! reads stdin. Output: one JSON object per question on stdout, in input order, as
//! `ask --json` prints it plus `id` (the given one, or the line number); a question that
//! fails gets `{"id", "question", "error", "exit"}` and the rest go on.
//!
//! The input is read a window of questions at a time ([`crate::api::batch`]); the answers
//! print through the printer.

use std::path::Path;

use crate::api::batch::{next_items, open_input};
use crate::engine::Answerer;
use crate::exit::{exit_code_of, Exit};
use crate::printer;
use crate::retrieve::Query;
use crate::ui::Ui;
use anyhow::Result;

/// Answers every question of `file`; exit 0 when each got an answer or abstained, 1 when any
/// failed (each failure is in its own object).
pub fn run(engine: &Answerer, file: &Path, base: &Query, ui: &Ui) -> Result<Exit> {
    let mut input = open_input(file)?;
    let bar = ui.spinner("answering the batch");
    let (mut asked, mut failed, mut line_no) = (0, 0, 0);
    // Windows of a few times llm.parallel: answers print in input order as each window ends,
    // and the sequences stay busy within it.
    let window = engine.settings().llm.parallel.max(1) * 4;
    loop {
        let chunk = next_items(&mut input, window, &mut line_no, base)?;
        if chunk.is_empty() {
            break;
        }
        let valid: Vec<Query> = chunk
            .iter()
            .filter_map(|it| it.query.clone().ok())
            .collect();
        let mut aside = |e: crate::engine::Event| -> std::io::Result<()> {
            bar.suspend(|| crate::printer::aside(&e, ui));
            Ok(())
        };
        let mut answers = engine.answer_many(&valid, &mut aside).into_iter();
        for it in &chunk {
            let mut failure = |message: &str, exit| {
                failed += 1;
                printer::batch_failure(&it.id, &it.question, message, exit)
            };
            let out = match &it.query {
                Err(message) => failure(message, Exit::Usage),
                Ok(_) => match answers.next().expect("one answer per valid question") {
                    Ok(answer) => printer::batch_answer(&it.id, &answer),
                    Err(e) => failure(&format!("{e:#}"), exit_code_of(&e)),
                },
            };
            asked += 1;
            bar.suspend(|| out.emit(ui))?;
            bar.set_message(format!("answering the batch: {asked} done"));
        }
    }
    bar.finish_and_clear();
    ui.info(&format!(
        "{asked} questions, {} answered or abstained, {failed} failed",
        asked - failed
    ));
    Ok(if failed == 0 {
        Exit::Success
    } else {
        Exit::Failure
    })
}

//! `rag ask --batch FILE`: many questions in one process. The index, the embedder and each
//! generator load once, and the prompt cache keeps the shared instruction prefix warm, so a
//! script asking 50 questions pays the start-up once instead of 50 times.
//!
//! Input: one question per line, or a JSON object per line with `question` and optionally
//! `id`, `top_k`, `mode` and `path` (a glob, like `--path`); blank lines are skipped; `-`
//! reads stdin. Output: one JSON object per question on stdout, in input order, as
//! `ask --json` prints it plus `id` (the given one, or the line number); a question that
//! fails gets `{"id", "question", "error", "exit"}` and the rest go on.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Deserialize;
use serde_json::Value;

use crate::ask::Query;
use crate::engine::Answerer;
use crate::exit::{exit_code_of, Exit, ExitError};
use crate::retrieve::{self, Mode};
use crate::ui::Ui;

/// One JSON input line. Unknown keys are an error for that line, so a typo such as `topk`
/// is not silently ignored.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    id: Option<Value>,
    question: String,
    top_k: Option<usize>,
    mode: Option<Mode>,
    path: Option<String>,
}

/// A parsed input line: its id and query, or why it could not be read.
struct Item {
    id: Value,
    question: String,
    query: Result<Query, String>,
}

/// Reads the batch: all of it first, so a slow model never holds a pipe's writer back.
fn read_input(file: &Path) -> Result<String> {
    let mut text = String::new();
    if file.as_os_str() == "-" {
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading questions from stdin")?;
    } else {
        text = std::fs::read_to_string(file).map_err(|e| {
            ExitError::usage(format!(
                "batch file {}: {e} (give one question per line, or - for stdin)",
                file.display()
            ))
        })?;
    }
    Ok(text)
}

fn item(n: usize, line: &str, base: &Query) -> Item {
    let mut q = base.clone();
    if !line.starts_with('{') {
        q.text = line.to_string();
        return Item {
            id: Value::from(n),
            question: q.text.clone(),
            query: Ok(q),
        };
    }
    let parsed: Line = match serde_json::from_str(line) {
        Ok(l) => l,
        Err(e) => {
            // The question and id, when the line is JSON with a bad field, so the failure
            // report says which question it was.
            let loose: Option<Value> = serde_json::from_str(line).ok();
            let field = |k: &str| loose.as_ref().and_then(|v| v.get(k)).cloned();
            return Item {
                id: field("id").unwrap_or(Value::from(n)),
                question: field("question")
                    .and_then(|q| q.as_str().map(String::from))
                    .unwrap_or_default(),
                query: Err(format!(
                "line {n}: {e} (expected {{\"question\", \"id\", \"top_k\", \"mode\", \"path\"}})"
            )),
            };
        }
    };
    let id = parsed.id.unwrap_or(Value::from(n));
    q.text = parsed.question.clone();
    let query = (|| {
        if let Some(k) = parsed.top_k {
            if k == 0 || k > 100 {
                return Err(format!("line {n}: top_k {k} is out of range (1 to 100)"));
            }
            q.top_k = k;
        }
        if let Some(m) = parsed.mode {
            q.mode = Some(m);
        }
        if let Some(g) = &parsed.path {
            q.filter = retrieve::filter(Some(g), None);
        }
        if q.text.trim().is_empty() {
            return Err(format!("line {n}: the question is empty"));
        }
        Ok(q)
    })();
    Item {
        id,
        question: parsed.question,
        query,
    }
}

fn failure(item: &Item, message: String, exit: Exit) -> Value {
    serde_json::json!({
        "id": item.id,
        "question": item.question,
        "error": message,
        "exit": exit as u8,
    })
}

/// Answers every question of `file`; exit 0 when each got an answer or abstained, 1 when any
/// failed (each failure is in its own object).
pub fn run(engine: &Answerer, file: &Path, base: &Query, ui: &Ui) -> Result<Exit> {
    let text = read_input(file)?;
    let items: Vec<Item> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| item(i + 1, l.trim(), base))
        .collect();
    let bar = ui.progress(items.len() as u64, "questions");
    let mut failed = 0;
    // Windows of a few times llm.parallel: answers print in input order as each window ends,
    // and the sequences stay busy within it.
    let window = engine.settings().llm.parallel.max(1) * 4;
    for chunk in items.chunks(window) {
        let valid: Vec<Query> = chunk
            .iter()
            .filter_map(|it| it.query.clone().ok())
            .collect();
        let mut answers = engine.answer_many(&valid, ui).into_iter();
        for it in chunk {
            let out = match &it.query {
                Err(message) => failure(it, message.clone(), Exit::Usage),
                Ok(_) => match answers.next().expect("one answer per valid question") {
                    Ok(answer) => {
                        let mut v = crate::printer::json_value(&answer);
                        if let Value::Object(map) = &mut v {
                            map.insert("id".into(), it.id.clone());
                        }
                        v
                    }
                    Err(e) => failure(it, format!("{e:#}"), exit_code_of(&e)),
                },
            };
            if out.get("error").is_some() {
                failed += 1;
            }
            bar.suspend(|| ui.json(&out))?;
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    ui.info(&format!(
        "{} questions, {} answered or abstained, {failed} failed",
        items.len(),
        items.len() - failed
    ));
    Ok(if failed == 0 {
        Exit::Success
    } else {
        Exit::Failure
    })
}

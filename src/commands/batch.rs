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
//! The input is read a window of questions at a time, never whole: `yes q | rag ask --batch -`
//! answers forever in constant memory, and a line that is not UTF-8 or is over
//! [`MAX_LINE`] bytes fails alone.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use anyhow::{Context, Result};
use serde::Deserialize;
use serde_json::Value;

use crate::config::Mode;
use crate::engine::Answerer;
use crate::exit::{exit_code_of, Exit, ExitError};
use crate::retrieve;
use crate::retrieve::Query;
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

/// The longest input line read; a question is a sentence, and a longer line is refused
/// alone instead of growing without bound.
const MAX_LINE: usize = 64 * 1024;

/// The questions, one line at a time.
type Input = BufReader<Box<dyn Read>>;

fn open_input(file: &Path) -> Result<Input> {
    let read: Box<dyn Read> = if file.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else {
        let f = std::fs::File::open(file).map_err(|e| {
            ExitError::usage(format!(
                "batch file {}: {e} (give one question per line, or - for stdin)",
                file.display()
            ))
        })?;
        if f.metadata().is_ok_and(|m| m.is_dir()) {
            return Err(ExitError::usage(format!(
                "batch file {} is a folder; give a file with one question per line, or - for stdin",
                file.display()
            )));
        }
        Box::new(f)
    };
    Ok(BufReader::with_capacity(64 * 1024, read))
}

/// Reads up to `n` non-blank lines as items; `line_no` counts every line read so far. Once
/// it has one, it takes only lines already read, never waits for more: a pipe that writes
/// a question now and then gets each answered as it comes. Empty at the end of the input.
fn next_items<R: Read>(
    input: &mut BufReader<R>,
    n: usize,
    line_no: &mut usize,
    base: &Query,
) -> Result<Vec<Item>> {
    let mut items = Vec::new();
    let mut buf = Vec::new();
    while items.len() < n && (items.is_empty() || !input.buffer().is_empty()) {
        buf.clear();
        let read = (&mut *input)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
            .context("reading the batch's questions")?;
        if read == 0 {
            break;
        }
        *line_no += 1;
        let too_long = buf.len() > MAX_LINE && buf.last() != Some(&b'\n');
        if too_long {
            // The rest of the line goes unread into the void, a bounded piece at a time.
            skip_line(input)?;
            items.push(refused(
                *line_no,
                format!("line {line_no} is over {MAX_LINE} bytes; a question is one line of text"),
            ));
            continue;
        }
        match std::str::from_utf8(&buf) {
            Ok(l) if l.trim().is_empty() => {}
            Ok(l) => items.push(item(*line_no, l.trim(), base)),
            Err(e) => items.push(refused(
                *line_no,
                format!("line {line_no} is not UTF-8 text ({e}); save the questions as UTF-8"),
            )),
        }
    }
    Ok(items)
}

/// Reads and drops the rest of the current line.
fn skip_line(input: &mut impl BufRead) -> Result<()> {
    loop {
        let (done, used) = {
            let chunk = input.fill_buf().context("reading the batch's questions")?;
            match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (true, i + 1),
                None => (chunk.is_empty(), chunk.len()),
            }
        };
        input.consume(used);
        if done {
            return Ok(());
        }
    }
}

/// A line that could not be read as a question.
fn refused(n: usize, message: String) -> Item {
    Item {
        id: Value::from(n),
        question: String::new(),
        query: Err(message),
    }
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
            // Narrows the batch's --path/--where; a line cannot widen them.
            q.filter = retrieve::narrow(q.filter.as_deref(), retrieve::filter(Some(g), None));
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
            asked += 1;
            bar.suspend(|| ui.json(&out))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_narrows_the_batch_scope_and_never_widens_it() {
        let base = Query {
            filter: retrieve::filter(Some("docs/public/**"), None),
            ..Query::default()
        };
        let it = item(1, r#"{"question": "q", "path": "**"}"#, &base);
        assert_eq!(
            it.query.unwrap().filter.as_deref(),
            Some("(path LIKE 'docs/public/%') AND (path LIKE '%')")
        );
    }

    #[test]
    fn lines_are_read_a_window_at_a_time_and_a_bad_one_fails_alone() {
        let mut input = b"first?\n\n\xff\xfe broken\n".to_vec();
        input.extend(vec![b'x'; MAX_LINE + 10]);
        input.extend(b"\n{\"question\": \"json?\", \"id\": \"j\"}\r\nlast?");
        let mut r = BufReader::new(&input[..]);
        let base = Query::default();
        let mut line_no = 0;
        let first = next_items(&mut r, 2, &mut line_no, &base).unwrap();
        assert_eq!(first.len(), 2, "the blank line is skipped, not counted");
        assert_eq!(first[0].query.as_ref().unwrap().text, "first?");
        let e = first[1].query.as_ref().unwrap_err();
        assert!(e.starts_with("line 3 is not UTF-8"), "{e}");
        // Windows end where the read-ahead does; the lines are the same however they split.
        let mut rest = Vec::new();
        loop {
            let got = next_items(&mut r, 10, &mut line_no, &base).unwrap();
            if got.is_empty() {
                break;
            }
            rest.extend(got);
        }
        assert_eq!(rest.len(), 3);
        let e = rest[0].query.as_ref().unwrap_err();
        assert!(e.starts_with("line 4 is over 65536 bytes"), "{e}");
        assert_eq!(rest[1].id, Value::from("j"));
        assert_eq!(rest[1].query.as_ref().unwrap().text, "json?");
        assert_eq!(rest[2].query.as_ref().unwrap().text, "last?");
        assert_eq!(rest[2].id, Value::from(6));
        assert!(next_items(&mut r, 10, &mut line_no, &base)
            .unwrap()
            .is_empty());
    }
}

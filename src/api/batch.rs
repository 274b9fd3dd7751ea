//! The questions of `rag ask --batch FILE`: one question per line, or a JSON object per line
//! with `question` and optionally `id`, `top_k`, `mode` and `path` (a glob, like `--path`);
//! blank lines skipped; `-` reads stdin. Read a window of questions at a time, never whole:
//! `yes q | rag ask --batch -` answers forever in constant memory, and a line that is not
//! UTF-8 or is over [`MAX_LINE`] bytes fails alone.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use anyhow::{Context, Result};
use serde::Deserialize;
use serde_json::Value;

use crate::config::Mode;
use crate::exit::ExitError;
use crate::retrieve;
use crate::retrieve::Query;

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
pub struct Item {
    pub id: Value,
    pub question: String,
    pub query: Result<Query, String>,
}

/// The longest input line read; a question is a sentence, and a longer line is refused
/// alone instead of growing without bound.
const MAX_LINE: usize = 64 * 1024;

/// The questions, one line at a time.
pub type Input = BufReader<Box<dyn Read>>;

/// The batch file, or stdin for `-`; a missing file or a folder is a usage error.
pub fn open_input(file: &Path) -> Result<Input> {
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
pub fn next_items<R: Read>(
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
            q.mode = m;
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

//! The one printer: answers (streamed events and the checked answer), search hits and
//! ingest reports, as text for people, one JSON object, or NDJSON events. Rendering is pure
//! (an [`Output`] of stdout text and stderr lines), so it is snapshot-tested from recorded
//! answers without a model; [`Output::emit`] hands it to the terminal through [`Ui`].

use anyhow::Result;
use serde::Serialize;

mod models;
mod reports;
pub use models::{models_fetched, models_hub_fetched, models_list, models_removed};
pub use reports::{doctor, init, status};

use crate::answer::{Answer, Event, SourceOut, Timings, ABSTAIN_TEXT};
use crate::ask::cite;
use crate::config::Mode;
use crate::ingest::{Plan, Progress, Report};
use crate::retrieve::Ranked;
use crate::ui::Ui;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    /// One JSON object when done (`--json`).
    Json,
    /// One JSON event per line as it happens (`--ndjson`).
    Ndjson,
}

/// What to write: data on stdout, and lines for people on stderr.
#[derive(Debug, Default, PartialEq)]
pub struct Output {
    pub stdout: String,
    /// Notes and summaries (hidden by `-q`).
    pub info: Vec<String>,
    /// Problems worth knowing (shown with `-q`).
    pub warn: Vec<String>,
    /// Lines the user asked for (`--stats`), shown with `-q`.
    pub stderr: Vec<String>,
}

impl Output {
    fn out(&mut self, line: &str) {
        self.stdout.push_str(line);
        self.stdout.push('\n');
    }

    fn json<T: Serialize>(&mut self, value: &T) {
        let line = serde_json::to_string(value).expect("answers serialise");
        self.out(&line);
    }

    pub fn emit(&self, ui: &Ui) -> Result<()> {
        for w in &self.warn {
            ui.warn(w);
        }
        if !self.stdout.is_empty() {
            ui.out(&self.stdout)?;
        }
        for i in &self.info {
            ui.info(i);
        }
        for s in &self.stderr {
            ui.stderr(s);
        }
        Ok(())
    }

    /// Everything as one string, stderr lines marked, for snapshots.
    #[cfg(test)]
    pub fn transcript(&self) -> String {
        let mut t = self.stdout.clone();
        for (tag, lines) in [
            ("warn", &self.warn),
            ("info", &self.info),
            ("stderr", &self.stderr),
        ] {
            for l in lines {
                t.push_str(&format!("[{tag}] {l}\n"));
            }
        }
        t
    }
}

/// One line of `rag ask --batch`'s output: the answer as `ask --json` prints it, plus `id`.
pub fn batch_answer(id: &serde_json::Value, answer: &Answer) -> Output {
    let mut v = json_value(answer);
    if let serde_json::Value::Object(map) = &mut v {
        map.insert("id".into(), id.clone());
    }
    let mut o = Output::default();
    o.json(&v);
    o
}

/// One line of `rag ask --batch`'s output for a question that failed: `{"id", "question",
/// "error", "exit"}`.
pub fn batch_failure(
    id: &serde_json::Value,
    question: &str,
    message: &str,
    exit: crate::exit::Exit,
) -> Output {
    let mut o = Output::default();
    o.json(&serde_json::json!({
        "id": id,
        "question": question,
        "error": message,
        "exit": exit as u8,
    }));
    o
}

/// How `ask`, `chat` and batch answers are shown.
#[derive(Debug, Clone, Copy)]
pub struct Printer {
    pub format: Format,
    /// The answer text was streamed as it came (text format): only a newline ends it.
    pub live: bool,
    /// `--stats`: the timing line on stderr even with `-q`.
    pub stats: bool,
}

impl Printer {
    /// One engine event while an answer is produced.
    pub fn event(&self, e: &Event) -> Output {
        let mut o = Output::default();
        match (e, self.format) {
            (
                Event::Ranked {
                    ranked,
                    mode,
                    filter,
                },
                _,
            ) => return ranking(ranked, *mode, *filter),
            (Event::Warning(w), _) => o.warn.push(w.to_string()),
            (Event::Note(n), _) => o.info.push(format!("note: {n}")),
            (Event::Dropped(d), _) => o.info.push(format!(
                "note: {}:{}-{} did not fit the context budget",
                d.path, d.line_start, d.line_end
            )),
            (
                Event::Retrieved {
                    sources,
                    retrieval_ms,
                },
                Format::Ndjson,
            ) => o.json(&retrieved_event(sources, *retrieval_ms)),
            (Event::Piece(p), Format::Ndjson) => {
                o.json(&serde_json::json!({ "event": "token", "text": p }))
            }
            (Event::Piece(p), Format::Text) if self.live => o.stdout.push_str(p),
            _ => {}
        }
        o
    }

    /// The checked answer, after the stream.
    pub fn answer(&self, a: &Answer, min_similarity: f32) -> Output {
        let mut o = Output::default();
        match self.format {
            Format::Json => o.json(a),
            Format::Ndjson => {
                o.json(&serde_json::json!({ "event": "done", "answer": json_value(a) }))
            }
            Format::Text if a.abstained => {
                o.out(ABSTAIN_TEXT);
                o.info.push(format!(
                    "abstained: best similarity {:.2} is below retrieval.min_similarity = {min_similarity}",
                    a.best_similarity.unwrap_or(f32::NAN)
                ));
                return o;
            }
            Format::Text => {
                if !a.invalid_citations.is_empty() {
                    o.warn.push(format!(
                        "the answer cited {} that no source has; removed from the checked answer",
                        a.invalid_citations.join(", ")
                    ));
                }
                if let Some(w) = nothing_whole(a) {
                    o.warn.push(w);
                }
                if self.live {
                    o.out("");
                } else {
                    o.out(&a.answer);
                }
                o.stdout.push_str(&evidence_and_sources(a));
            }
        }
        if !a.abstained {
            let line = stats_line(&a.timings);
            if self.stats {
                o.stderr.push(line);
            } else if self.format == Format::Text {
                o.info.push(line);
            }
        }
        o
    }
}

/// Why an answer shows nothing though the generator wrote something: it stopped before its
/// first sentence ended (only whole sentences are shown), with the fix.
fn nothing_whole(a: &Answer) -> Option<String> {
    use crate::llm::StopReason;
    if !a.answer.trim().is_empty() || a.dropped_text.is_empty() {
        return None;
    }
    let why = match a.stop {
        Some(StopReason::MaxTokens) => {
            "it reached its token limit first; raise --max-tokens (llm.max_tokens)"
        }
        Some(StopReason::ContextFull) => {
            "the context window filled first; raise llm.n_ctx or ask with fewer sources (-k)"
        }
        _ => "it began by repeating itself; try another --model",
    };
    Some(format!(
        "the answer stopped before its first sentence ended, so nothing is shown: {why}"
    ))
}

/// `value` as a JSON tree with each `f32` as short as it prints (0.0153846154, not
/// 0.01538461539894342): `serde_json::to_value` widens floats to `f64` digits that were
/// never measured, and the same answer would print differently as a whole and as a part.
pub fn json_value<T: Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_string(value)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

fn retrieved_event(sources: &[SourceOut], retrieval_ms: f64) -> serde_json::Value {
    serde_json::json!({ "event": "retrieval", "sources": json_value(&sources), "retrieval_ms": retrieval_ms })
}

/// "Evidence:" (the source line behind each cited sentence) and "Sources:" under an answer.
pub fn evidence_and_sources(a: &Answer) -> String {
    let mut t = String::new();
    if !a.evidence.is_empty() {
        t.push_str("\nEvidence:\n");
        for e in &a.evidence {
            let lines = if e.line == e.line_end {
                e.line.to_string()
            } else {
                format!("{}-{}", e.line, e.line_end)
            };
            t.push_str(&format!(
                "  [{}] {}:{lines}  \"{}\"\n",
                e.id,
                e.path,
                snippet(&e.text, 160)
            ));
        }
    }
    t.push_str("\nSources:\n");
    for s in &a.sources {
        let heading = if s.heading.is_empty() {
            String::new()
        } else {
            format!(" — {}", s.heading)
        };
        let cited: Vec<&cite::Citation> = a.citations.iter().filter(|c| c.id == s.id).collect();
        let mark = match (cited.is_empty(), cited.iter().all(|c| c.supported)) {
            (true, _) => "",
            (false, true) => "  (cited, supported)",
            (false, false) => "  (cited, not supported by its text)",
        };
        t.push_str(&format!(
            "  [{}] {}:{}-{}{heading}{mark}\n",
            s.id, s.path, s.line_start, s.line_end
        ));
    }
    t
}

/// `prompt 812 tok (640 cached) · prefill 1.9k tok/s · first token 0.21 s · 96 tok at 48 tok/s`
/// (and `· 40 of 64 drafted kept` with speculative decoding, `· citations judged in 2.1 s`
/// with `llm.judge_citations`, `· expanded (24 tok) in 0.9 s · 10 reranked in 3.1 s` with
/// the generators' help to retrieval, `· 29/29 layers on GPU` where layers ran on one, `· decoded on
/// 1 of 2 cores` where other processes kept one busy)
pub fn stats_line(t: &Timings) -> String {
    let k = |x: f64| {
        if x >= 1000.0 {
            format!("{:.1}k", x / 1000.0)
        } else {
            format!("{x:.0}")
        }
    };
    let drafts = if t.drafted_tokens > 0 {
        format!(
            " · {} of {} drafted kept",
            t.accepted_tokens, t.drafted_tokens
        )
    } else {
        String::new()
    };
    let judged = if t.judge_ms > 0.0 {
        format!(" · citations judged in {:.1} s", t.judge_ms / 1e3)
    } else {
        String::new()
    } + &reports::helped(t);
    let cores = crate::config::threads(0);
    let threads = if t.threads > 0 && t.threads < cores {
        format!(" · decoded on {} of {cores} cores", t.threads)
    } else {
        String::new()
    };
    let gpu = if t.gpu_layers > 0 {
        format!(" · {}/{} layers on GPU", t.gpu_layers, t.layers)
    } else {
        String::new()
    };
    format!(
        "prompt {} tok ({} cached) · prefill {} tok/s · first token {:.2} s · {} tok at {} tok/s{drafts}{judged}{gpu}{threads}",
        t.prompt_tokens,
        t.cached_tokens,
        k(t.prefill_tok_per_s),
        t.ttft_ms / 1e3,
        t.generated_tokens,
        k(t.decode_tok_per_s)
    )
}

/// The first `max` characters of `text` on one line.
pub fn snippet(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}…")
    }
}

/// One search hit, as `rag search --json` prints it.
#[derive(Debug, Serialize)]
pub struct SearchHit<'a> {
    pub rank: usize,
    pub path: &'a str,
    pub chunk_id: &'a str,
    pub heading: &'a str,
    pub line_start: u32,
    pub line_end: u32,
    pub score: f32,
    pub vector_score: Option<f32>,
    pub text_score: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rerank_score: Option<f32>,
    pub text: &'a str,
}

impl<'a> SearchHit<'a> {
    /// The hits of a retrieval, ranked from 1.
    pub fn all(ranked: &'a [Ranked]) -> Vec<SearchHit<'a>> {
        ranked
            .iter()
            .enumerate()
            .map(|(i, r)| SearchHit {
                rank: i + 1,
                path: &r.hit.path,
                chunk_id: &r.hit.id,
                heading: &r.hit.heading,
                line_start: r.hit.line_start,
                line_end: r.hit.line_end,
                score: r.score,
                vector_score: r.vector_score,
                text_score: r.text_score,
                rerank_score: r.rerank_score,
                text: &r.hit.text,
            })
            .collect()
    }
}

/// `rag search`: ranked hits with a snippet each, or `{"query", "hits"}`.
pub fn hits(query: &str, hits: &[SearchHit], ms: f64, json: bool) -> Output {
    let mut o = Output::default();
    if json {
        o.json(&serde_json::json!({ "query": query, "hits": json_value(&hits) }));
        return o;
    }
    for h in hits {
        let heading = if h.heading.is_empty() {
            String::new()
        } else {
            format!("  {}", h.heading)
        };
        o.out(&format!(
            "{}. {}:{}-{}{}  (score {:.4})",
            h.rank, h.path, h.line_start, h.line_end, heading, h.score
        ));
        o.out(&format!("   {}", snippet(h.text, 200)));
    }
    let noun = if hits.len() == 1 { "hit" } else { "hits" };
    o.info
        .push(format!("{} {noun} in {:.0} ms", hits.len(), ms));
    o
}

/// `rag ingest`: the plan of a dry run or `--check`, or what a run did; `--json` the report.
pub fn ingest(r: &Report, json: bool) -> Output {
    let mut o = Output::default();
    if json {
        o.json(r);
        return o;
    }
    if let Some(plan) = &r.dry_run {
        ingest_plan(&mut o, plan);
        return o;
    }
    for f in &r.files_skipped {
        o.info.push(format!("skipped {}: {}", f.path, f.error));
    }
    for f in &r.files_failed {
        o.warn.push(format!("{}: {}", f.path, f.error));
    }
    for f in &r.files_failed_before {
        o.warn.push(format!(
            "{}: failed before and unchanged, not parsed again (--retry-failed): {}",
            f.path, f.error
        ));
    }
    let before = match r.files_failed_before.len() {
        0 => String::new(),
        n => format!(" (+{n} failed before)"),
    };
    o.info.push(format!(
        "{} files: {} added, {} changed, {} unchanged, {} removed, {} failed{before}, {} skipped · {} chunks written, {} deleted · {:.1} s",
        r.files_seen,
        r.files_added,
        r.files_changed,
        r.files_unchanged,
        r.files_removed,
        r.files_failed.len(),
        r.files_skipped.len(),
        r.chunks_written,
        r.chunks_deleted,
        r.elapsed_ms as f64 / 1e3
    ));
    o
}

/// The plan of a dry run or `--check`: a line per file to add, change or remove, and a
/// summary that says whether the index is up to date, since nothing was written.
fn ingest_plan(o: &mut Output, plan: &Plan) {
    for (what, list) in [
        ("add", &plan.added),
        ("change", &plan.changed),
        ("remove", &plan.removed),
    ] {
        for p in list {
            o.out(&format!("{what:7} {p}"));
        }
    }
    let todo = plan.added.len() + plan.changed.len() + plan.removed.len();
    o.info.push(if todo == 0 {
        format!(
            "up to date: nothing to add, change or remove ({} unchanged)",
            plan.unchanged
        )
    } else {
        format!(
            "not up to date: {} to add, {} to change, {} to remove ({} unchanged); nothing written",
            plan.added.len(),
            plan.changed.len(),
            plan.removed.len(),
            plan.unchanged
        )
    });
}

/// Shows on stderr what the engine reports besides the answer (warnings, the `-v`
/// ranking); whether `e` was one of those. Front ends whose stdout is a protocol (serve,
/// mcp, `ask --batch`) or that show the answer their own way (eval) pass the rest on.
pub fn aside(e: &Event, ui: &Ui) -> bool {
    match e {
        Event::Warning(_) | Event::Note(_) | Event::Ranked { .. } => {
            let plain = Printer {
                format: Format::Text,
                live: false,
                stats: false,
            };
            // Only stderr lines: nothing here can fail to write.
            let _ = plain.event(e).emit(ui);
            true
        }
        _ => false,
    }
}

/// A spinner on a terminal while the engine reads the prompt (`Event::Prefill` starts it,
/// `Event::Prefilled`, or the end of the answer, clears it).
#[derive(Default)]
pub struct PrefillSpinner(Option<indicatif::ProgressBar>);

impl PrefillSpinner {
    pub fn event(&mut self, e: &Event, ui: &Ui) {
        match e {
            Event::Prefill { tokens } => {
                self.0 = Some(ui.spinner(&format!("reading {tokens} prompt tokens")));
            }
            Event::Prefilled => self.clear(),
            _ => {}
        }
    }

    fn clear(&mut self) {
        if let Some(s) = self.0.take() {
            s.finish_and_clear();
        }
    }
}

impl Drop for PrefillSpinner {
    fn drop(&mut self) {
        self.clear();
    }
}

/// An ingest's progress on a terminal: the embedding bar, a spinner for each step after
/// it, warnings and notes on stderr.
#[derive(Default)]
pub struct IngestProgress(Option<indicatif::ProgressBar>);

impl IngestProgress {
    pub fn event(&mut self, p: &Progress, ui: &Ui) {
        match p {
            Progress::Warning(w) => ui.warn(w),
            Progress::Note(n) => ui.info(n),
            Progress::Embedding {
                done,
                total,
                tok_per_s,
            } => {
                let bar = self
                    .0
                    .get_or_insert_with(|| ui.progress(*total, "embedding"));
                bar.set_position(*done);
                if let Some(r) = tok_per_s {
                    bar.set_message(format!("{r:.0} tok/s"));
                }
            }
            Progress::Step(what) => {
                self.clear();
                self.0 = Some(ui.spinner(what));
            }
            Progress::Done => self.clear(),
        }
    }

    fn clear(&mut self) {
        if let Some(b) = self.0.take() {
            b.finish_and_clear();
        }
    }
}

impl Drop for IngestProgress {
    fn drop(&mut self) {
        self.clear();
    }
}

/// How retrieval ranked the spans (`-v`), on stderr: each span's rank and score in the
/// vector and text retrievers, the fused score, and the reranker's when there is one.
pub fn ranking(ranked: &[Ranked], mode: Mode, filter: Option<&str>) -> Output {
    let rank = |r: Option<usize>, s: Option<f32>| match (r, s) {
        (Some(r), Some(s)) => format!("#{r} ({s:.3})"),
        _ => "-".to_string(),
    };
    let mut o = Output::default();
    o.stderr.push(format!(
        "retrieval: mode {mode:?}, filter {}",
        filter.unwrap_or("none")
    ));
    for (i, r) in ranked.iter().enumerate() {
        let rerank = r.rerank_score.map(|s| format!("  rerank {s:.3}"));
        o.stderr.push(format!(
            "  {:>2}. {}:{}-{}  vector {}  text {}  fused {:.4}{}",
            i + 1,
            r.hit.path,
            r.hit.line_start,
            r.hit.line_end,
            rank(r.vector_rank, r.vector_score),
            rank(r.text_rank, r.text_score),
            r.score,
            rerank.unwrap_or_default()
        ));
    }
    o
}

#[cfg(test)]
mod tests;

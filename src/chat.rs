//! `rag chat`: a multi-turn loop over one llama.cpp context. Each turn retrieves for its own
//! question; earlier turns are appended, never rewritten, so the KV cache keeps their tokens
//! and a new turn prefills only what is new. When the window fills, the oldest turns go.
//! On a terminal, Ctrl-C stops the answer being written and keeps the chat, Ctrl-D leaves;
//! piped stdin is read one question per line. (Line editing with rustyline was left out: its
//! `nix` features would rebuild LanceDB's whole dependency tree.)

use std::io::{BufRead, IsTerminal};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, Result};

use crate::ask::prompt::{self, Turn};
use crate::ask::stream::{drop_repeat, AnswerStream};
use crate::ask::{should_abstain, stats_line, window, Query, Retriever, Timings, ABSTAIN_TEXT};
use crate::config::Settings;
use crate::llm::{Llm, StopReason};
use crate::retrieve::Mode;
use crate::ui::Ui;
use crate::Exit;

pub struct ChatOptions {
    pub verbose: bool,
}

/// Reads questions, one per line; `None` at the end of input (Ctrl-D on a terminal).
fn next_question(
    lines: &mut std::io::StdinLock<'static>,
    ui: &Ui,
    interactive: bool,
) -> Result<Option<String>> {
    loop {
        if interactive {
            ui.prompt("rag> ")?;
        }
        let mut line = String::new();
        match lines.read_line(&mut line) {
            Ok(0) => return Ok(None),
            Ok(_) => {}
            // Ctrl-C at the prompt interrupts the read: ask again.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                if interactive {
                    ui.prompt("\n")?;
                }
                continue;
            }
            Err(e) => return Err(anyhow!("reading the question from stdin: {e}")),
        }
        let q = line.trim();
        if !q.is_empty() {
            return Ok(Some(q.to_string()));
        }
    }
}

pub fn run(
    settings: &Settings,
    base: &Query,
    o: &ChatOptions,
    ui: &Ui,
    rt: &tokio::runtime::Runtime,
) -> Result<Exit> {
    let mode = base.mode.unwrap_or(Mode::Hybrid);
    let mut retriever = Retriever::open(settings, mode, rt)?;
    // One model for the whole chat (its KV cache is the point): `auto` routing is per
    // question, so chat uses the small model unless the large one is asked for.
    let model = if settings.llm.route == "large" {
        &settings.llm.large_model
    } else {
        &settings.llm.model
    };
    let llm = Llm::load(model, false)?;
    let (params, reserve) = window(settings, &llm)?;
    let n_ctx = params.n_ctx as usize;
    let mut session = llm.session(&params)?;
    let sampling = settings.sampling();

    let interactive = std::io::stdin().is_terminal();
    let mut lines = std::io::stdin().lock();
    // Ctrl-C while an answer streams stops that answer only.
    let stop = Arc::new(AtomicBool::new(false));
    if interactive {
        signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())
            .map_err(|e| anyhow!("installing the Ctrl-C handler: {e}"))?;
        ui.info("rag chat: ask about your documents. Ctrl-C stops an answer, Ctrl-D leaves.");
    }

    let mut history: Vec<Turn> = Vec::new();
    // Every question asked so far: a follow-up retrieves with the one before it.
    let mut asked: Vec<String> = Vec::new();
    while let Some(question) = next_question(&mut lines, ui, interactive)? {
        let q = Query {
            text: crate::ask::followup_query(&asked, &question),
            ..base.clone()
        };
        asked.push(question.clone());
        let (ranked, retrieval_ms) = retriever.run(&q, mode, ui, rt)?;
        if should_abstain(&ranked, mode, settings.retrieval.min_similarity) {
            ui.outln(ABSTAIN_TEXT)?;
            ui.outln("")?;
            continue;
        }
        // Drop the oldest turns while the history takes more than half the prompt budget,
        // leaving room for this turn's sources.
        let budget = n_ctx - reserve;
        let mut overhead = llm
            .chat_tokens(&prompt::conversation(&history, &[], &question))?
            .len();
        while !history.is_empty() && overhead > budget / 2 {
            history.remove(0);
            overhead = llm
                .chat_tokens(&prompt::conversation(&history, &[], &question))?
                .len();
        }
        let hits: Vec<_> = ranked.iter().map(|r| (r.hit.clone(), r.score)).collect();
        let packed = prompt::pack_turn(&history, &question, &hits, budget, overhead, &|t| {
            llm.count_tokens(t)
        });
        let tokens = llm.chat_tokens(&packed.messages)?;
        let prefill = session.prefill(&tokens)?;

        stop.store(false, Ordering::SeqCst);
        let mut answer = String::new();
        let mut write_err = None;
        let texts = packed.texts();
        let mut stream = AnswerStream::new(&texts, settings.llm.add_citations);
        let decode = session.generate(&sampling, |piece| {
            let Some(piece) = stream.push(piece) else {
                return false;
            };
            answer.push_str(&piece);
            if let Err(e) = ui.out(&piece) {
                write_err = Some(e);
                return false;
            }
            !stop.load(Ordering::SeqCst)
        })?;
        if let Some(e) = write_err {
            return Err(e.into());
        }
        let cut = decode.stop == StopReason::Repetition;
        if cut {
            // The stream showed the copy; the history keeps the answer without it.
            answer = drop_repeat(&answer);
        }
        let cancelled = decode.stop == StopReason::Cancelled && !stream.looped();
        if !cancelled {
            let rest = stream.finish(&answer, cut);
            ui.out(&rest)?;
            answer.push_str(&rest);
        }
        if cancelled {
            ui.outln(" [stopped]")?;
        } else {
            ui.outln("")?;
        }
        ui.outln("Sources:")?;
        for s in &packed.sources {
            ui.outln(&format!(
                "  [S{}] {}:{}-{}",
                s.n, s.hit.path, s.hit.line_start, s.hit.line_end
            ))?;
        }
        ui.outln("")?;
        if o.verbose {
            let prefilled = prefill.prompt_tokens - prefill.cached_tokens;
            let t = Timings {
                retrieval_ms,
                prompt_tokens: prefill.prompt_tokens,
                cached_tokens: prefill.cached_tokens,
                prefill_ms: prefill.ms,
                prefill_tok_per_s: prefilled as f64 * 1e3 / prefill.ms.max(1e-9),
                generated_tokens: decode.tokens,
                decode_ms: decode.ms,
                decode_tok_per_s: decode.tokens as f64 * 1e3 / decode.ms.max(1e-9),
                ttft_ms: retrieval_ms + prefill.ms + decode.first_piece_ms.unwrap_or(decode.ms),
                total_ms: retrieval_ms + prefill.ms + decode.ms,
            };
            ui.stderr(&format!("turn {}: {}", history.len() + 1, stats_line(&t)));
        }
        let user = packed
            .messages
            .last()
            .map(|m| m.parts.clone())
            .unwrap_or_default();
        history.push(Turn {
            user,
            answer: answer.trim().to_string(),
        });
    }
    Ok(Exit::Success)
}

//! `rag chat`: reads questions and prints each turn of an [`engine::Chat`](crate::engine::Chat)
//! (one llama.cpp context for the whole chat: a turn prefills only what is new; when the
//! window fills, the oldest turns go). On a terminal, Ctrl-C stops the answer being written and keeps the chat, Ctrl-D leaves;
//! piped stdin is read one question per line. (Line editing with rustyline was left out: its
//! `nix` features would rebuild LanceDB's whole dependency tree.)

use std::io::{BufRead, IsTerminal};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, Result};

use crate::cli::ChatArgs;
use crate::config::Settings;
use crate::engine::{Answer, Answerer, Chat, Event, ABSTAIN_TEXT};
use crate::exit::Exit;
use crate::llm::StopReason;
use crate::printer::{self, evidence_and_sources, stats_line, PrefillSpinner};
use crate::ui::Ui;

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

pub fn run(settings: &Settings, a: &ChatArgs, verbose: bool, ui: &Ui) -> Result<Exit> {
    let base = super::query(settings, "", &a.retrieval, verbose);
    let engine = Answerer::open(settings, base.mode, false)?;
    let mut chat = Chat::open(&engine)?;
    let interactive = std::io::stdin().is_terminal();
    let mut lines = std::io::stdin().lock();
    // Ctrl-C while an answer streams stops that answer only.
    let stop = Arc::new(AtomicBool::new(false));
    if interactive {
        signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())
            .map_err(|e| anyhow!("installing the Ctrl-C handler: {e}"))?;
        ui.info("rag chat: ask about your documents. Ctrl-C stops an answer, Ctrl-D leaves.");
    }
    while let Some(question) = next_question(&mut lines, ui, interactive)? {
        stop.store(false, Ordering::SeqCst);
        let mut spinner = PrefillSpinner::default();
        let mut on = |e: Event| -> std::io::Result<()> {
            spinner.event(&e, ui);
            if let Event::Piece(piece) = e {
                ui.out(piece)?;
            } else {
                printer::aside(&e, ui);
            }
            if stop.load(Ordering::SeqCst) {
                return Err(std::io::ErrorKind::Interrupted.into());
            }
            Ok(())
        };
        let answer = chat.turn(&base, &question, &mut on)?;
        print_turn(&answer, ui)?;
        if verbose && !answer.abstained {
            ui.stderr(&format!(
                "turn {}: {}",
                chat.turns(),
                stats_line(&answer.timings)
            ));
        }
    }
    Ok(Exit::Success)
}

/// What follows the streamed text of a turn: its end, the evidence and the sources.
fn print_turn(answer: &Answer, ui: &Ui) -> Result<()> {
    if answer.abstained {
        ui.outln(ABSTAIN_TEXT)?;
        ui.outln("")?;
        return Ok(());
    }
    if answer.stop == Some(StopReason::Cancelled) {
        ui.outln(" [stopped]")?;
    } else {
        ui.outln("")?;
    }
    ui.outln(&evidence_and_sources(answer))?;
    Ok(())
}

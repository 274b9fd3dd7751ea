//! `rag search`: retrieval only, the ranked spans printed without generating.

use anyhow::Result;

use crate::cli::SearchArgs;
use crate::config::{Mode, Settings};
use crate::exit::Exit;
use crate::printer;
use crate::retrieve::Retriever;
use crate::ui::Ui;

pub fn run(settings: &Settings, a: &SearchArgs, verbose: bool, ui: &Ui) -> Result<Exit> {
    let q = super::query(settings, &a.query, &a.retrieval, verbose);
    let mode = q.mode.unwrap_or(Mode::Hybrid);
    let (ranked, ms) = Retriever::open(settings, mode)?.run(&q, mode)?;
    if q.verbose {
        printer::ranking(&ranked, mode, q.filter.as_deref()).emit(ui)?;
    }
    let hits = printer::SearchHit::all(&ranked);
    printer::hits(&q.text, &hits, ms, a.json).emit(ui)?;
    Ok(Exit::Success)
}

//! `rag search`: retrieval only, the ranked spans printed without generating.

use anyhow::Result;

use crate::cli::SearchArgs;
use crate::config::Settings;
use crate::engine::Answerer;
use crate::exit::Exit;
use crate::printer;
use crate::ui::Ui;

pub fn run(settings: &Settings, a: &SearchArgs, verbose: bool, ui: &Ui) -> Result<Exit> {
    let q = super::query(settings, &a.query, &a.retrieval, verbose);
    // The engine: `--expand` and `--rerank` ask its generators; without them it loads none.
    let (ranked, ms) = Answerer::open(settings, q.mode, true)?.retrieve(&q)?;
    if q.verbose {
        printer::ranking(&ranked, q.mode, q.filter.as_deref()).emit(ui)?;
    }
    let hits = printer::SearchHit::all(&ranked);
    printer::hits(&q.text, &hits, ms, a.json).emit(ui)?;
    Ok(Exit::Success)
}

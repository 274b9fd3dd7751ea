//! `rag bench` (hidden, for `make bench`): rag measured next to the raw engines on the same
//! machine: `llm` (prefill and decode on synthetic tokens, shaped like llama-bench), `store`
//! (an index filled with synthetic chunks) and `ann` (the ANN index against the exact scan).

mod ann;
mod llm;
mod store;

use anyhow::Result;

use crate::cli::{BenchArgs, BenchWhat};
use crate::config::Settings;
use crate::exit::Exit;
use crate::ui::Ui;

pub fn run(settings: &Settings, a: &BenchArgs, ui: &Ui) -> Result<Exit> {
    match &a.what {
        BenchWhat::Llm(b) => llm::llm(settings, b.n_prompt, b.n_gen, b.reps, ui),
        BenchWhat::Store(b) => store::store(settings, b.chunks, ui),
        BenchWhat::Ann(b) => ann::run(settings, b, ui),
    }
}

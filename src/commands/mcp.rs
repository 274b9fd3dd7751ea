//! `rag mcp`: the engine as a Model Context Protocol server on stdio (see [`crate::mcp`]).

use anyhow::Result;

use crate::cli::ChatArgs;
use crate::config::Settings;
use crate::exit::Exit;
use crate::ui::Ui;

pub fn run(settings: &Settings, a: &ChatArgs, verbose: bool, ui: &Ui) -> Result<Exit> {
    let (engine, q) = super::warm_engine(settings, &a.retrieval, verbose)?;
    crate::mcp::serve(&engine, &q, true, ui)
}

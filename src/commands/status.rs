//! `rag status`: what the index holds and how stale it is ([`crate::reports::status`]),
//! printed through the printer.

use anyhow::Result;

use crate::config::Settings;
use crate::exit::Exit;
use crate::ui::Ui;

/// `rag status`: what the index holds and whether it is up to date.
pub fn run(settings: &Settings, json: bool, ui: &Ui) -> Result<Exit> {
    let st = crate::reports::status::collect(settings)?;
    crate::printer::status(&st, json).emit(ui)?;
    Ok(Exit::Success)
}

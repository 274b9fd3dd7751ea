//! `rag init`: writes a project's settings file ([`crate::config::init`]) and prints what it
//! did through the printer.

use std::path::Path;

use anyhow::Result;

use crate::cli::InitArgs;
use crate::exit::Exit;
use crate::ui::Ui;

/// `rag init [DIR] [--force]`: runs where the settings are broken too, so it reads the
/// current ones only to carry over the models they find.
pub fn run(config: Option<&Path>, a: &InitArgs, ui: &Ui) -> Result<Exit> {
    let current = crate::config::resolve(config, &crate::config::Flags::default()).ok();
    let dir = a.dir.clone().unwrap_or_else(|| ".".into());
    let done = crate::config::init::init(&dir, a.force, current.as_ref())?;
    crate::printer::init(&done, a.json).emit(ui)?;
    Ok(Exit::Success)
}

//! `rag doctor`: runs every check of [`crate::checks`] and prints them through the printer;
//! any failure exits 1.

use anyhow::Result;

use crate::checks::{self, Status};
use crate::config::Settings;
use crate::exit::Exit;
use crate::ui::Ui;

/// Runs every check; prints a table (or `--json`); exit 1 when one failed.
pub fn run(s: &Settings, json: bool, ui: &Ui) -> Result<Exit> {
    let checks = checks::all(s);
    let failed = checks.iter().any(|c| c.status == Status::Fail);
    crate::printer::doctor(&checks, json).emit(ui)?;
    Ok(if failed { Exit::Failure } else { Exit::Success })
}

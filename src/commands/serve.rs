//! `rag serve`: the engine loaded once behind an HTTP API (see [`crate::serve`]).

use anyhow::Result;

use crate::cli::ServeArgs;
use crate::config::Settings;
use crate::exit::Exit;
use crate::ui::Ui;

pub fn run(settings: &Settings, a: &ServeArgs, verbose: bool, ui: &Ui) -> Result<Exit> {
    // Checked before the engine loads: a bad token is refused at once.
    let token = crate::serve::token(a.token.clone(), a.token_file.as_deref())?;
    let (engine, q) = super::warm_engine(settings, &a.retrieval, verbose)?;
    crate::serve::run(&engine, &q, token.as_deref(), ui)
}

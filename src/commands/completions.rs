//! Shell integration generated from the clap definitions, so it can never drift from the
//! real flags: completion scripts (clap_complete) and man pages (clap_mangen).

use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;

use crate::cli::Cli;
use crate::exit::Exit;
use crate::ui::Ui;

/// `rag completions SHELL`: the script on stdout.
pub fn completions(shell: clap_complete::Shell, ui: &Ui) -> Result<Exit> {
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "rag", &mut buf);
    ui.out(&String::from_utf8_lossy(&buf))?;
    Ok(Exit::Success)
}

/// Writes `rag.1` and `rag-COMMAND.1` for each visible command into `dir`.
pub fn man_pages(dir: &Path, ui: &Ui) -> Result<Exit> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let cmd = Cli::command();
    let mut pages = vec![("rag".to_string(), cmd.clone())];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("rag-{}", sub.get_name());
        // clap names a command with a &'static str; a few bytes leaked by a one-shot
        // command are the price of a page titled `rag-ingest` rather than `ingest`.
        let leaked: &'static str = Box::leak(name.clone().into_boxed_str());
        let page = sub
            .clone()
            .name(leaked)
            .bin_name(format!("rag {}", sub.get_name()));
        pages.push((name, page));
    }
    for (name, page) in pages {
        let mut buf = Vec::new();
        clap_mangen::Man::new(page)
            .title(name.clone())
            .render(&mut buf)?;
        let path = dir.join(format!("{name}.1"));
        std::fs::write(&path, buf).with_context(|| format!("writing {}", path.display()))?;
        ui.info(&format!("wrote {}", path.display()));
    }
    Ok(Exit::Success)
}

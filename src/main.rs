//! The `rag` binary: parse argv, run, map the outcome to a stable exit code.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(rag::ingest::isolate::WORKER_ARG) {
        return rag::ingest::isolate::serve(&args[2..]);
    }
    // Colour is decided before clap parses, so its help and errors follow --color too.
    let color = rag::ui::ColorWhen::from_args(&args);
    let on = color.apply();
    let mut cmd = rag::cli::Cli::command().color(match color {
        rag::ui::ColorWhen::Auto if on => clap::ColorChoice::Auto,
        rag::ui::ColorWhen::Always => clap::ColorChoice::Always,
        _ => clap::ColorChoice::Never,
    });
    if args
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "--version" || a == "-V")
    {
        // clap wants a &'static str; a one-shot command that is about to exit can leak it.
        let text: &'static str = Box::leak(rag::version_text().into_boxed_str());
        cmd = cmd.version(text);
    }
    let parsed = cmd
        .try_get_matches_from(&args)
        .and_then(|m| rag::cli::Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version print to stdout and succeed; usage errors exit 2.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                rag::Exit::Usage as u8
            } else {
                0
            });
        }
    };
    match rag::run(cli) {
        Ok(exit) => ExitCode::from(exit as u8),
        Err(err) if rag::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            rag::ui::error(&err);
            ExitCode::from(rag::exit_code_of(&err) as u8)
        }
    }
}

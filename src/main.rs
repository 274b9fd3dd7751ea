//! The `rag` binary: parse argv, run, map the outcome to a stable exit code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(rag::ingest::isolate::WORKER_ARG) {
        return rag::ingest::isolate::serve(&args[2..]);
    }
    let cli = match rag::cli::Cli::try_parse() {
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

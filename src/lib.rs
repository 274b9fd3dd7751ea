//! rag: fast, offline retrieval-augmented generation on a plain CPU.
//!
//! # Layout: front ends, one engine, stages, engines underneath
//!
//! - Front ends: [`cli`] parses; `commands/` holds one thin file per command (build a
//!   request from the settings, call the engine, hand the result to the printer, return an
//!   [`Exit`]); `serve/` (HTTP) and `mcp` (Model Context Protocol) adapt the engine to a
//!   protocol; `eval/` is the quality harness.
//! - The engine: [`engine::Answerer`] loads the index, the embedder and the generators once
//!   and answers many questions; [`ingest`] is its counterpart for writing the index.
//! - Stages: `retrieve/` (vector + BM25, fused; the [`retrieve::Retriever`]), `ask/`
//!   (prompt packing, citation check, streaming guard, compression, routing), and inside
//!   [`ingest`] walk, parse, chunk and plan.
//! - Engines: [`embed`] (fastembed/ort), [`llm`] (llama-cpp-2), [`store`] (lancedb/arrow),
//!   `remote` (OpenAI-compatible servers), `promptcache`: each the only user of its
//!   third-party API.
//! - Leaves: `config` (settings and their value types), [`exit`], `atomic`, `hashcache`.
//! - Output: `printer` (text, JSON, NDJSON over the same answers and events) and [`ui`];
//!   `answer` holds the types an answer and its events are made of, so output needs no engine.
//!
//! `rag ingest`: walk → parse → chunk → embed → store, one commit per batch. `rag ask`:
//! embed the question → retrieve → route → pack → prefill (with the prompt cache) → decode
//! → check citations → printer. docs/architecture.md follows one question module by module.

pub(crate) mod answer;
pub(crate) mod api;
pub(crate) mod ask;
pub(crate) mod atomic;
pub(crate) mod catalog;
pub(crate) mod checks;
pub mod cli;
pub(crate) mod commands;
pub(crate) mod config;
pub(crate) mod embed;
pub(crate) mod engine;
pub(crate) mod eval;
pub mod exit;
pub(crate) mod fetch;
pub(crate) mod gguf;
pub(crate) mod hashcache;
pub mod ingest;
pub mod llm;
pub(crate) mod mcp;
pub(crate) mod owned;
pub(crate) mod printer;
pub(crate) mod promptcache;
pub(crate) mod remote;
pub(crate) mod reports;
pub(crate) mod retrieve;
pub(crate) mod serve;
pub mod store;
pub mod ui;

use anyhow::Result;

pub use exit::{exit_code_of, is_broken_pipe, is_disk_full, Exit, ExitError};

use cli::{Cli, Command};

/// `rag --version`: this build and the llama.cpp it was built with. It reads no config and
/// loads no library: a `rag.toml` names the ONNX Runtime library, and asking a version must
/// not run code a config points at (`rag doctor` loads it and reports its version).
pub fn version_text() -> String {
    format!(
        "{}\nllama.cpp: {}\nONNX Runtime: loaded at run time from embed.ort_lib (`rag doctor` reports its version)",
        env!("CARGO_PKG_VERSION"),
        llm::LLAMA_CPP_BUILD
    )
}

/// The settings the command's flags set: the top layer over defaults, file and environment.
fn flags(cli: &Cli) -> config::Flags {
    let mut f = config::Flags::default();
    f.index.dir = cli.global.index.clone();
    match &cli.command {
        Command::Ingest(a) => f.embed.batch_size = a.batch_size,
        Command::Search(a) => a.retrieval.apply(&mut f.retrieval),
        Command::Eval(cli::EvalArgs {
            retrieval: r,
            gen: g,
            ..
        })
        | Command::Ask(cli::AskArgs {
            retrieval: r,
            gen: g,
            ..
        })
        | Command::Chat(cli::ChatArgs {
            retrieval: r,
            gen: g,
        })
        | Command::Mcp(cli::ChatArgs {
            retrieval: r,
            gen: g,
        }) => {
            r.apply(&mut f.retrieval);
            g.apply(&mut f.llm);
        }
        Command::Serve(a) => {
            a.retrieval.apply(&mut f.retrieval);
            a.gen.apply(&mut f.llm);
            f.serve.addr = a.addr.clone();
        }
        Command::Bench(b) => {
            if let cli::BenchWhat::Llm(a) = &b.what {
                a.gen.apply(&mut f.llm);
            }
        }
        Command::Doctor(_)
        | Command::Init(_)
        | Command::Config(_)
        | Command::Status(_)
        | Command::Completions(_)
        | Command::Models(_)
        | Command::Man(_) => {}
    }
    f
}

/// The commands that need no settings, or (init) must work where the settings are broken.
fn without_settings(cli: &Cli, ui: &ui::Ui) -> Option<Result<Exit>> {
    Some(match &cli.command {
        Command::Completions(a) => commands::completions::completions(a.shell, ui),
        Command::Models(a) => commands::models::run(cli.global.config.as_deref(), a, ui),
        Command::Man(a) => commands::completions::man_pages(&a.dir, ui),
        Command::Init(a) => commands::init::run(cli.global.config.as_deref(), a, ui),
        _ => return None,
    })
}

/// Resolves settings and runs one command.
pub fn run(cli: Cli) -> Result<Exit> {
    let ui = ui::Ui {
        quiet: cli.global.quiet,
    };
    if let Some(exit) = without_settings(&cli, &ui) {
        return exit;
    }
    let settings = config::resolve(cli.global.config.as_deref(), &flags(&cli))?;
    ui::init_logs(cli.global.verbose, config::log_filter().as_deref())?;
    let verbose = cli.global.verbose > 0;
    if cli.global.show_settings {
        ui.out(&settings.to_toml())?;
        return Ok(Exit::Success);
    }
    if let Command::Config(a) = &cli.command {
        return commands::config::run(&ui, &settings, a.json);
    }
    if writes_user_data(&cli.command) {
        // These write the index and the prompt cache, copies of the user's documents: every
        // file they create is 0600 and every folder 0700, whatever LanceDB asks for.
        // SAFETY: umask only changes this process's file-creation mask.
        unsafe {
            libc::umask(0o077);
        }
    }
    dispatch(&cli.command, &settings, verbose, &ui)
}

/// Whether the command writes the index or the prompt cache.
fn writes_user_data(command: &Command) -> bool {
    matches!(
        command,
        Command::Ingest(_)
            | Command::Ask(_)
            | Command::Chat(_)
            | Command::Mcp(_)
            | Command::Serve(_)
    )
}

/// Runs a command that needs settings.
fn dispatch(
    command: &Command,
    settings: &config::Settings,
    verbose: bool,
    ui: &ui::Ui,
) -> Result<Exit> {
    use commands as c;
    match command {
        Command::Ingest(a) => c::ingest::run(settings, a, ui),
        Command::Search(a) => c::search::run(settings, a, verbose, ui),
        Command::Ask(a) => c::ask::run(settings, a, verbose, ui),
        Command::Chat(a) => c::chat::run(settings, a, verbose, ui),
        Command::Eval(a) => c::eval::run(settings, a, verbose, ui),
        Command::Serve(a) => c::serve::run(settings, a, verbose, ui),
        Command::Mcp(a) => c::mcp::run(settings, a, verbose, ui),
        Command::Doctor(a) => c::doctor::run(settings, a.json, ui),
        Command::Status(a) => c::status::run(settings, a.json, ui),
        Command::Bench(a) => c::bench::run(settings, a, ui),
        Command::Init(_)
        | Command::Config(_)
        | Command::Completions(_)
        | Command::Models(_)
        | Command::Man(_) => {
            unreachable!("handled before the settings are resolved")
        }
    }
}

#[cfg(test)]
mod layout {
    /// docs/architecture.md is where a newcomer looks a module up: it names every folder and
    /// top-level file of src/, so a new one cannot land unexplained.
    #[test]
    fn the_architecture_page_names_every_folder_and_file_of_src() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let page = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
        let mut missing = Vec::new();
        for entry in std::fs::read_dir(root.join("src")).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let named = if entry.file_type().unwrap().is_dir() {
                format!("{name}/")
            } else {
                name
            };
            if !page.contains(&named) {
                missing.push(named);
            }
        }
        assert!(
            missing.is_empty(),
            "docs/architecture.md does not name {missing:?}"
        );
    }

    /// Every source file under src/, with its text.
    fn sources() -> Vec<(std::path::PathBuf, String)> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut out = Vec::new();
        let mut dirs = vec![root];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    out.push((path, text));
                }
            }
        }
        out
    }

    /// The form a newcomer can read: each module opens with a `//!` line saying what it
    /// owns, no file outside the tests is over 600 lines, and no function outside the tests
    /// over 60 (counted from its `fn` line to the `}` at the same indent, as rustfmt lays
    /// it out).
    #[test]
    fn modules_say_what_they_own_and_stay_small() {
        let mut problems = Vec::new();
        for (path, text) in sources() {
            let name = path.display().to_string();
            if !text.starts_with("//!") {
                problems.push(format!("{name}: no //! line first"));
            }
            let is_tests = path
                .file_name()
                .is_some_and(|n| n == "tests.rs" || n == "fuzz.rs");
            if is_tests {
                continue;
            }
            let lines: Vec<&str> = text.lines().collect();
            let end = lines
                .windows(2)
                .position(|w| w[0] == "#[cfg(test)]" && w[1].starts_with("mod "))
                .unwrap_or(lines.len());
            if end > 600 {
                problems.push(format!("{name}: {end} lines"));
            }
            problems.extend(
                long_functions(&lines[..end])
                    .into_iter()
                    .map(|f| format!("{name}: {f}")),
            );
        }
        assert!(problems.is_empty(), "{problems:#?}");
    }

    /// `fn NAME (N lines)` for each function of `lines` over 60 lines.
    fn long_functions(lines: &[&str]) -> Vec<String> {
        let mut out = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let code = line.trim_start();
            let indent = &line[..line.len() - code.len()];
            let Some(at) = code.find("fn ") else { continue };
            let head = &code[..at];
            let is_fn = head.split_whitespace().all(|w| {
                w == "pub" || w.starts_with("pub(") || ["const", "async", "unsafe"].contains(&w)
            });
            if !is_fn || code.ends_with(';') || code.ends_with('}') {
                continue;
            }
            let close = format!("{indent}}}");
            let len = lines[i..]
                .iter()
                .position(|l| *l == close)
                .map_or(0, |n| n + 1);
            if len > 60 {
                let name: String = code[at + 3..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                out.push(format!("fn {name} ({len} lines)"));
            }
        }
        out
    }

    #[test]
    fn a_long_function_is_seen() {
        let mut lines = vec!["    pub(crate) fn big(x: u8) -> u8 {"];
        lines.extend(std::iter::repeat_n("        x;", 60));
        lines.push("    }");
        assert_eq!(long_functions(&lines), ["fn big (62 lines)"]);
        lines.truncate(59);
        lines.push("    }");
        assert!(long_functions(&lines).is_empty());
    }
}

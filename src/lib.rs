//! rag: fast, offline retrieval-augmented generation on a plain CPU.
//!
//! # Layout
//!
//! Data flows one way. `rag ingest`: [`ingest::walk`] finds files → [`ingest::parse`] turns
//! bytes into text → [`ingest::chunk`] splits it by structure, sized in the embedder's tokens
//! → [`embed`] makes vectors → [`store`] writes LanceDB rows. `rag ask`: [`embed`] the
//! question → [`retrieve`] (vector + BM25, fused) → [`ask::prompt`] packs sources into the
//! context window → [`llm`] runs llama.cpp → [`ui`] prints the answer and its sources.
//! [`engine::Answerer`] holds the loaded index, embedder and generators and answers many
//! questions; `ask` and [`eval`] (quality on a YAML question set) both run on it.
//!
//! Each third-party API that moves fast stays in one module: llama-cpp-2 in [`llm`],
//! fastembed and ort in [`embed`], lancedb and arrow in [`store`]. [`config`] alone reads
//! `rag.toml` and the environment; [`ui`] alone prints; `main.rs` only maps errors to exit
//! codes ([`Exit`]).

pub(crate) mod api;
pub(crate) mod ask;
pub(crate) mod atomic;
pub(crate) mod bench;
pub(crate) mod bench_ann;
pub(crate) mod chat;
pub mod cli;
pub(crate) mod config;
pub(crate) mod doctor;
pub(crate) mod embed;
pub(crate) mod engine;
pub(crate) mod eval;
pub mod exit;
pub(crate) mod hashcache;
pub mod ingest;
pub mod llm;
pub(crate) mod mcp;
pub(crate) mod printer;
pub(crate) mod project;
pub(crate) mod promptcache;
pub(crate) mod remote;
pub(crate) mod retrieve;
pub(crate) mod serve;
pub(crate) mod shell;
pub(crate) mod status;
pub mod store;
pub mod ui;

#[cfg(test)]
mod fuzz;

use anyhow::Result;

pub use exit::{exit_code_of, is_broken_pipe, is_disk_full, Exit, ExitError};

use cli::{Cli, Command};
use retrieve::Mode;

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
        Command::BenchLlm(a) => a.gen.apply(&mut f.llm),
        Command::BenchStore(_)
        | Command::BenchAnn(_)
        | Command::Doctor(_)
        | Command::Init(_)
        | Command::Config(_)
        | Command::Status(_)
        | Command::Completions(_)
        | Command::Man(_) => {}
    }
    f
}

/// The commands that need no settings, or (init) must work where the settings are broken.
fn without_settings(cli: &Cli, ui: &ui::Ui) -> Option<Result<Exit>> {
    Some(match &cli.command {
        Command::Completions(a) => shell::completions(a.shell, ui),
        Command::Man(a) => shell::man_pages(&a.dir, ui),
        Command::Init(a) => {
            let current =
                config::resolve(cli.global.config.as_deref(), &config::Flags::default()).ok();
            let dir = a.dir.clone().unwrap_or_else(|| ".".into());
            project::init(&dir, a.force, current.as_ref())
                .and_then(|done| project::print_init(ui, &done, a.json))
                .map(|()| Exit::Success)
        }
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
        project::print_config(&ui, &settings, a.json)?;
        return Ok(Exit::Success);
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
    let ui = *ui;
    match command {
        Command::Ingest(a) => ingest_command(settings, a, &ui),
        Command::Search(a) => ask::search(
            settings,
            &query(settings, &a.query, &a.retrieval, verbose),
            a.json,
            &ui,
        ),
        Command::Ask(a) => ask_command(settings, a, verbose, &ui),
        Command::Eval(a) => eval::run(settings, &eval_options(settings, a, verbose), &ui),
        Command::Doctor(a) => doctor::run(settings, a.json, &ui),
        Command::Status(a) => {
            status::print(&ui, &status::collect(settings)?, a.json)?;
            Ok(Exit::Success)
        }
        Command::Init(_) | Command::Config(_) | Command::Completions(_) | Command::Man(_) => {
            unreachable!("handled before the settings are resolved")
        }
        Command::BenchLlm(a) => bench::llm(settings, a.n_prompt, a.n_gen, a.reps, &ui),
        Command::BenchStore(a) => bench::store(settings, a.chunks, &ui),
        Command::BenchAnn(a) => crate::bench_ann::run(settings, a, &ui),
        Command::Mcp(a) => {
            let (engine, q) = warm_engine(settings, &a.retrieval, verbose)?;
            mcp::serve(&engine, &q, true, &ui)
        }
        Command::Serve(a) => {
            // Checked before the engine loads: a bad token is refused at once.
            let token = serve::token(a.token.clone(), a.token_file.as_deref())?;
            let (engine, q) = warm_engine(settings, &a.retrieval, verbose)?;
            serve::run(&engine, &q, token.as_deref(), &ui)
        }
        Command::Chat(a) => {
            let o = chat::ChatOptions { verbose };
            chat::run(
                settings,
                &query(settings, "", &a.retrieval, verbose),
                &o,
                &ui,
            )
        }
    }
}

/// The engine a long-running front end (`mcp`, `serve`) keeps, and the query defaults its
/// requests start from.
fn warm_engine(
    settings: &config::Settings,
    r: &cli::RetrievalArgs,
    verbose: bool,
) -> Result<(engine::Answerer, ask::Query)> {
    let q = query(settings, "", r, verbose);
    let mode = q.mode.unwrap_or(settings.retrieval.mode);
    Ok((engine::Answerer::open(settings, mode, false)?, q))
}

fn ingest_command(settings: &config::Settings, a: &cli::IngestArgs, ui: &ui::Ui) -> Result<Exit> {
    let (paths, gone) = match &a.files_from {
        Some(list) => ingest::files_from(list, &a.paths)?,
        None => (a.paths.clone(), vec![]),
    };
    let opts = ingest::IngestOptions {
        rebuild: a.rebuild,
        dry_run: a.dry_run || a.check,
        prune: !a.no_prune,
        retry_failed: a.retry_failed,
        prune_all: a.prune_all,
        change_root: a.change_root,
        gone,
    };
    if a.watch {
        let mut print = |r: &ingest::Report| printer::ingest(r, a.json).emit(ui);
        ingest::watch::run(settings, &paths, &opts, ui, &mut print)?;
        return Ok(Exit::Success);
    }
    let report = ingest::run(settings, &paths, &opts, ui)?;
    printer::ingest(&report, a.json).emit(ui)?;
    let stale = report
        .dry_run
        .as_ref()
        .is_some_and(|p| !(p.added.is_empty() && p.changed.is_empty() && p.removed.is_empty()));
    Ok(if a.check && stale {
        Exit::Failure
    } else if report.files_failed.is_empty() {
        Exit::Success
    } else {
        Exit::PartialIngest
    })
}

fn ask_command(
    settings: &config::Settings,
    a: &cli::AskArgs,
    verbose: bool,
    ui: &ui::Ui,
) -> Result<Exit> {
    if let Some(file) = &a.batch {
        let q = query(settings, "", &a.retrieval, verbose);
        return ask::ask_batch(settings, file, &q, ui);
    }
    let o = ask::AskOptions {
        stream: !a.no_stream,
        dry_run: a.dry_run,
        json: a.json,
        ndjson: a.ndjson,
        stats: a.stats,
        cache: !a.no_cache,
    };
    let q = query(
        settings,
        a.question.as_deref().unwrap_or(""),
        &a.retrieval,
        verbose,
    );
    ask::ask(settings, &q, &o, ui)
}

fn eval_options(
    settings: &config::Settings,
    a: &cli::EvalArgs,
    verbose: bool,
) -> eval::EvalOptions {
    let configured = settings.retrieval.mode;
    let modes = if a.modes.is_empty() {
        let mut all = vec![configured];
        all.extend(
            [Mode::Hybrid, Mode::Vector, Mode::Text]
                .into_iter()
                .filter(|m| *m != configured),
        );
        all
    } else {
        let mut seen = Vec::new();
        for m in &a.modes {
            if !seen.contains(m) {
                seen.push(*m);
            }
        }
        seen
    };
    eval::EvalOptions {
        file: a.file.clone(),
        modes,
        answers: a.answers,
        json: a.json,
        junit: a.junit.clone(),
        save_json: a.save_json.clone(),
        baseline: a.baseline.clone(),
        max_regression: a.max_regression,
        min: a.min.clone(),
        report: a.report.clone(),
        report_with: a.report_with.clone(),
        verbose,
        query: query(settings, "", &a.retrieval, verbose),
    }
}

fn query(
    settings: &config::Settings,
    text: &str,
    r: &cli::RetrievalArgs,
    verbose: bool,
) -> ask::Query {
    ask::Query {
        text: text.to_string(),
        mode: Some(settings.retrieval.mode),
        top_k: settings.retrieval.top_k,
        filter: retrieve::filter(r.path_glob.as_deref(), r.where_sql.as_deref()),
        verbose,
    }
}

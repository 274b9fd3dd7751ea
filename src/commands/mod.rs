//! One file per command. Each is thin: it turns its flags and the resolved settings into a
//! request, calls the engine (or a harness: `eval`, `serve`, `mcp`), hands what comes back to
//! the printer and returns an [`Exit`](crate::Exit). Nothing below this module prints or
//! knows exit codes of commands.

pub mod ask;
pub mod batch;
pub mod bench;
pub mod chat;
pub mod completions;
pub mod config;
pub mod doctor;
pub mod eval;
pub mod ingest;
pub mod init;
pub mod mcp;
pub mod models;
pub mod search;
pub mod serve;
pub mod status;

use anyhow::Result;

use crate::cli::RetrievalArgs;
use crate::config::Settings;
use crate::engine::Answerer;
use crate::retrieve::{self, Query};

/// The retrieval query a command starts from: `text`, the configured mode and depth, and
/// the `--path`/`--where` filter.
pub fn query(settings: &Settings, text: &str, r: &RetrievalArgs, verbose: bool) -> Query {
    Query {
        text: text.to_string(),
        mode: settings.retrieval.mode,
        top_k: settings.retrieval.top_k,
        filter: retrieve::filter(r.path_glob.as_deref(), r.where_sql.as_deref()),
        verbose,
    }
}

/// The engine a long-running front end (`mcp`, `serve`) keeps, and the query defaults its
/// requests start from.
fn warm_engine(settings: &Settings, r: &RetrievalArgs, verbose: bool) -> Result<(Answerer, Query)> {
    let q = query(settings, "", r, verbose);
    Ok((Answerer::open(settings, q.mode, false)?, q))
}

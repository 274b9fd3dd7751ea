//! `rag ask`: one question answered from the index, streamed with checked citations and
//! figures; `--dry-run` prints the packed prompt without loading the weights; `--batch FILE`
//! hands a file of questions to [`super::batch`].

use anyhow::Result;

use crate::cli::AskArgs;
use crate::config::Settings;
use crate::engine::{Answerer, Event, Request};
use crate::exit::Exit;
use crate::printer::{self, Format, PrefillSpinner, Printer};
use crate::retrieve::Query;
use crate::ui::Ui;

/// How the answer is shown and made.
#[derive(Debug, Clone, Default)]
struct AskOptions {
    stream: bool,
    dry_run: bool,
    json: bool,
    ndjson: bool,
    stats: bool,
    /// Use the persistent prompt cache.
    cache: bool,
}

pub fn run(settings: &Settings, a: &AskArgs, verbose: bool, ui: &Ui) -> Result<Exit> {
    if let Some(file) = &a.batch {
        let q = super::query(settings, "", &a.retrieval, verbose);
        let engine = Answerer::open(settings, q.mode, false)?;
        return super::batch::run(&engine, file, &q, ui);
    }
    let o = AskOptions {
        stream: !a.no_stream,
        dry_run: a.dry_run,
        json: a.json,
        ndjson: a.ndjson,
        stats: a.stats,
        cache: !a.no_cache,
    };
    let text = a.question.as_deref().unwrap_or("");
    let q = super::query(settings, text, &a.retrieval, verbose);
    ask(settings, &q, &o, ui)
}

fn ask(settings: &Settings, q: &Query, o: &AskOptions, ui: &Ui) -> Result<Exit> {
    let engine = Answerer::open(settings, q.mode, o.dry_run)?;
    if o.dry_run {
        return dry_run(&engine, q, ui);
    }
    let printer = Printer {
        format: if o.json {
            Format::Json
        } else if o.ndjson {
            Format::Ndjson
        } else {
            Format::Text
        },
        live: o.stream && !o.json,
        stats: o.stats,
    };
    let mut spinner = PrefillSpinner::default();
    let mut on = |e: Event| -> std::io::Result<()> {
        spinner.event(&e, ui);
        printer.event(&e).emit(ui).map_err(std::io::Error::other)
    };
    let result = engine.answer(Request::new(q, o.cache), &mut on)?;
    printer
        .answer(&result, settings.retrieval.min_similarity)
        .emit(ui)?;
    Ok(if result.abstained {
        Exit::Abstained
    } else {
        Exit::Success
    })
}

/// `--dry-run`: the packed prompt, without loading the model weights.
fn dry_run(engine: &Answerer, q: &Query, ui: &Ui) -> Result<Exit> {
    let r = engine.retrieval(q, &q.text)?;
    if q.verbose {
        printer::ranking(&r.ranked, q.mode, q.filter.as_deref()).emit(ui)?;
    }
    let prep = engine.prepare(&q.text, &r)?;
    let p = Printer {
        format: Format::Text,
        live: false,
        stats: false,
    };
    for d in &prep.packed.dropped {
        p.event(&Event::Dropped(d)).emit(ui)?;
    }
    let (text, n) = engine.render(&prep)?;
    ui.out(&text)?;
    ui.info(&format!(
        "{n} prompt tokens, {} sources",
        prep.packed.sources.len()
    ));
    Ok(Exit::Success)
}

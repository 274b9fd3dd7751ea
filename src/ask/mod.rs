//! `rag ask` and `rag search`: retrieval → prompt → generation → answer with checked
//! citations and figures. Knows nothing of Arrow or clap: it gets resolved settings and
//! plain options.

pub mod cite;
pub mod prompt;
pub mod route;
pub mod stream;

use std::time::Instant;

use anyhow::Result;
use serde::Serialize;

use crate::config::{threads, Settings};
use crate::embed::Embedder;
use crate::llm::{ContextParams, Llm, StopReason, LLAMA_CPP_BUILD};
use crate::promptcache::PromptCache;
use crate::retrieve::{self, Fusion, Mode, Ranked};
use crate::store::Store;
use crate::ui::Ui;
use crate::Exit;

/// A cached state is worth loading only when it covers at least this many prompt tokens.
const MIN_CACHED_PREFIX: usize = 32;

/// What `rag ask` prints when the documents hold no answer.
pub const ABSTAIN_TEXT: &str = "The documents do not answer this question.";

#[derive(Debug, Clone, Default)]
pub struct Query {
    pub text: String,
    pub mode: Option<Mode>,
    pub top_k: usize,
    pub filter: Option<String>,
    pub verbose: bool,
}

#[derive(Debug, Clone, Default)]
pub struct AskOptions {
    pub stream: bool,
    pub dry_run: bool,
    pub json: bool,
    pub ndjson: bool,
    pub stats: bool,
    /// Use the persistent prompt cache.
    pub cache: bool,
}

#[derive(Debug, Serialize, Clone)]
pub struct SourceOut {
    pub id: String,
    pub path: String,
    pub heading: String,
    pub line_start: u32,
    pub line_end: u32,
    pub score: f32,
}

#[derive(Debug, Serialize, Default, Clone)]
pub struct Timings {
    pub retrieval_ms: f64,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub prefill_ms: f64,
    pub prefill_tok_per_s: f64,
    pub generated_tokens: usize,
    pub decode_ms: f64,
    pub decode_tok_per_s: f64,
    pub ttft_ms: f64,
    pub total_ms: f64,
}

#[derive(Debug, Serialize, Clone)]
pub struct ModelOut {
    pub path: String,
    pub sha256: String,
    /// `small` or `large`, and why (see `route`).
    #[serde(flatten)]
    pub route: route::Route,
}

#[derive(Debug, Serialize)]
pub struct Answer {
    pub question: String,
    pub answer: String,
    pub sources: Vec<SourceOut>,
    pub citations: Vec<cite::Citation>,
    pub invalid_citations: Vec<String>,
    /// Markers rag added to sentences the model left uncited (llm.add_citations).
    pub added_citations: usize,
    /// Sentences of three content words or more that cite no source.
    pub uncited_sentences: Vec<String>,
    pub abstained: bool,
    pub stop: Option<StopReason>,
    pub timings: Timings,
    pub model: Option<ModelOut>,
}

fn fusion(s: &Settings) -> Fusion {
    Fusion {
        k: s.retrieval.rrf_k,
        vector_weight: s.retrieval.vector_weight,
        text_weight: s.retrieval.text_weight,
    }
}

/// The index and the embedder, opened once and checked to belong together.
pub struct Retriever {
    store: Store,
    embedder: Option<Embedder>,
    fusion: Fusion,
}

impl Retriever {
    pub fn open(
        settings: &Settings,
        mode: Mode,
        rt: &tokio::runtime::Runtime,
    ) -> Result<Retriever> {
        let store = rt.block_on(Store::open(&settings.index.dir))?;
        let embedder = if mode == Mode::Text {
            None
        } else {
            let e = Embedder::load(&settings.embed)?;
            store.check_model(&e.info)?;
            Some(e)
        };
        Ok(Retriever {
            store,
            embedder,
            fusion: fusion(settings),
        })
    }

    /// Retrieves for `q`; returns the ranked spans and the milliseconds it took.
    pub fn run(
        &mut self,
        q: &Query,
        mode: Mode,
        ui: &Ui,
        rt: &tokio::runtime::Runtime,
    ) -> Result<(Vec<Ranked>, f64)> {
        let started = Instant::now();
        let vector = match (&mut self.embedder, mode) {
            (Some(e), Mode::Hybrid | Mode::Vector) => Some(e.embed_query(&q.text)?),
            _ => None,
        };
        let ranked = rt.block_on(retrieve::retrieve(
            &self.store,
            &q.text,
            vector.as_deref(),
            mode,
            q.top_k,
            self.fusion,
            q.filter.as_deref(),
        ))?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        if q.verbose {
            explain(ui, &ranked, mode, q.filter.as_deref());
        }
        Ok((ranked, ms))
    }
}

fn retrieve(
    settings: &Settings,
    q: &Query,
    mode: Mode,
    ui: &Ui,
    rt: &tokio::runtime::Runtime,
) -> Result<(Vec<Ranked>, f64)> {
    Retriever::open(settings, mode, rt)?.run(q, mode, ui, rt)
}

fn explain(ui: &Ui, ranked: &[Ranked], mode: Mode, filter: Option<&str>) {
    let rank = |r: Option<usize>, s: Option<f32>| match (r, s) {
        (Some(r), Some(s)) => format!("#{r} ({s:.3})"),
        _ => "-".to_string(),
    };
    ui.stderr(&format!(
        "retrieval: mode {mode:?}, filter {}",
        filter.unwrap_or("none")
    ));
    for (i, r) in ranked.iter().enumerate() {
        ui.stderr(&format!(
            "  {:>2}. {}:{}-{}  vector {}  text {}  fused {:.4}",
            i + 1,
            r.hit.path,
            r.hit.line_start,
            r.hit.line_end,
            rank(r.vector_rank, r.vector_score),
            rank(r.text_rank, r.text_score),
            r.score
        ));
    }
}

#[derive(Debug, Serialize)]
struct SearchHit<'a> {
    rank: usize,
    path: &'a str,
    chunk_id: &'a str,
    heading: &'a str,
    line_start: u32,
    line_end: u32,
    score: f32,
    vector_score: Option<f32>,
    text_score: Option<f32>,
    text: &'a str,
}

pub fn search(
    settings: &Settings,
    q: &Query,
    json: bool,
    ui: &Ui,
    rt: &tokio::runtime::Runtime,
) -> Result<Exit> {
    let mode = q.mode.unwrap_or(Mode::Hybrid);
    let (ranked, ms) = retrieve(settings, q, mode, ui, rt)?;
    let hits: Vec<SearchHit> = ranked
        .iter()
        .enumerate()
        .map(|(i, r)| SearchHit {
            rank: i + 1,
            path: &r.hit.path,
            chunk_id: &r.hit.id,
            heading: &r.hit.heading,
            line_start: r.hit.line_start,
            line_end: r.hit.line_end,
            score: r.score,
            vector_score: r.vector_score,
            text_score: r.text_score,
            text: &r.hit.text,
        })
        .collect();
    if json {
        ui.json(&serde_json::json!({ "query": q.text, "hits": hits }))?;
    } else {
        for h in &hits {
            let heading = if h.heading.is_empty() {
                String::new()
            } else {
                format!("  {}", h.heading)
            };
            ui.outln(&format!(
                "{}. {}:{}-{}{}  (score {:.4})",
                h.rank, h.path, h.line_start, h.line_end, heading, h.score
            ))?;
            ui.outln(&format!("   {}", snippet(h.text, 200)))?;
        }
        ui.info(&format!("{} hits in {:.0} ms", hits.len(), ms));
    }
    Ok(Exit::Success)
}

/// The first `max` characters of `text` on one line.
fn snippet(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        format!("{}…", flat.chars().take(max).collect::<String>())
    }
}

/// The context for `llm` (n_ctx 0 = the model's training context) and the tokens reserved
/// for the answer; an error when the answer would leave no room for a prompt.
pub fn window(settings: &Settings, llm: &Llm) -> Result<(ContextParams, usize)> {
    let n_ctx = if settings.llm.n_ctx == 0 {
        llm.n_ctx_train()
    } else {
        settings.llm.n_ctx
    };
    let reserve = settings.llm.max_tokens as usize;
    if reserve + 64 >= n_ctx as usize {
        return Err(crate::ExitError::usage(format!(
            "llm.max_tokens = {reserve} leaves no room for a prompt in llm.n_ctx = {n_ctx}; lower one or raise the other"
        )));
    }
    let params = ContextParams {
        n_ctx,
        n_batch: settings.llm.n_batch,
        threads: threads(settings.llm.threads),
        threads_batch: threads(settings.llm.threads_batch),
    };
    Ok((params, reserve))
}

/// Whether the best evidence is too weak to answer from. Vector similarity is the signal
/// (comparable across questions); in text-only mode, only "no hit at all" abstains.
pub fn should_abstain(ranked: &[Ranked], mode: Mode, min_similarity: f32) -> bool {
    if ranked.is_empty() {
        return true;
    }
    if mode == Mode::Text {
        return false;
    }
    let best = ranked
        .iter()
        .filter_map(|r| r.vector_score)
        .fold(f32::MIN, f32::max);
    best < min_similarity
}

pub fn ask(
    settings: &Settings,
    q: &Query,
    o: &AskOptions,
    ui: &Ui,
    rt: &tokio::runtime::Runtime,
) -> Result<Exit> {
    let started = Instant::now();
    let mode = q.mode.unwrap_or(Mode::Hybrid);
    let (ranked, retrieval_ms) = retrieve(settings, q, mode, ui, rt)?;
    let mut timings = Timings {
        retrieval_ms,
        ..Timings::default()
    };

    if should_abstain(&ranked, mode, settings.retrieval.min_similarity) && !o.dry_run {
        timings.total_ms = started.elapsed().as_secs_f64() * 1e3;
        let answer = Answer {
            question: q.text.clone(),
            answer: ABSTAIN_TEXT.to_string(),
            sources: vec![],
            citations: vec![],
            invalid_citations: vec![],
            added_citations: 0,
            uncited_sentences: vec![],
            abstained: true,
            stop: None,
            timings,
            model: None,
        };
        if o.json {
            ui.json(&answer)?;
        } else if o.ndjson {
            ui.json(&serde_json::json!({ "event": "done", "answer": answer }))?;
        } else {
            ui.outln(ABSTAIN_TEXT)?;
            let best = ranked
                .iter()
                .filter_map(|r| r.vector_score)
                .fold(f32::NAN, f32::max);
            ui.info(&format!(
                "abstained: best similarity {best:.2} is below retrieval.min_similarity = {}",
                settings.retrieval.min_similarity
            ));
        }
        return Ok(Exit::Abstained);
    }

    let best = ranked
        .iter()
        .filter_map(|r| r.vector_score)
        .reduce(f32::max);
    let route = route::route(
        &settings.llm.route,
        best,
        &q.text,
        settings.llm.large_model.is_file(),
    );
    let model_path = if route.model == "large" {
        &settings.llm.large_model
    } else {
        &settings.llm.model
    };
    let llm = Llm::load(model_path, o.dry_run)?;
    let (params, reserve) = window(settings, &llm)?;
    let n_ctx = params.n_ctx as usize;
    let overhead = llm.chat_tokens(&prompt::messages(&[], &q.text))?.len();
    let hits: Vec<_> = ranked.iter().map(|r| (r.hit.clone(), r.score)).collect();
    let packed = prompt::pack(&q.text, &hits, n_ctx - reserve, overhead, &|t| {
        llm.count_tokens(t)
    });
    if q.verbose || !packed.dropped.is_empty() {
        for d in &packed.dropped {
            ui.info(&format!(
                "note: {}:{}-{} did not fit the context budget",
                d.path, d.line_start, d.line_end
            ));
        }
    }
    let tokens = llm.chat_tokens(&packed.messages)?;

    if o.dry_run {
        ui.out(&llm.render(&packed.messages)?)?;
        ui.info(&format!(
            "{} prompt tokens, {} sources",
            tokens.len(),
            packed.sources.len()
        ));
        return Ok(Exit::Success);
    }

    let sources: Vec<SourceOut> = packed
        .sources
        .iter()
        .map(|s| SourceOut {
            id: format!("S{}", s.n),
            path: s.hit.path.clone(),
            heading: s.hit.heading.clone(),
            line_start: s.hit.line_start,
            line_end: s.hit.line_end,
            score: s.score,
        })
        .collect();
    if o.ndjson {
        ui.json(&serde_json::json!({ "event": "retrieval", "sources": sources, "retrieval_ms": retrieval_ms }))?;
    }

    let mut session = llm.session(&params)?;
    let memo = settings.index.dir.join("model-hashes.json");
    let model_sha = crate::hashcache::sha256(&llm.path, &memo)?;
    let cache = (o.cache && settings.llm.prompt_cache_mb > 0).then(|| {
        let n_ctx = n_ctx.to_string();
        PromptCache::new(
            &settings.index.dir,
            &[&model_sha, &n_ctx, LLAMA_CPP_BUILD],
            settings.llm.prompt_cache_mb << 20,
        )
    });
    let ids = crate::llm::ids(&tokens);
    if let Some(entry) = cache.as_ref().and_then(|c| c.best(&ids, MIN_CACHED_PREFIX)) {
        if !session.load_state(&entry.state, &entry.tokens) {
            ui.warn(&format!(
                "ignored a damaged prompt cache entry {}",
                entry.state.display()
            ));
            if let Some(c) = &cache {
                c.discard(&entry.state);
            }
        }
    }
    let spin = ui.spinner(&format!("reading {} prompt tokens", tokens.len()));
    let prefill = session.prefill(&tokens)?;
    spin.finish_and_clear();
    if let Some(c) = &cache {
        // Saved before generation, so the state holds exactly the prompt.
        if let Err(e) = c.store(&ids, |p| session.save_state(p)) {
            ui.warn(&format!("prompt cache not saved: {e:#}"));
        }
    }

    let sampling = settings.sampling();
    let mut raw = String::new();
    let mut write_err = None;
    let live = o.stream && !o.json;
    let texts = packed.texts();
    let mut answer = stream::AnswerStream::new(&texts, settings.llm.add_citations);
    let show = |piece: &str| -> std::io::Result<()> {
        if piece.is_empty() {
            Ok(())
        } else if o.ndjson {
            ui.json(&serde_json::json!({ "event": "token", "text": piece }))
                .map_err(std::io::Error::other)
        } else if live {
            ui.out(piece)
        } else {
            Ok(())
        }
    };
    let mut decode = session.generate(&sampling, |piece| {
        let Some(piece) = answer.push(piece) else {
            return false;
        };
        raw.push_str(&piece);
        match show(&piece) {
            Ok(()) => true,
            Err(e) => {
                write_err = Some(e);
                false
            }
        }
    })?;
    let cut = decode.stop == StopReason::Repetition;
    if cut {
        raw = stream::drop_repeat(&raw);
    }
    if answer.looped() {
        decode.stop = StopReason::Repetition;
    }
    let rest = answer.finish(&raw, cut);
    if write_err.is_none() {
        if let Err(e) = show(&rest) {
            write_err = Some(e);
        }
    }
    raw.push_str(&rest);
    if let Some(e) = write_err {
        return Err(e.into());
    }

    let prefilled = prefill.prompt_tokens - prefill.cached_tokens;
    timings.prompt_tokens = prefill.prompt_tokens;
    timings.cached_tokens = prefill.cached_tokens;
    timings.prefill_ms = prefill.ms;
    timings.prefill_tok_per_s = rate(prefilled, prefill.ms);
    timings.generated_tokens = decode.tokens;
    timings.decode_ms = decode.ms;
    timings.decode_tok_per_s = rate(decode.tokens, decode.ms);
    // From the start of the command: what a person waits for.
    timings.ttft_ms = retrieval_ms + prefill.ms + decode.first_piece_ms.unwrap_or(decode.ms);
    timings.total_ms = started.elapsed().as_secs_f64() * 1e3;

    let checked = cite::check(raw.trim(), &texts);
    let model = ModelOut {
        path: llm.path.display().to_string(),
        sha256: model_sha,
        route,
    };
    let result = Answer {
        question: q.text.clone(),
        answer: checked.answer.clone(),
        sources,
        citations: checked.citations.clone(),
        invalid_citations: checked.invalid.clone(),
        added_citations: answer.added_citations(),
        uncited_sentences: checked.uncited.clone(),
        abstained: false,
        stop: Some(decode.stop),
        timings,
        model: Some(model),
    };
    if !checked.invalid.is_empty() && !o.json {
        ui.warn(&format!(
            "the answer cited {} that no source has; removed from the checked answer",
            checked.invalid.join(", ")
        ));
    }
    if o.json {
        ui.json(&result)?;
    } else if o.ndjson {
        ui.json(&serde_json::json!({ "event": "done", "answer": result }))?;
    } else {
        if live {
            ui.outln("")?;
        } else {
            ui.outln(&result.answer)?;
        }
        ui.outln("\nSources:")?;
        for s in &result.sources {
            let heading = if s.heading.is_empty() {
                String::new()
            } else {
                format!(" — {}", s.heading)
            };
            let cited: Vec<&cite::Citation> =
                result.citations.iter().filter(|c| c.id == s.id).collect();
            let mark = match (cited.is_empty(), cited.iter().all(|c| c.supported)) {
                (true, _) => "",
                (false, true) => "  (cited, supported)",
                (false, false) => "  (cited, not supported by its text)",
            };
            ui.outln(&format!(
                "  [{}] {}:{}-{}{heading}{mark}",
                s.id, s.path, s.line_start, s.line_end
            ))?;
        }
    }
    if o.stats {
        ui.stderr(&stats_line(&result.timings));
    } else if !o.json && !o.ndjson {
        ui.info(&stats_line(&result.timings));
    }
    Ok(Exit::Success)
}

fn rate(tokens: usize, ms: f64) -> f64 {
    if ms > 0.0 {
        tokens as f64 * 1e3 / ms
    } else {
        0.0
    }
}

/// `prompt 812 tok (640 cached) · prefill 1.9k tok/s · first token 0.21 s · 96 tok at 48 tok/s`
pub fn stats_line(t: &Timings) -> String {
    let k = |x: f64| {
        if x >= 1000.0 {
            format!("{:.1}k", x / 1000.0)
        } else {
            format!("{x:.0}")
        }
    };
    format!(
        "prompt {} tok ({} cached) · prefill {} tok/s · first token {:.2} s · {} tok at {} tok/s",
        t.prompt_tokens,
        t.cached_tokens,
        k(t.prefill_tok_per_s),
        t.ttft_ms / 1e3,
        t.generated_tokens,
        k(t.decode_tok_per_s)
    )
}

//! `rag ask` and `rag search`: retrieval → prompt → generation → answer with checked
//! citations and figures. Knows nothing of Arrow or clap: it gets resolved settings and
//! plain options.

pub mod batch;
pub mod cite;
pub mod compress;
pub mod followup;
pub mod prompt;
pub mod route;
pub mod stream;

use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::config::{threads, Settings};
use crate::embed::{Embedder, Reranker};
use crate::engine::{Answerer, Event};
use crate::exit::Exit;
use crate::llm::{ContextParams, StopReason};
use crate::printer::Format;
use crate::retrieve::{self, Fusion, Mode, Ranked};
use crate::store::{Location, Stamp, Store, VectorSearch};
use crate::ui::Ui;

/// The retrieval query of a question asked after `history` (earlier questions, oldest
/// first). A follow-up such as "And how do I drop it afterwards?" names nothing to search
/// for; the previous question does.
pub fn followup_query(history: &[String], question: &str) -> String {
    followup::query(history, question)
}

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

#[derive(Debug, Serialize, Deserialize, Clone)]
pub struct SourceOut {
    pub id: String,
    pub path: String,
    pub heading: String,
    pub line_start: u32,
    pub line_end: u32,
    pub score: f32,
}

#[derive(Debug, Serialize, Deserialize, Default, Clone)]
pub struct Timings {
    pub retrieval_ms: f64,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub prefill_ms: f64,
    pub prefill_tok_per_s: f64,
    pub generated_tokens: usize,
    pub decode_ms: f64,
    pub decode_tok_per_s: f64,
    /// Speculative decoding: tokens drafted, and how many of them the generator kept.
    #[serde(default)]
    pub drafted_tokens: usize,
    #[serde(default)]
    pub accepted_tokens: usize,
    pub ttft_ms: f64,
    pub total_ms: f64,
    /// The generator's mean probability for its first 16 tokens (local generators).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f32>,
}

#[derive(Debug, Serialize, Deserialize, Clone)]
pub struct ModelOut {
    pub path: String,
    pub sha256: String,
    /// `small`, `medium` or `large`, and why (see `route`).
    #[serde(flatten)]
    pub route: route::Route,
}

/// A source line that supports a cited sentence: the manual's own words under the answer.
#[derive(Debug, Serialize, Deserialize, Clone, PartialEq)]
pub struct Evidence {
    /// `S2`
    pub id: String,
    pub path: String,
    /// The file line of the quote when the span's text maps line for line onto the file;
    /// otherwise the span's first line, with `line_end` its last (merged or widened spans).
    pub line: u32,
    pub line_end: u32,
    pub text: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Answer {
    pub question: String,
    pub answer: String,
    pub sources: Vec<SourceOut>,
    pub citations: Vec<cite::Citation>,
    /// For each supported citation, the source line that backs it (`path:line`).
    pub evidence: Vec<Evidence>,
    pub invalid_citations: Vec<String>,
    /// Markers rag added to sentences the model left uncited (llm.add_citations).
    pub added_citations: usize,
    /// Sentences of three content words or more that cite no source.
    pub uncited_sentences: Vec<String>,
    pub abstained: bool,
    /// The best cosine similarity of a retrieved span (None in text-only mode).
    pub best_similarity: Option<f32>,
    pub stop: Option<StopReason>,
    pub timings: Timings,
    pub model: Option<ModelOut>,
}

fn vector_search(s: &Settings) -> VectorSearch {
    VectorSearch::of(&s.index, s.retrieval.exact)
}

fn fusion(s: &Settings) -> Fusion {
    Fusion {
        k: s.retrieval.rrf_k,
        vector_weight: s.retrieval.vector_weight,
        text_weight: s.retrieval.text_weight,
        file_weight: s.retrieval.file_weight,
        candidates: s.retrieval.candidates,
        neighbors: s.retrieval.neighbors,
    }
}

/// The index and the embedder, opened once and checked to belong together.
/// The models sit behind mutexes (ONNX sessions run with `&mut`), so retrieval takes
/// `&self`: a chat keeps a generator session borrowed from the engine while it retrieves.
pub struct Retriever {
    /// The index as last opened, and its stamp then: [`Retriever::refresh`] swaps in a
    /// newer version while readers finish on the one they hold.
    store: RwLock<(Arc<Store>, Stamp)>,
    /// Where the index lives: resolved once (a remote one holds its object-store client), not
    /// on every request's refresh check.
    loc: Location,
    embedder: Option<Mutex<Embedder>>,
    reranker: Option<Mutex<Reranker>>,
    fusion: Fusion,
}

/// A poisoned lock only means an earlier call panicked mid-embedding; the model is intact.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The question's vector and the texts' vectors.
type Embedded = (Vec<f32>, Vec<Vec<f32>>);

impl Retriever {
    pub fn open(settings: &Settings, mode: Mode) -> Result<Retriever> {
        let loc = Location::of(&settings.index)?;
        let stamp = Store::stamp(&loc);
        let store = Store::open(&loc)?.with_search(vector_search(settings));
        let embedder = if mode == Mode::Text {
            None
        } else {
            let e = Embedder::load(&settings.embed)?;
            store.check_model(&e.info)?;
            Some(Mutex::new(e))
        };
        Ok(Retriever {
            store: RwLock::new((Arc::new(store), stamp)),
            loc,
            embedder,
            reranker: Reranker::load(&settings.rerank, &settings.embed)?.map(Mutex::new),
            fusion: fusion(settings),
        })
    }

    fn store(&self) -> Arc<Store> {
        self.store
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clone()
    }

    /// Re-opens the index when its stamp changed (an ingest committed since); whether it
    /// did. The new version must have been made with the loaded embedder (else exit 4, and
    /// the old version stays in use).
    pub fn refresh(&self, settings: &Settings) -> Result<bool> {
        let loc = &self.loc;
        let stamp = Store::stamp(loc);
        if self.store.read().unwrap_or_else(|p| p.into_inner()).1 == stamp {
            return Ok(false);
        }
        let store = Store::open(loc)?.with_search(vector_search(settings));
        if let Some(e) = &self.embedder {
            store.check_model(&lock(e).info)?;
        }
        *self.store.write().unwrap_or_else(|p| p.into_inner()) = (Arc::new(store), stamp);
        tracing::info!(index = %loc.display(), "index re-opened: a new version was committed");
        Ok(true)
    }

    /// The indexed files (paths relative to the project root) within `scope` (a filter, as
    /// `--path`/`--where` make), sorted.
    pub fn files(&self, scope: Option<&str>) -> Result<Vec<String>> {
        if let Some(scope) = scope {
            return self.store().paths_within(scope);
        }
        let mut files: Vec<String> = self
            .store()
            .file_states()?
            .into_values()
            .filter(|f| f.chunks > 0)
            .map(|f| f.path)
            .collect();
        files.sort();
        Ok(files)
    }

    /// The text the index holds for `path` (its chunks in line order, those within `scope`),
    /// if it is indexed and within it.
    pub fn file_text(&self, path: &str, scope: Option<&str>) -> Result<Option<String>> {
        let chunks = self.store().chunks_of(path, scope)?;
        Ok((!chunks.is_empty()).then(|| {
            chunks
                .iter()
                .map(|c| c.text.as_str())
                .collect::<Vec<_>>()
                .join("\n\n")
        }))
    }

    /// The best spans widened with their neighbouring chunks (`retrieval.neighbors`).
    pub fn widen(&self, ranked: &[Ranked]) -> Result<Vec<Ranked>> {
        retrieve::widen_best(&self.store(), ranked, self.fusion.neighbors)
    }

    /// The question's vector and those of the passages `texts`, or `None` when no embedder
    /// is loaded (text-only retrieval).
    pub fn embed(&self, question: &str, texts: &[String]) -> Result<Option<Embedded>> {
        match &self.embedder {
            Some(e) => {
                let mut e = lock(e);
                Ok(Some((e.embed_query(question)?, e.embed(texts)?)))
            }
            None => Ok(None),
        }
    }

    /// Retrieves for `q`; returns the ranked spans and the milliseconds it took.
    pub fn run(&self, q: &Query, mode: Mode, ui: &Ui) -> Result<(Vec<Ranked>, f64)> {
        let started = Instant::now();
        let vector = match (&self.embedder, mode) {
            (Some(e), Mode::Hybrid | Mode::Vector) => Some(lock(e).embed_query(&q.text)?),
            _ => None,
        };
        // With a reranker, fusion only proposes candidates; the cross-encoder picks the top_k.
        let depth = match &self.reranker {
            Some(r) => lock(r).candidates.max(q.top_k),
            None => q.top_k,
        };
        let mut ranked = retrieve::retrieve(
            &self.store(),
            &q.text,
            vector.as_deref(),
            mode,
            depth,
            self.fusion,
            q.filter.as_deref(),
        )?;
        if let Some(r) = &self.reranker {
            let passages: Vec<String> = ranked
                .iter()
                .map(|x| retrieve::rerank_text(&x.hit))
                .collect();
            let scores = lock(r).scores(&q.text, &passages)?;
            ranked = retrieve::reorder(ranked, &scores);
            ranked.truncate(q.top_k);
        }
        let ms = started.elapsed().as_secs_f64() * 1e3;
        tracing::info!(?mode, hits = ranked.len(), ms, "retrieved");
        if q.verbose {
            explain(ui, &ranked, mode, q.filter.as_deref());
        }
        Ok((ranked, ms))
    }
}

fn retrieve(settings: &Settings, q: &Query, mode: Mode, ui: &Ui) -> Result<(Vec<Ranked>, f64)> {
    Retriever::open(settings, mode)?.run(q, mode, ui)
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
        let rerank = r.rerank_score.map(|s| format!("  rerank {s:.3}"));
        ui.stderr(&format!(
            "  {:>2}. {}:{}-{}  vector {}  text {}  fused {:.4}{}",
            i + 1,
            r.hit.path,
            r.hit.line_start,
            r.hit.line_end,
            rank(r.vector_rank, r.vector_score),
            rank(r.text_rank, r.text_score),
            r.score,
            rerank.unwrap_or_default()
        ));
    }
}

pub fn search(settings: &Settings, q: &Query, json: bool, ui: &Ui) -> Result<Exit> {
    let mode = q.mode.unwrap_or(Mode::Hybrid);
    let (ranked, ms) = retrieve(settings, q, mode, ui)?;
    let hits = crate::printer::SearchHit::all(&ranked);
    crate::printer::hits(&q.text, &hits, ms, json).emit(ui)?;
    Ok(Exit::Success)
}

/// The context for `llm` (n_ctx 0 = the model's training context) and the tokens reserved
/// for the answer; an error when the answer would leave no room for a prompt.
/// The context window and the answer's reserve; `n_ctx_train` gives the generator's own
/// window when `llm.n_ctx = 0`.
pub fn window(
    settings: &Settings,
    n_ctx_train: impl FnOnce() -> Result<u32>,
) -> Result<(ContextParams, usize)> {
    let n_ctx = if settings.llm.n_ctx == 0 {
        n_ctx_train()?
    } else {
        settings.llm.n_ctx
    };
    let reserve = settings.llm.max_tokens as usize;
    if reserve + 64 >= n_ctx as usize {
        return Err(crate::exit::ExitError::usage(format!(
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

pub fn ask(settings: &Settings, q: &Query, o: &AskOptions, ui: &Ui) -> Result<Exit> {
    let mode = q.mode.unwrap_or(Mode::Hybrid);
    let engine = Answerer::open(settings, mode, o.dry_run)?;
    if o.dry_run {
        return dry_run(&engine, q, ui);
    }
    let printer = crate::printer::Printer {
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
    let mut on = |e: Event| -> std::io::Result<()> {
        printer.event(&e).emit(ui).map_err(std::io::Error::other)
    };
    let result = engine.answer(q, o.cache, ui, &mut on)?;
    printer
        .answer(&result, settings.retrieval.min_similarity)
        .emit(ui)?;
    Ok(if result.abstained {
        Exit::Abstained
    } else {
        Exit::Success
    })
}

/// `rag ask --batch FILE`: one engine for every question of the file, generated together
/// (continuous batching, which starts every sequence from an empty context: the prompt
/// cache is not used).
pub fn ask_batch(settings: &Settings, file: &std::path::Path, q: &Query, ui: &Ui) -> Result<Exit> {
    let engine = Answerer::open(settings, q.mode.unwrap_or(Mode::Hybrid), false)?;
    batch::run(&engine, file, q, ui)
}

/// `--dry-run`: the packed prompt, without loading the model weights.
fn dry_run(engine: &Answerer, q: &Query, ui: &Ui) -> Result<Exit> {
    let (ranked, _) = engine.retrieve(q, ui)?;
    let prep = engine.prepare(&q.text, &ranked)?;
    let p = crate::printer::Printer {
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

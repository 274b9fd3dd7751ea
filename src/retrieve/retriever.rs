//! The [`Retriever`]: the index, the embedder and the optional reranker, opened once and
//! checked to belong together, answering [`Query`]s with ranked spans.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use anyhow::Result;

use super::{Fusion, Ranked};
use crate::config::{Mode, Settings};
use crate::embed::{Embedder, Reranker};
use crate::store::{Location, Stamp, Store, VectorSearch};

/// What to retrieve: the text, the retriever (resolved once, from the settings and the
/// request), how many spans, and an
/// optional filter (`--path`/`--where`); `verbose` asks for the ranking to be explained
/// (the engine's `Event::Ranked`, `printer::ranking`).
#[derive(Debug, Clone, Default)]
pub struct Query {
    pub text: String,
    pub mode: Mode,
    pub top_k: usize,
    pub filter: Option<String>,
    pub verbose: bool,
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
        expand_weight: s.retrieval.expand_weight,
    }
}

/// What a generator adds to one retrieval (`retrieval.expand`, `retrieval.rerank`), made by
/// the engine, which holds the generators.
#[derive(Default)]
pub struct Help<'a> {
    /// Passages a generator wrote for the query: embedded and searched beside its vector.
    pub passages: Vec<String>,
    /// Search terms it wrote: searched by full text beside the query's words.
    pub terms: Vec<String>,
    /// Re-orders the best fused candidates.
    pub rescorer: Option<&'a dyn Rescore>,
}

/// A reranker the engine lends the retriever: a generator's judgement of each candidate.
pub trait Rescore {
    /// How many of the best fused candidates it scores.
    fn candidates(&self) -> usize;
    /// A score per passage (higher is more relevant), for the first ones in order: fewer
    /// than asked where it ran out of time.
    fn scores(&self, query: &str, passages: &[String]) -> Result<Vec<f32>>;
}

/// What the generators' help cost one retrieval (`--json`, `--stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Helped {
    /// Writing the expansion (`retrieval.expand`), and the tokens written.
    pub expand_ms: f64,
    pub expand_tokens: usize,
    /// Reranking (`retrieval.rerank`), and the candidates scored.
    pub rerank_ms: f64,
    pub reranked: usize,
    /// Help taken from the last retrieval of the same question (eval retrieves a question,
    /// then answers it): not spent again here, but what asking it once spends.
    #[serde(default, skip_serializing_if = "crate::answer::is_zero")]
    pub reused_ms: f64,
}

/// What one retrieval gives an answer ([`Retriever::retrieve`]): the ranked spans, as
/// fusion (and the reranker) ordered them, which abstention, routing, `--verbose` and
/// eval's ranks read; and the passages the prompt reads: the best spans widened with their
/// neighbouring chunks (`retrieval.neighbors`) and merged where they then touch.
#[derive(Debug, Clone)]
pub struct Retrieval {
    pub ranked: Vec<Ranked>,
    /// The passages of every ranked span.
    pub passages: Vec<Ranked>,
    /// The passages of the best `retrieval.large_top_k` spans alone (what the large
    /// generator reads), merged among themselves only; `None` where that is all of them.
    pub fewer: Option<Vec<Ranked>>,
    /// What the generators' help cost it.
    pub helped: Helped,
}

impl Retrieval {
    /// The passages a generator reads: of the best `retrieval.large_top_k` spans when
    /// `fewer`, else of all of them.
    pub fn passages(&self, fewer: bool) -> &[Ranked] {
        match &self.fewer {
            Some(p) if fewer => p,
            _ => &self.passages,
        }
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
    /// How many of the best spans the large generator reads (`retrieval.large_top_k`).
    large_top_k: usize,
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
            large_top_k: settings.retrieval.large_top_k,
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

    /// Retrieves for `q` what an answer reads, in one call: the ranked spans and, from
    /// them, the widened passages, for every generator.
    pub fn retrieve(&self, q: &Query, help: &Help<'_>) -> Result<Retrieval> {
        let (ranked, helped) = self.run_with(q, q.mode, help)?;
        let widened = super::widen_best(&self.store(), &ranked, self.fusion.neighbors)?;
        let (passages, fewer) = super::passages(widened, self.large_top_k);
        Ok(Retrieval {
            passages,
            fewer,
            ranked,
            helped,
        })
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

    /// Retrieves for `q` with what a generator wrote for it, reranked where `help` lends a
    /// reranker.
    pub fn run_with(
        &self,
        q: &Query,
        mode: Mode,
        help: &Help<'_>,
    ) -> Result<(Vec<Ranked>, Helped)> {
        let started = Instant::now();
        let (vector, more_vectors) = match (&self.embedder, mode) {
            (Some(e), Mode::Hybrid | Mode::Vector) => {
                let mut e = lock(e);
                let more = if help.passages.is_empty() {
                    Vec::new()
                } else {
                    e.embed(&help.passages)?
                };
                (Some(e.embed_query(&q.text)?), more)
            }
            _ => (None, Vec::new()),
        };
        // With a reranker, fusion only proposes candidates; the reranker picks the top_k.
        let mut depth = match &self.reranker {
            Some(r) => lock(r).candidates.max(q.top_k),
            None => q.top_k,
        };
        if let Some(r) = help.rescorer {
            depth = depth.max(r.candidates());
        }
        let searched = super::Searched {
            text: &q.text,
            vector: vector.as_deref(),
            more_vectors: &more_vectors,
            more_texts: &help.terms,
        };
        let mut ranked = super::retrieve(
            &self.store(),
            searched,
            mode,
            depth,
            self.fusion,
            q.filter.as_deref(),
        )?;
        if let Some(r) = &self.reranker {
            let passages: Vec<String> = ranked.iter().map(|x| super::rerank_text(&x.hit)).collect();
            let scores = lock(r).scores(&q.text, &passages)?;
            ranked = super::reorder(ranked, &scores);
        }
        let mut helped = Helped::default();
        if let Some(r) = help.rescorer {
            (ranked, helped) = rescore(ranked, &q.text, r)?;
        }
        ranked.truncate(q.top_k);
        let ms = started.elapsed().as_secs_f64() * 1e3;
        tracing::info!(?mode, hits = ranked.len(), ms, "retrieved");
        Ok((ranked, helped))
    }
}

/// The best of `ranked` re-ordered by a generator's scores (`retrieval.rerank`), and what
/// that cost.
fn rescore(ranked: Vec<Ranked>, query: &str, r: &dyn Rescore) -> Result<(Vec<Ranked>, Helped)> {
    let at = Instant::now();
    let n = r.candidates().min(ranked.len());
    let passages: Vec<String> = ranked[..n]
        .iter()
        .map(|x| super::rerank_text(&x.hit))
        .collect();
    let scores = r.scores(query, &passages)?;
    let helped = Helped {
        reranked: scores.len(),
        rerank_ms: at.elapsed().as_secs_f64() * 1e3,
        ..Helped::default()
    };
    Ok((super::blend(ranked, &scores), helped))
}

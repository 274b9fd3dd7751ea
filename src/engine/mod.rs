//! The answering engine: load once, answer many. An [`Answerer`] owns the index, the
//! embedder and every generator it has loaded, and answers a question by retrieving,
//! routing, packing, prefilling (with the prompt cache), streaming and checking citations.
//! It reports what happens as [`Event`]s and returns the checked [`Answer`]; it never
//! prints an answer itself, so `ask`, `eval` and later front ends share it.

mod answer;
mod batch;
mod chat;
mod draft;
mod generate;
mod help;
mod judge;
pub mod load;
mod retrieval;
mod shared;
pub mod speeds;
pub use chat::Chat;
pub use shared::{batcher, Batcher};

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use anyhow::Result;

pub use crate::answer::{Answer, Event, ModelOut, SourceOut, Timings, ABSTAIN_TEXT};
use crate::ask::prompt::{self, Packed};
use crate::ask::{route, window};
use crate::config::Mode;
use crate::config::{Backend, Settings, Tier};
use crate::llm::Generator;
use crate::retrieve::{Query, Ranked, Retrieval, Retriever};
pub use answer::sources_out;
use answer::{abstained, best_similarity};
use generate::announce;

/// Where the engine's events go: a front end's handler, whose error (a closed pipe; an
/// `Interrupted` from Ctrl-C in chat) stops the answer.
pub type On<'o> = &'o mut dyn FnMut(Event) -> std::io::Result<()>;

/// Where a generator slot's model lives.
#[derive(Clone, PartialEq)]
struct Slot {
    backend: Backend,
    path: PathBuf,
    /// Layers it may put on a GPU: the same file with other layers is another slot.
    layers: crate::config::Layers,
}

/// Answers take `&self`, so front ends that serve many clients (`rag serve`) share one
/// engine across threads: each generator loads once into its slot on first use.
pub struct Answerer {
    settings: Settings,
    retriever: Retriever,
    /// The small, medium and large generator (`llm.model`, `llm.medium_model`,
    /// `llm.large_model`, each local or remote per its backend), loaded on demand; two tiers
    /// set to the same file share the first one's slot.
    models: [(Slot, OnceLock<Generator>); 3],
    /// How long each slot's model took to load, until the first answer on it records it
    /// with its speeds (a one-shot `rag ask` pays the load in every answer).
    load_ms: [Mutex<Option<f64>>; 3],
    /// Held while a generator loads, so two threads never load the same file twice.
    loading: Mutex<()>,
    /// The draft model of `llm.speculative = "draft"`, loaded on first use.
    draft: draft::DraftSlot,
    /// Load generators' vocabularies only: enough to pack prompts (`--dry-run`, eval's
    /// context recall), not to generate.
    vocab_only: bool,
    /// The last question's expansion and reranking ([`help::Memo`]).
    memo: Mutex<help::Memo>,
}

/// One question for [`Answerer::answer`].
pub struct Request<'a> {
    /// What retrieval reads.
    pub query: &'a Query,
    /// What the prompt asks: the query's text, or for a follow-up the question as asked
    /// while retrieval reads it with the conversation's context.
    pub question: &'a str,
    pub how: Generation<'a>,
    /// Called after retrieval and before generation (a server's queue for the generator),
    /// so an abstention never waits; what it returns is held until the answer is done, and
    /// its error ends the request before any event.
    pub admit: Option<Admit<'a>>,
}

/// A request's admission: a guard held while the answer is generated.
pub type Admit<'a> = Box<dyn FnOnce() -> Result<Box<dyn Held + 'a>> + 'a>;

/// Anything held for its drop (a queue's permit).
pub trait Held {}
impl<T> Held for T {}

impl<'a> Request<'a> {
    /// `query` asked as written, alone, with the prompt cache when `cache`.
    pub fn new(query: &'a Query, cache: bool) -> Request<'a> {
        Request {
            query,
            question: &query.text,
            how: Generation::Alone { cache },
            admit: None,
        }
    }
}

/// How an answer on a local generator is generated.
pub enum Generation<'b> {
    /// In a context of its own, with the prompt cache when `cache` (and drafts when
    /// `llm.speculative` asks): what `ask` and `chat` do.
    Alone { cache: bool },
    /// On the generation thread that batches concurrent answers ([`Answerer::run_batches`]):
    /// what `rag serve` does.
    Shared(&'b Batcher),
}

/// Retrieval that did not abstain.
struct Retrieved {
    retrieval: Retrieval,
    so_far: SoFar,
}

/// What an answer carries from retrieval into generation: its figures so far (retrieval)
/// and when it started.
#[derive(Clone)]
struct SoFar {
    timings: Timings,
    started: Instant,
    /// Other processes' CPU use since the question came, so the generator's threads fit
    /// what they leave ([`load::busy_now`]).
    meter: load::Meter,
}

/// What the engine decided before generating: the route, the packed prompt and its tokens.
pub struct Prepared {
    pub route: route::Route,
    pub model: usize,
    pub packed: Packed,
    /// The best cosine similarity among the retrieved spans (what abstention and routing read).
    pub best_similarity: Option<f32>,
}

impl Answerer {
    pub fn open(settings: &Settings, mode: Mode, vocab_only: bool) -> Result<Answerer> {
        Ok(Answerer {
            settings: settings.clone(),
            retriever: Retriever::open(settings, mode)?,
            models: Tier::ALL.map(|t| (slot(settings, t), OnceLock::new())),
            load_ms: Default::default(),
            loading: Mutex::new(()),
            draft: OnceLock::new(),
            // The generators that help retrieval run, so they need their weights.
            vocab_only: vocab_only && !helps(settings),
            memo: Mutex::default(),
        })
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Retrieval only (with the generators' help where the settings ask it): ranked spans
    /// and milliseconds.
    pub fn retrieve(&self, q: &Query) -> Result<(Vec<Ranked>, f64)> {
        let started = Instant::now();
        let ranked = self.helped_ranked(q)?;
        Ok((ranked, started.elapsed().as_secs_f64() * 1e3))
    }

    /// The slot of generator `tier` (the first one's of those set to the same model),
    /// loading or connecting it on first use.
    fn model(&self, tier: Tier) -> Result<usize> {
        let want = slot(&self.settings, tier);
        let i = self
            .models
            .iter()
            .position(|(s, _)| *s == want)
            .expect("slots come from the same settings");
        if self.models[i].1.get().is_some() {
            return Ok(i);
        }
        let _one = self.loading.lock().unwrap_or_else(|p| p.into_inner());
        if self.models[i].1.get().is_none() {
            let memo = self.settings.index.state_dir().join("model-hashes.json");
            let hash = |path: &std::path::Path| crate::hashcache::sha256(path, &memo);
            let s = &self.settings.llm;
            let started = Instant::now();
            let loaded = Generator::open(
                want.backend,
                &want.path,
                s,
                self.vocab_only,
                want.layers,
                hash,
            )?;
            *lock(&self.load_ms[i]) = Some(started.elapsed().as_secs_f64() * 1e3);
            let _ = self.models[i].1.set(loaded);
        }
        Ok(i)
    }

    /// A generator [`Answerer::model`] loaded.
    fn loaded(&self, i: usize) -> &Generator {
        self.models[i].1.get().expect("loaded by Answerer::model")
    }

    /// The context window of generator `g` and the answer's reserve.
    fn window(&self, g: &Generator) -> Result<(crate::llm::ContextParams, usize)> {
        window(&self.settings, || g.n_ctx_train())
    }

    /// Loads the generator `route` would start with, so the first request does not wait
    /// for it (`rag serve`).
    pub fn preload(&self) -> Result<()> {
        self.model(fixed_route(&self.settings).model).map(|_| ())
    }

    /// Re-opens the index when an ingest has committed a new version since it was opened;
    /// whether it did. A long-running front end calls it before each request.
    pub fn refresh(&self) -> Result<bool> {
        self.retriever.refresh(&self.settings)
    }

    /// The indexed files, relative to the project root (what `rag mcp` lists as resources).
    pub fn indexed_files(&self, scope: Option<&str>) -> Result<Vec<String>> {
        self.retriever.files(scope)
    }

    /// The text the index holds for one indexed file.
    pub fn indexed_text(&self, path: &str, scope: Option<&str>) -> Result<Option<String>> {
        self.retriever.file_text(path, scope)
    }

    /// Routes on the ranked spans and packs the prompt from the passages the chosen
    /// generator reads, loading it.
    pub fn prepare(&self, question: &str, r: &Retrieval) -> Result<Prepared> {
        let best = best_similarity(&r.ranked);
        let s = &self.settings.llm;
        let route = route::route(
            s.route,
            best,
            budget(&self.settings),
            speeds(&self.settings),
        );
        tracing::info!(model = route.model.name(), reason = %route.reason, "routed");
        let model = self.model(route.model)?;
        let passages = r.passages(Self::reads_fewer(route.model));
        let gen = self.loaded(model);
        let (params, reserve) = self.window(gen)?;
        let n_ctx = params.n_ctx as usize;
        let style = self.style();
        let overhead = gen.chat_len(&prompt::messages(&[], question, style.system))?;
        let hits: Vec<_> = passages.iter().map(|r| (r.hit.clone(), r.score)).collect();
        let count = |t: &str| gen.count_tokens(t);
        let budget = n_ctx - reserve;
        let packed = prompt::pack_turn(&[], question, &hits, budget, overhead, &count, style);
        Ok(Prepared {
            route,
            model,
            packed,
            best_similarity: best,
        })
    }

    /// Says the route's note (an answer over the budget, or a smaller generator for time)
    /// once a day for the generator it names, so 20 questions in a row do not repeat it.
    fn note_route(&self, route: &route::Route, on: On<'_>) -> Result<()> {
        let Some(note) = &route.note else {
            return Ok(());
        };
        let (_, path) = self.settings.generator(route.model);
        if speeds::Speeds::in_dir(&self.settings.index.state_dir()).note_due(path) {
            on(Event::Note(note))?;
        }
        Ok(())
    }

    /// The prompt's instructions and source order, from the settings.
    fn style(&self) -> prompt::Style<'_> {
        let s = &self.settings;
        prompt::Style {
            system: match s.llm.system_prompt.trim() {
                "" => prompt::SYSTEM,
                custom => custom,
            },
            order: s.retrieval.source_order,
        }
    }

    /// The prompt exactly as the generator would read it (`rag ask --dry-run`).
    pub fn render(&self, p: &Prepared) -> Result<(String, usize)> {
        self.loaded(p.model).render(&p.packed.messages)
    }

    /// Answers a request: retrieve, abstain or route, (wait for admission,) pack, generate,
    /// check. The one way to an answer for `ask`, `eval`, `mcp` and `serve`.
    pub fn answer(&self, r: Request<'_>, on: On<'_>) -> Result<Answer> {
        let Request {
            query: q,
            question,
            how,
            admit,
        } = r;
        let r = match self.retrieve_checked(q, question, on)? {
            Ok(r) => r,
            Err(abstention) => return Ok(abstention),
        };
        let _admitted = admit.map(|admit| admit()).transpose()?;
        let prep = self.prepare(question, &r.retrieval)?;
        let sources = announce(&prep, r.so_far.timings.retrieval_ms, on)?;
        self.note_route(&prep.route, on)?;
        let local = self.loaded(prep.model).local().is_some();
        match how {
            Generation::Shared(b) if local => {
                self.generate_batched(b, question, prep, sources, r.so_far, on)
            }
            Generation::Shared(_) => self.generate(question, prep, sources, r.so_far, true, on),
            Generation::Alone { cache } => {
                self.generate(question, prep, sources, r.so_far, cache, on)
            }
        }
    }
}

/// Whether retrieval asks a generator's help (`retrieval.expand`, `retrieval.rerank`).
fn helps(settings: &Settings) -> bool {
    let r = &settings.retrieval;
    r.expand != crate::config::Expand::Off || r.rerank != crate::config::Rerank::Off
}

/// The generator every question of a chat, a server's preload and `bench llm` take: the
/// one a fixed route names, or the best one `auto` finds within the budget.
pub(crate) fn fixed_route(settings: &Settings) -> route::Route {
    let (speed, s) = (speeds(settings), &settings.llm);
    route::route(s.route, None, budget(settings), speed)
}

/// `auto`'s budget rule from the settings.
fn budget(settings: &Settings) -> route::Budget {
    route::Budget {
        budget_s: settings.llm.answer_budget_s,
        similarity: settings.llm.route_similarity,
    }
}

/// What routing knows of each generator: missing, not measured yet, measured here, or
/// predicted from a larger one measured on a quiet machine (a server counts as present and
/// unmeasured: its speed is the server's).
fn speeds(settings: &Settings) -> impl Fn(Tier) -> route::Speed + '_ {
    let record = speeds::Speeds::in_dir(&settings.index.state_dir()).read();
    move |tier| speed_of(settings, &record, tier)
}

pub(crate) fn speed_of(settings: &Settings, record: &speeds::Record, tier: Tier) -> route::Speed {
    use route::Speed;
    let (backend, path) = settings.generator(tier);
    if backend == Backend::Openai {
        return Speed::Unmeasured;
    }
    let own = record.speed(path, load::quiet_now);
    if matches!(own, Speed::Missing) || matches!(own, Speed::Measured(m) if m.quiet) {
        return own;
    }
    // Not measured on a quiet machine: predicted from the nearest larger one that was. A
    // busy measure below the prediction is the tighter bound and stays.
    let predicted = [Tier::Medium, Tier::Large]
        .into_iter()
        .filter(|&larger| larger > tier)
        .find_map(|larger| {
            let (b, from) = settings.generator(larger);
            let figures = (b == Backend::Local).then(|| record.quiet_figures(from))??;
            let (w_from, w_to) = (speeds::Weights::of(from)?, speeds::Weights::of(path)?);
            let typical_s = figures.predict(&w_from, &w_to).typical_s();
            Some(Speed::Predicted {
                typical_s,
                from: larger,
            })
        });
    match (own, predicted) {
        (Speed::Measured(m), Some(p)) if p.seconds().is_some_and(|s| s < m.typical_s) => p,
        (Speed::Measured(_), _) => own,
        (_, Some(p)) => p,
        _ => own,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Generator `tier`'s backend and file.
fn slot(settings: &Settings, tier: Tier) -> Slot {
    let (backend, path) = settings.generator(tier);
    Slot {
        backend,
        // Both remote generators are the same server and model.
        path: match backend {
            Backend::Local => path.clone(),
            Backend::Openai => PathBuf::new(),
        },
        layers: settings.gpu_layers(tier),
    }
}

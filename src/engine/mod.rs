//! The answering engine: load once, answer many. An [`Answerer`] owns the index, the
//! embedder and every generator it has loaded, and answers a question by retrieving,
//! routing, packing, prefilling (with the prompt cache), streaming and checking citations.
//! It reports what happens as [`Event`]s and returns the checked [`Answer`]; it never
//! prints an answer itself, so `ask`, `eval` and later front ends share it.

mod batch;
mod chat;
mod draft;
pub use chat::Chat;

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use anyhow::Result;

use crate::ask::prompt::{self, Packed};
use crate::ask::{
    cite, route, should_abstain, stream, window, Answer, Evidence, ModelOut, Query, Retriever,
    SourceOut, Timings, ABSTAIN_TEXT,
};
use crate::config::{Backend, Settings, Tier};
use crate::llm::{Llm, Message, StopReason, LLAMA_CPP_BUILD};
use crate::promptcache::PromptCache;
use crate::remote::Generator;
use crate::retrieve::{Mode, Ranked};
use crate::store::Hit;
use crate::ui::Ui;

/// A cached state is worth loading only when it covers at least this many prompt tokens.
const MIN_CACHED_PREFIX: usize = 32;

/// What happens while a question is answered, in order.
pub enum Event<'a> {
    /// A retrieved span that did not fit the context budget.
    Dropped(&'a Hit),
    /// The sources packed into the prompt, before generation starts.
    Retrieved {
        sources: &'a [SourceOut],
        retrieval_ms: f64,
    },
    /// A piece of the answer as it streams (already loop-guarded and cited).
    Piece(&'a str),
}

/// A generator ready to answer: a GGUF file loaded in this process (with its SHA-256, the
/// prompt cache key), or a connection to an OpenAI-compatible server.
enum Loaded {
    Local { llm: Llm, sha256: String },
    Remote(Generator),
}

impl Loaded {
    fn local(&self) -> Option<(&Llm, &str)> {
        match self {
            Loaded::Local { llm, sha256 } => Some((llm, sha256)),
            Loaded::Remote(_) => None,
        }
    }

    fn count_tokens(&self, text: &str) -> usize {
        match self {
            Loaded::Local { llm, .. } => llm.count_tokens(text),
            Loaded::Remote(g) => g.count_tokens(text),
        }
    }

    /// Tokens of the whole chat prompt.
    fn chat_len(&self, messages: &[Message]) -> Result<usize> {
        match self {
            Loaded::Local { llm, .. } => Ok(llm.chat_tokens(messages)?.len()),
            Loaded::Remote(g) => g.chat_len(messages),
        }
    }

    /// The context window and the answer's reserve.
    fn window(&self, settings: &Settings) -> Result<(crate::llm::ContextParams, usize)> {
        match self {
            Loaded::Local { llm, .. } => window(settings, || Ok(llm.n_ctx_train())),
            Loaded::Remote(g) => window(settings, || g.n_ctx_default()),
        }
    }

    /// What an answer names as its model: the file and its SHA-256, or the server and model.
    fn identity(&self) -> (String, String) {
        match self {
            Loaded::Local { llm, sha256 } => (llm.path.display().to_string(), sha256.clone()),
            Loaded::Remote(g) => (g.name(), String::new()),
        }
    }
}

/// Where a generator slot's model lives.
#[derive(Clone, PartialEq)]
struct Slot {
    backend: Backend,
    path: PathBuf,
}

/// Answers take `&self`, so front ends that serve many clients (`rag serve`) share one
/// engine across threads: each generator loads once into its slot on first use.
pub struct Answerer {
    settings: Settings,
    mode: Mode,
    retriever: Retriever,
    /// The small, medium and large generator (`llm.model`, `llm.medium_model`,
    /// `llm.large_model`, each local or remote per its backend), loaded on demand; two tiers
    /// set to the same file share the first one's slot.
    models: [(Slot, OnceLock<Loaded>); 3],
    /// Held while a generator loads, so two threads never load the same file twice.
    loading: Mutex<()>,
    /// The draft model of `llm.speculative = "draft"`, loaded on first use.
    draft: draft::DraftSlot,
    /// Load generators' vocabularies only: enough to pack prompts (`--dry-run`, eval's
    /// context recall), not to generate.
    vocab_only: bool,
}

/// Retrieval that did not abstain, and when the answer started.
struct Retrieved {
    ranked: Vec<Ranked>,
    timings: Timings,
    started: Instant,
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
            mode,
            retriever: Retriever::open(settings, mode)?,
            models: Tier::ALL.map(|t| (slot(settings, t), OnceLock::new())),
            loading: Mutex::new(()),
            draft: OnceLock::new(),
            vocab_only,
        })
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Retrieval only: ranked spans and milliseconds.
    pub fn retrieve(&self, q: &Query, ui: &Ui) -> Result<(Vec<Ranked>, f64)> {
        let mode = q.mode.unwrap_or(self.mode);
        self.retriever.run(q, mode, ui)
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
            let loaded = match want.backend {
                Backend::Local => {
                    let llm = Llm::load(&want.path, self.vocab_only)?;
                    let memo = self.settings.index.state_dir().join("model-hashes.json");
                    let sha256 = crate::hashcache::sha256(&llm.path, &memo)?;
                    Loaded::Local { llm, sha256 }
                }
                Backend::Openai => Loaded::Remote(Generator::open(&self.settings.llm)?),
            };
            let _ = self.models[i].1.set(loaded);
        }
        Ok(i)
    }

    /// A generator [`Answerer::model`] loaded.
    fn loaded(&self, i: usize) -> &Loaded {
        self.models[i].1.get().expect("loaded by Answerer::model")
    }

    /// Loads the generator `route` would start with, so the first request does not wait
    /// for it (`rag serve`).
    pub fn preload(&self) -> Result<()> {
        self.model(fixed_tier(self.settings.llm.route)).map(|_| ())
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

    /// Routes and packs the prompt for `ranked`, loading the chosen generator.
    pub fn prepare(&self, question: &str, ranked: &[Ranked]) -> Result<Prepared> {
        let best = best_similarity(ranked);
        let s = &self.settings.llm;
        let settings = &self.settings;
        let installed = |t| match settings.generator(t) {
            (Backend::Openai, _) => true,
            (Backend::Local, path) => path.is_file(),
        };
        let route = route::route(s.route, best, installed);
        tracing::info!(model = route.model.name(), reason = %route.reason, "routed");
        let model = self.model(route.model)?;
        let ranked = self.shape(question, ranked)?;
        let gen = self.loaded(model);
        let (params, reserve) = gen.window(&self.settings)?;
        let n_ctx = params.n_ctx as usize;
        let style = self.style();
        let overhead = gen.chat_len(&prompt::messages(&[], question, style.system))?;
        let hits: Vec<_> = ranked.iter().map(|r| (r.hit.clone(), r.score)).collect();
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

    /// What the prompt gets of the ranked spans: the best widened with its neighbours
    /// (`retrieval.neighbors`), then each cut to its closest sentences (`retrieval.compress`).
    fn shape(&self, question: &str, ranked: &[Ranked]) -> Result<Vec<Ranked>> {
        let ranked = self.retriever.widen(ranked)?;
        self.compress(question, &ranked)
    }

    /// Each span cut to the sentences closest to the question (`retrieval.compress`).
    fn compress(&self, question: &str, ranked: &[Ranked]) -> Result<Vec<Ranked>> {
        use crate::ask::compress;
        let n = self.settings.retrieval.compress;
        let mut out = ranked.to_vec();
        if n == 0 {
            return Ok(out);
        }
        let units: Vec<_> = out.iter().map(|r| compress::units(&r.hit.text)).collect();
        let mut texts = Vec::new();
        for (r, u) in out.iter().zip(&units) {
            texts.extend(u.iter().map(|x| r.hit.text[x.clone()].trim().to_string()));
        }
        let Some((question, vectors)) = self.retriever.embed(question, &texts)? else {
            return Ok(out);
        };
        let mut at = 0;
        for (r, u) in out.iter_mut().zip(&units) {
            let sims: Vec<f32> = vectors[at..at + u.len()]
                .iter()
                .map(|v| compress::cosine(&question, v))
                .collect();
            at += u.len();
            if u.len() > n + 1 {
                let keep = compress::choose(&r.hit.text, u, &sims, n);
                r.hit.text = compress::compress(&r.hit.text, u, &keep);
            }
        }
        Ok(out)
    }

    /// The prompt exactly as the generator would read it (`rag ask --dry-run`).
    pub fn render(&self, p: &Prepared) -> Result<(String, usize)> {
        let messages = &p.packed.messages;
        match self.loaded(p.model) {
            Loaded::Local { llm, .. } => {
                let tokens = llm.chat_tokens(messages)?;
                Ok((llm.render(messages)?, tokens.len()))
            }
            Loaded::Remote(g) => Ok((g.render(messages), g.chat_len(messages)?)),
        }
    }

    /// Answers `q`: retrieve, abstain or route, pack, generate, check.
    pub fn answer(
        &self,
        q: &Query,
        cache: bool,
        ui: &Ui,
        on: &mut dyn FnMut(Event) -> std::io::Result<()>,
    ) -> Result<Answer> {
        let question = q.text.clone();
        self.answer_with_question(q, &question, cache, ui, on)
    }

    /// [`Answerer::answer`] where retrieval reads `q.text` and the prompt asks `question`
    /// (a follow-up retrieves with its conversation's context but asks what was asked).
    pub fn answer_with_question(
        &self,
        q: &Query,
        question: &str,
        cache: bool,
        ui: &Ui,
        on: &mut dyn FnMut(Event) -> std::io::Result<()>,
    ) -> Result<Answer> {
        self.answer_admitted(q, question, cache, ui, || Ok(()), on)
    }

    /// [`Answerer::answer_with_question`] where generation waits for `admit` (a server's
    /// queue for the generator) after retrieval, so an abstention never queues; whatever
    /// `admit` returns is held until the answer is done, and its error ends the request
    /// before any event.
    pub fn answer_admitted<G>(
        &self,
        q: &Query,
        question: &str,
        cache: bool,
        ui: &Ui,
        admit: impl FnOnce() -> Result<G>,
        on: &mut dyn FnMut(Event) -> std::io::Result<()>,
    ) -> Result<Answer> {
        let r = match self.retrieve_checked(q, question, ui)? {
            Ok(r) => r,
            Err(abstention) => return Ok(abstention),
        };
        let _admitted = admit()?;
        let prep = self.prepare(question, &r.ranked)?;
        let sources = announce(&prep, r.timings.retrieval_ms, on)?;
        self.generate(question, prep, sources, r.timings, r.started, cache, ui, on)
    }

    /// Retrieves for `q` and applies rag's abstention check: the ranked spans and the
    /// timings so far, or the abstention (what one-shot and batch answers share).
    fn retrieve_checked(
        &self,
        q: &Query,
        question: &str,
        ui: &Ui,
    ) -> Result<Result<Retrieved, Answer>> {
        let started = Instant::now();
        let mode = q.mode.unwrap_or(self.mode);
        let (ranked, retrieval_ms) = self.retrieve(q, ui)?;
        let mut timings = Timings {
            retrieval_ms,
            ..Timings::default()
        };
        if should_abstain(&ranked, mode, self.settings.retrieval.min_similarity) {
            timings.total_ms = started.elapsed().as_secs_f64() * 1e3;
            return Ok(Err(abstained(question, timings, &ranked)));
        }
        Ok(Ok(Retrieved {
            ranked,
            timings,
            started,
        }))
    }

    /// Prefills `tokens`, first restoring the longest cached prefix from the persistent
    /// prompt cache and afterwards saving the prompt's state there (when `cache` is on).
    fn prefill(
        &self,
        session: &mut crate::llm::Session<'_>,
        loaded: &Loaded,
        tokens: &[crate::llm::Token],
        n_ctx: u32,
        cache: bool,
        ui: &Ui,
    ) -> Result<crate::llm::Prefill> {
        let settings = &self.settings;
        let sha256 = loaded.local().map_or("", |(_, sha)| sha);
        let cache = (cache && settings.llm.prompt_cache_mb > 0).then(|| {
            let n_ctx = n_ctx.to_string();
            PromptCache::new(
                &settings.index.state_dir(),
                &[sha256, &n_ctx, LLAMA_CPP_BUILD],
                settings.llm.prompt_cache_mb << 20,
            )
        });
        let ids = crate::llm::ids(tokens);
        let mut restored = None;
        if let Some((c, entry)) = cache
            .as_ref()
            .and_then(|c| Some((c, c.best(&ids, MIN_CACHED_PREFIX)?)))
        {
            if c.verified(&entry) && session.load_state(&entry.state, &entry.tokens) {
                restored = Some(entry.state);
            } else {
                ui.warn(&format!(
                    "ignored a damaged prompt cache entry {}",
                    entry.state.display()
                ));
                c.discard(&entry.state);
            }
        }
        let spin = ui.spinner(&format!("reading {} prompt tokens", tokens.len()));
        let prefill = match (session.prefill(tokens), restored) {
            (Ok(p), _) => p,
            // Whatever went wrong after a restore, the cache must not break the answer: drop
            // the entry and prefill from an empty context.
            (Err(e), Some(state)) => {
                ui.warn(&format!(
                    "prompt cache entry {} dropped ({e:#})",
                    state.display()
                ));
                if let Some(c) = &cache {
                    c.discard(&state);
                }
                session.reset();
                session.prefill(tokens)?
            }
            (Err(e), None) => return Err(e),
        };
        spin.finish_and_clear();
        if let Some(c) = &cache {
            // Saved before generation, so the state holds exactly the prompt.
            if let Err(e) = c.store(&ids, |p| session.save_state(p)) {
                ui.warn(&format!("prompt cache not saved: {e:#}"));
            }
        }
        Ok(prefill)
    }

    #[allow(clippy::too_many_arguments)]
    fn generate(
        &self,
        question: &str,
        prep: Prepared,
        sources: Vec<SourceOut>,
        timings: Timings,
        started: Instant,
        cache: bool,
        ui: &Ui,
        on: &mut dyn FnMut(Event) -> std::io::Result<()>,
    ) -> Result<Answer> {
        let loaded = self.loaded(prep.model);
        let Loaded::Local { llm, .. } = loaded else {
            let (answer, _) =
                self.remote_checked(question, &prep, sources, timings, started, on)?;
            return Ok(answer);
        };
        let (params, _) = loaded.window(&self.settings)?;
        let tokens = llm.chat_tokens(&prep.packed.messages)?;
        let mut session = llm.session(&params)?;
        let prefill = self.prefill(&mut session, loaded, &tokens, params.n_ctx, cache, ui)?;
        let mut drafter = self.drafter(llm, &params, ui);
        let generate = |s: &_, piece: &mut dyn FnMut(&str) -> bool| {
            Ok((prefill, session.generate(s, drafter.as_draft(), piece)?))
        };
        let (answer, _) =
            self.stream_checked(question, &prep, sources, timings, started, on, generate)?;
        Ok(answer)
    }

    /// [`Answerer::stream_checked`] on a remote generator: the whole prompt is sent, and the
    /// server's prompt cache (llama-server's `cache_prompt`) stands in for rag's.
    fn remote_checked(
        &self,
        question: &str,
        prep: &Prepared,
        sources: Vec<SourceOut>,
        timings: Timings,
        started: Instant,
        on: &mut dyn FnMut(Event) -> std::io::Result<()>,
    ) -> Result<(Answer, String)> {
        let Loaded::Remote(g) = self.loaded(prep.model) else {
            unreachable!("remote_checked is only called for a remote generator");
        };
        let messages = &prep.packed.messages;
        // The count packing made: only shown when the server reports no usage, so no second
        // round of /apply-template and /tokenize requests for it.
        let prompt_len = prep.packed.prompt_tokens;
        let generate =
            |s: &_, piece: &mut dyn FnMut(&str) -> bool| g.generate(messages, prompt_len, s, piece);
        self.stream_checked(question, prep, sources, timings, started, on, generate)
    }

    /// Streams the answer `generate` writes (on a prefilled local session, or from a server;
    /// it returns the prefill and decode figures), then checks its citations: what one-shot
    /// answers and chat turns share. Returns the checked answer and the text as generated
    /// (what a conversation keeps). A piece handler that fails with `Interrupted` stops the
    /// answer where it is (Ctrl-C in chat) and is not an error.
    #[allow(clippy::too_many_arguments)]
    fn stream_checked(
        &self,
        question: &str,
        prep: &Prepared,
        sources: Vec<SourceOut>,
        timings: Timings,
        started: Instant,
        on: &mut dyn FnMut(Event) -> std::io::Result<()>,
        generate: impl FnOnce(
            &crate::llm::Sampling,
            &mut dyn FnMut(&str) -> bool,
        ) -> Result<(crate::llm::Prefill, crate::llm::Decode)>,
    ) -> Result<(Answer, String)> {
        let texts = prep.packed.texts();
        let mut prefill = crate::llm::Prefill::default();
        let (raw, decode, added_citations) = self.stream(&texts, on, |sampling, piece| {
            let (p, d) = generate(sampling, piece)?;
            prefill = p;
            Ok(d)
        })?;
        let answer = self.checked(
            question,
            prep,
            sources,
            &raw,
            (&prefill, &decode, added_citations),
            timings,
            started,
        );
        Ok((answer, raw))
    }

    /// The answer as generated, its citations checked, with its evidence and figures.
    #[allow(clippy::too_many_arguments)]
    fn checked(
        &self,
        question: &str,
        prep: &Prepared,
        sources: Vec<SourceOut>,
        raw: &str,
        (prefill, decode, added_citations): (&crate::llm::Prefill, &crate::llm::Decode, usize),
        timings: Timings,
        started: Instant,
    ) -> Answer {
        let (path, sha256) = self.loaded(prep.model).identity();
        let texts = prep.packed.texts();
        let timings = generation_timings(timings, prefill, decode, started);
        let checked = cite::check(raw.trim(), &texts);
        let evidence = evidence(&checked.citations, &sources, &texts);
        Answer {
            question: question.to_string(),
            answer: checked.answer.clone(),
            sources,
            citations: checked.citations.clone(),
            evidence,
            invalid_citations: checked.invalid.clone(),
            added_citations,
            uncited_sentences: checked.uncited.clone(),
            abstained: false,
            best_similarity: prep.best_similarity,
            stop: Some(decode.stop),
            timings,
            model: Some(ModelOut {
                path,
                sha256,
                route: prep.route.clone(),
            }),
        }
    }

    /// Runs `generate` (a prefilled session's, or a remote server's), passing each piece
    /// through the loop guard and the citer to `on`. Returns the text as generated (a
    /// repeated tail dropped), the decode figures and how many citation markers were added.
    fn stream(
        &self,
        texts: &[(usize, &str)],
        on: &mut dyn FnMut(Event) -> std::io::Result<()>,
        generate: impl FnOnce(
            &crate::llm::Sampling,
            &mut dyn FnMut(&str) -> bool,
        ) -> Result<crate::llm::Decode>,
    ) -> Result<(String, crate::llm::Decode, usize)> {
        let settings = &self.settings;
        let mut raw = String::new();
        let mut write_err = None;
        let mut answer = stream::AnswerStream::new(texts, settings.llm.add_citations);
        let mut decode = generate(&settings.sampling(), &mut |piece| {
            let Some(piece) = answer.push(piece) else {
                return false;
            };
            raw.push_str(&piece);
            if piece.is_empty() {
                return true;
            }
            match on(Event::Piece(&piece)) {
                Ok(()) => true,
                Err(e) => {
                    write_err = Some(e);
                    false
                }
            }
        })?;
        let interrupted = write_err
            .as_ref()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::Interrupted);
        if interrupted {
            write_err = None;
            decode.stop = StopReason::Cancelled;
        } else {
            let rest = settle(&mut answer, &mut raw, &mut decode);
            if write_err.is_none() && !rest.is_empty() {
                if let Err(e) = on(Event::Piece(&rest)) {
                    write_err = Some(e);
                }
            }
        }
        match write_err {
            Some(e) => Err(e.into()),
            None => Ok((raw, decode, answer.added_citations())),
        }
    }
}

/// Ends an answer that was not interrupted: a repeated tail dropped, the stop reason set
/// when the loop guard cut it, and the citer's last words added to `raw`; returns those
/// words (still to be shown).
fn settle(
    answer: &mut stream::AnswerStream,
    raw: &mut String,
    decode: &mut crate::llm::Decode,
) -> String {
    let cut = decode.stop == StopReason::Repetition;
    if cut {
        *raw = stream::drop_repeat(raw);
    }
    if answer.looped() {
        decode.stop = StopReason::Repetition;
    }
    let rest = answer.finish(raw, cut);
    raw.push_str(&rest);
    rest
}

/// `timings` (retrieval so far) completed with the prefill and decode figures.
fn generation_timings(
    mut timings: Timings,
    prefill: &crate::llm::Prefill,
    decode: &crate::llm::Decode,
    started: Instant,
) -> Timings {
    let prefilled = prefill.prompt_tokens - prefill.cached_tokens;
    timings.prompt_tokens = prefill.prompt_tokens;
    timings.cached_tokens = prefill.cached_tokens;
    timings.prefill_ms = prefill.ms;
    timings.prefill_tok_per_s = rate(prefilled, prefill.ms);
    timings.generated_tokens = decode.tokens;
    timings.decode_ms = decode.ms;
    timings.decode_tok_per_s = rate(decode.tokens, decode.ms);
    timings.drafted_tokens = decode.drafted;
    timings.accepted_tokens = decode.accepted;
    timings.confidence = decode.confidence;
    // From the start of the question: what a person waits for.
    timings.ttft_ms =
        timings.retrieval_ms + prefill.ms + decode.first_piece_ms.unwrap_or(decode.ms);
    timings.total_ms = started.elapsed().as_secs_f64() * 1e3;
    timings
}

/// The generator a fixed route names; `auto` starts from the small one (chat keeps it, and
/// `rag serve` preloads it).
pub(crate) fn fixed_tier(route: crate::config::Route) -> Tier {
    use crate::config::Route;
    match route {
        Route::Small | Route::Auto => Tier::Small,
        Route::Medium => Tier::Medium,
        Route::Large => Tier::Large,
    }
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
    }
}

fn rate(tokens: usize, ms: f64) -> f64 {
    if ms > 0.0 {
        tokens as f64 * 1e3 / ms
    } else {
        0.0
    }
}

fn best_similarity(ranked: &[Ranked]) -> Option<f32> {
    ranked
        .iter()
        .filter_map(|r| r.vector_score)
        .reduce(f32::max)
}

/// The quoted line of each supported citation as `path:line`, each line once.
fn evidence(
    citations: &[cite::Citation],
    sources: &[SourceOut],
    texts: &[(usize, &str)],
) -> Vec<Evidence> {
    let mut out: Vec<Evidence> = Vec::new();
    for c in citations.iter().filter(|c| c.supported) {
        let (Some((offset, text)), Some(s)) = (&c.quote, sources.iter().find(|s| s.id == c.id))
        else {
            continue;
        };
        let n_lines = texts
            .iter()
            .find(|(n, _)| format!("S{n}") == c.id)
            .map_or(0, |(_, t)| t.lines().count() as u32);
        let at = s.line_start + *offset as u32;
        let exact = (n_lines == s.line_end - s.line_start + 1).then_some(at);
        let e = Evidence {
            id: c.id.clone(),
            path: s.path.clone(),
            // A merged or widened span can hold joins that are not file lines; its line
            // numbers then bound the quote instead of pinning it.
            line: exact.unwrap_or(s.line_start),
            line_end: exact.unwrap_or(s.line_end),
            text: text.clone(),
        };
        if !out.contains(&e) {
            out.push(e);
        }
    }
    out
}

/// Tells `on` what the budget dropped and what was packed; returns the packed sources.
fn announce(
    prep: &Prepared,
    retrieval_ms: f64,
    on: &mut dyn FnMut(Event) -> std::io::Result<()>,
) -> Result<Vec<SourceOut>> {
    for d in &prep.packed.dropped {
        on(Event::Dropped(d))?;
    }
    let sources = sources_out(&prep.packed);
    on(Event::Retrieved {
        sources: &sources,
        retrieval_ms,
    })?;
    Ok(sources)
}

pub fn sources_out(p: &Packed) -> Vec<SourceOut> {
    p.sources
        .iter()
        .map(|s| SourceOut {
            id: format!("S{}", s.n),
            path: s.hit.path.clone(),
            heading: s.hit.heading.clone(),
            line_start: s.hit.line_start,
            line_end: s.hit.line_end,
            score: s.score,
        })
        .collect()
}

fn abstained(question: &str, timings: Timings, ranked: &[Ranked]) -> Answer {
    Answer {
        question: question.to_string(),
        answer: ABSTAIN_TEXT.to_string(),
        sources: vec![],
        citations: vec![],
        evidence: vec![],
        invalid_citations: vec![],
        added_citations: 0,
        uncited_sentences: vec![],
        abstained: true,
        best_similarity: best_similarity(ranked),
        stop: None,
        timings,
        model: None,
    }
}

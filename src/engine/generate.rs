//! Generation on a prepared prompt: prefill (restoring and saving the persistent prompt
//! cache), decode (with a drafter when `llm.speculative` asks), the loop guard and citer on
//! every piece, and the citation check of the whole answer. One-shot answers, chat turns and
//! remote generators share [`Answerer::stream_checked`].

use std::path::PathBuf;

use anyhow::Result;

use super::answer::{evidence, generation_timings, sources_out};
use super::speeds::{Sample, Speeds};
use super::{Answer, Answerer, Event, ModelOut, On, Prepared, SoFar, SourceOut};
use crate::ask::stream::Ended;
use crate::ask::{cite, stream};
use crate::llm::{
    Decode, Generator, Prefill, Sampling, Session, StopReason, Token, LLAMA_CPP_BUILD,
};
use crate::promptcache::PromptCache;

/// A cached state is worth loading only when it covers at least this many prompt tokens.
const MIN_CACHED_PREFIX: usize = 32;

impl Answerer {
    /// Prefills `tokens`, first restoring the longest cached prefix from the persistent
    /// prompt cache and afterwards saving the prompt's state there (when `cache` is on).
    pub(super) fn prefill(
        &self,
        session: &mut Session<'_>,
        loaded: &Generator,
        tokens: &[Token],
        n_ctx: u32,
        cache: bool,
        on: On<'_>,
    ) -> Result<Prefill> {
        let cache = cache.then(|| self.prompt_cache(loaded, n_ctx)).flatten();
        let ids = crate::llm::ids(tokens);
        let restored = match &cache {
            Some(c) => restore(c, session, &ids, on)?,
            None => None,
        };
        on(Event::Prefill {
            tokens: tokens.len(),
        })?;
        let prefill = match (session.prefill(tokens), restored) {
            (Ok(p), _) => p,
            // Whatever went wrong after a restore, the cache must not break the answer: drop
            // the entry and prefill from an empty context.
            (Err(e), Some(state)) => {
                let w = format!("prompt cache entry {} dropped ({e:#})", state.display());
                on(Event::Warning(&w))?;
                if let Some(c) = &cache {
                    c.discard(&state);
                }
                session.reset();
                session.prefill(tokens)?
            }
            (Err(e), None) => return Err(e),
        };
        on(Event::Prefilled)?;
        if let Some(c) = &cache {
            // Saved before generation, so the state holds exactly the prompt.
            if let Err(e) = c.store(&ids, |p| session.save_state(p)) {
                on(Event::Warning(&format!("prompt cache not saved: {e:#}")))?;
            }
        }
        Ok(prefill)
    }

    /// The persistent prompt cache of `loaded` in a context of `n_ctx` (states are only valid
    /// for one model file, context size and llama.cpp build), unless `llm.prompt_cache_mb = 0`.
    fn prompt_cache(&self, loaded: &Generator, n_ctx: u32) -> Option<PromptCache> {
        let settings = &self.settings;
        let sha256 = loaded.local().map_or("", |(_, sha)| sha);
        // Layers on a GPU compute differently from the CPU's: a state is only valid where
        // the same layers ran on the same kind of device (CPU-only keys stay as they were).
        let offload = match loaded.local().map(|(llm, _)| llm.offload) {
            Some((on, of)) if on > 0 => format!("gpu {on}/{of}"),
            _ => String::new(),
        };
        (settings.llm.prompt_cache_mb > 0).then(|| {
            let n_ctx = n_ctx.to_string();
            let mut key = vec![sha256, &n_ctx, LLAMA_CPP_BUILD];
            if !offload.is_empty() {
                key.push(&offload);
            }
            PromptCache::new(
                &settings.index.state_dir(),
                &key,
                settings.llm.prompt_cache_mb << 20,
            )
        })
    }

    /// Generates and checks the answer to `question` on the prepared prompt.
    pub(super) fn generate(
        &self,
        question: &str,
        prep: Prepared,
        sources: Vec<SourceOut>,
        so_far: SoFar,
        cache: bool,
        on: On<'_>,
    ) -> Result<Answer> {
        let loaded = self.loaded(prep.model);
        let Some((llm, _)) = loaded.local() else {
            let (answer, _) = self.remote_checked(question, &prep, sources, so_far, on)?;
            return Ok(answer);
        };
        let (mut params, _) = self.window(loaded)?;
        let llm_s = &self.settings.llm;
        // Looked at once, for both: only where a setting leaves the count to rag.
        let busy = if llm_s.threads == 0 || llm_s.threads_batch == 0 {
            super::load::busy_now(&so_far.meter)
        } else {
            0
        };
        params.threads = super::load::fit(llm_s.threads, params.threads, busy);
        params.threads_batch = super::load::fit(llm_s.threads_batch, params.threads_batch, busy);
        // How busy the machine is while this answer measures the generator's speed.
        let meter = super::load::Meter::start();
        let tokens = llm.chat_tokens(&prep.packed.messages)?;
        let mut session = llm.session(&params)?;
        let prefill = self.prefill(&mut session, loaded, &tokens, params.n_ctx, cache, on)?;
        let mut drafter = self.drafter(llm, &params, on)?;
        let generate = |s: &_, piece: &mut dyn FnMut(&str) -> bool| {
            Ok((prefill, session.generate(s, drafter.as_draft(), piece)?))
        };
        let (mut answer, _) =
            self.stream_checked(question, &prep, sources, so_far, on, generate)?;
        answer.timings.threads = params.threads;
        self.record_speed(prep.model, &answer.timings, meter.others());
        Ok(answer)
    }

    /// Adds a one-shot local answer's figures to its generator's measured speeds, which
    /// `auto` routing reads (answers generated together in a batch decode slower each, by
    /// design, and are not recorded; nor are answers with layers on a GPU).
    fn record_speed(&self, model: usize, t: &crate::answer::Timings, others: Option<f64>) {
        let (slot, _) = &self.models[model];
        if slot.backend != crate::config::Backend::Local {
            return;
        }
        // `auto`'s budget is a rule for generators on the CPU: a GPU's figures would make a
        // later CPU-only run (`--gpu-layers 0`, the CPU build) look fast enough.
        if self
            .loaded(model)
            .local()
            .is_some_and(|(llm, _)| llm.offloads())
        {
            return;
        }
        let load_ms = super::lock(&self.load_ms[model]).take();
        let prefilled = t.prompt_tokens.saturating_sub(t.cached_tokens);
        let sample = Sample::of(
            (prefilled, t.prefill_ms),
            (t.generated_tokens, t.decode_ms),
            load_ms,
            others,
        );
        Speeds::in_dir(&self.settings.index.state_dir()).record(&slot.path, sample);
    }

    /// [`Answerer::stream_checked`] on a remote generator: the whole prompt is sent, and the
    /// server's prompt cache (llama-server's `cache_prompt`) stands in for rag's.
    pub(super) fn remote_checked(
        &self,
        question: &str,
        prep: &Prepared,
        sources: Vec<SourceOut>,
        so_far: SoFar,
        on: On<'_>,
    ) -> Result<(Answer, String)> {
        let Some(g) = self.loaded(prep.model).remote() else {
            unreachable!("remote_checked is only called for a remote generator");
        };
        let messages = &prep.packed.messages;
        // The count packing made: only shown when the server reports no usage, so no second
        // round of /apply-template and /tokenize requests for it.
        let prompt_len = prep.packed.prompt_tokens;
        let generate =
            |s: &_, piece: &mut dyn FnMut(&str) -> bool| g.generate(messages, prompt_len, s, piece);
        self.stream_checked(question, prep, sources, so_far, on, generate)
    }

    /// Streams the answer `generate` writes (on a prefilled local session, or from a server;
    /// it returns the prefill and decode figures), then checks its citations: what one-shot
    /// answers and chat turns share. Returns the checked answer and the text as generated
    /// (what a conversation keeps). A piece handler that fails with `Interrupted` stops the
    /// answer where it is (Ctrl-C in chat) and is not an error.
    pub(super) fn stream_checked(
        &self,
        question: &str,
        prep: &Prepared,
        sources: Vec<SourceOut>,
        so_far: SoFar,
        on: On<'_>,
        generate: impl FnOnce(&Sampling, &mut dyn FnMut(&str) -> bool) -> Result<(Prefill, Decode)>,
    ) -> Result<(Answer, String)> {
        let texts = prep.packed.texts();
        let mut prefill = Prefill::default();
        let (raw, decode, ended) = self.stream(&texts, on, |sampling, piece| {
            let (p, d) = generate(sampling, piece)?;
            prefill = p;
            Ok(d)
        })?;
        let answer = self.checked(
            question,
            prep,
            sources,
            &raw,
            (&prefill, &decode, ended),
            so_far,
        );
        Ok((answer, raw))
    }

    /// The answer as generated, its citations checked, with its evidence and figures.
    pub(super) fn checked(
        &self,
        question: &str,
        prep: &Prepared,
        sources: Vec<SourceOut>,
        raw: &str,
        (prefill, decode, ended): (&Prefill, &Decode, Ended),
        so_far: SoFar,
    ) -> Answer {
        let (path, sha256) = self.loaded(prep.model).identity();
        let texts = prep.packed.texts();
        let mut timings = generation_timings(so_far.timings, prefill, decode, so_far.started);
        if let Some((llm, _)) = self.loaded(prep.model).local() {
            (timings.gpu_layers, timings.layers) = llm.offload;
        }
        let mut checked = cite::check(raw.trim(), &texts);
        timings.judge_ms =
            self.judge_citations(prep.model, prep.route.model, &mut checked.citations);
        if timings.judge_ms > 0.0 {
            timings.total_ms = so_far.started.elapsed().as_secs_f64() * 1e3;
        }
        let evidence = evidence(&checked.citations, &sources, &texts);
        Answer {
            question: question.to_string(),
            answer: checked.answer.clone(),
            sources,
            citations: checked.citations.clone(),
            evidence,
            invalid_citations: checked.invalid.clone(),
            added_citations: ended.added_citations,
            uncited_sentences: checked.uncited.clone(),
            abstained: false,
            best_similarity: prep.best_similarity,
            stop: Some(decode.stop),
            dropped_text: ended.dropped,
            repeats_dropped: ended.repeats_dropped,
            timings,
            model: Some(ModelOut {
                path,
                sha256,
                route: prep.route.clone(),
            }),
        }
    }

    /// Runs `generate` (a prefilled session's, or a remote server's), passing each piece
    /// through the loop guard and the citer to `on`. Returns the text as shown (whole
    /// sentences, a repeated tail dropped), the decode figures and how the stream ended.
    fn stream(
        &self,
        texts: &[(usize, &str)],
        on: On<'_>,
        generate: impl FnOnce(&Sampling, &mut dyn FnMut(&str) -> bool) -> Result<Decode>,
    ) -> Result<(String, Decode, Ended)> {
        let settings = &self.settings;
        let mut raw = String::new();
        let mut write_err = None;
        let mut answer = stream::AnswerStream::new(texts, settings.llm.add_citations);
        let mut decode = generate(&Sampling::of(&settings.llm), &mut |piece| {
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
            let (rest, stop) = answer.end(&mut raw, decode.stop);
            decode.stop = stop;
            if write_err.is_none() && !rest.is_empty() {
                if let Err(e) = on(Event::Piece(&rest)) {
                    write_err = Some(e);
                }
            }
        }
        match write_err {
            Some(e) => Err(e.into()),
            None => Ok((raw, decode, answer.ended())),
        }
    }
}

/// Loads into `session` the cached state that shares the longest prefix with `ids`, if one
/// covers enough of it; the state file restored. A damaged entry is discarded with a warning.
fn restore(
    cache: &PromptCache,
    session: &mut Session<'_>,
    ids: &[i32],
    on: On<'_>,
) -> Result<Option<PathBuf>> {
    let Some(entry) = cache.best(ids, MIN_CACHED_PREFIX) else {
        return Ok(None);
    };
    if cache.verified(&entry) && session.load_state(&entry.state, &entry.tokens) {
        return Ok(Some(entry.state));
    }
    let w = format!(
        "ignored a damaged prompt cache entry {}",
        entry.state.display()
    );
    on(Event::Warning(&w))?;
    cache.discard(&entry.state);
    Ok(None)
}

/// Tells `on` what the budget dropped and what was packed; returns the packed sources.
pub(super) fn announce(prep: &Prepared, retrieval_ms: f64, on: On<'_>) -> Result<Vec<SourceOut>> {
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

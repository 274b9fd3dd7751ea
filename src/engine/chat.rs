//! A conversation on the engine: one generator session for the whole chat, so earlier turns
//! stay in llama.cpp's KV cache and a turn prefills only what is new (a remote generator gets
//! the whole conversation each turn; its server's prompt cache does the same). Each turn retrieves
//! for its own question (with the previous question's words when it is a follow-up), shapes
//! and packs its sources like a one-shot answer, streams, and checks citations.

use anyhow::Result;

use super::{Answer, Answerer, Event, On, Prepared};
use crate::ask::prompt::{self, Turn};
use crate::ask::{followup_query, route};
use crate::llm::Session;
use crate::retrieve::Query;

pub struct Chat<'e> {
    engine: &'e Answerer,
    model: usize,
    /// The generator every turn takes, and why.
    route: route::Route,
    /// The local generator's context (none for a remote one).
    session: Option<Session<'e>>,
    /// Prompt tokens available to a turn (the window less the answer's reserve).
    budget: usize,
    history: Vec<Turn>,
    /// Every question asked so far: a follow-up retrieves with the one before it.
    asked: Vec<String>,
}

impl<'e> Chat<'e> {
    /// One generator for the whole chat (its KV cache is the point): the one the route
    /// names, or with `auto` the best within the budget when the chat starts.
    pub fn open(engine: &'e Answerer) -> Result<Chat<'e>> {
        let chosen = super::fixed_route(&engine.settings);
        let route = route::Route {
            model: chosen.model,
            reason: format!("chat keeps one generator for every turn; {}", chosen.reason),
            note: chosen.note,
        };
        let model = engine.model(route.model)?;
        let loaded = engine.loaded(model);
        let (params, reserve) = engine.window(loaded)?;
        let session = match loaded.local() {
            Some((llm, _)) => Some(llm.session(&params)?),
            None => None,
        };
        Ok(Chat {
            engine,
            model,
            route,
            session,
            budget: params.n_ctx as usize - reserve,
            history: Vec::new(),
            asked: Vec::new(),
        })
    }

    /// Turns kept in the conversation so far.
    pub fn turns(&self) -> usize {
        self.history.len()
    }

    /// Answers one turn. `on` gets the same events as a one-shot answer; failing a piece with
    /// `ErrorKind::Interrupted` stops that answer (stop reason `cancelled`) and keeps the chat.
    pub fn turn(&mut self, base: &Query, question: &str, on: On<'_>) -> Result<Answer> {
        let engine = self.engine;
        let q = Query {
            text: followup_query(&self.asked, question),
            ..base.clone()
        };
        self.asked.push(question.to_string());
        let r = match engine.retrieve_checked(&q, question, on)? {
            Ok(r) => r,
            Err(abstention) => return Ok(abstention),
        };
        let ranked = r
            .retrieval
            .passages(Answerer::reads_fewer(self.route.model));
        let prep = self.pack(question, ranked)?;
        let sources = super::announce(&prep, r.so_far.timings.retrieval_ms, on)?;
        let loaded = engine.loaded(self.model);
        let so_far = r.so_far;
        let (answer, raw) = match (&mut self.session, loaded.local()) {
            (Some(session), Some((llm, _))) => {
                let tokens = llm.chat_tokens(&prep.packed.messages)?;
                on(Event::Prefill {
                    tokens: tokens.len(),
                })?;
                let prefill = session.prefill(&tokens)?;
                on(Event::Prefilled)?;
                let (params, _) = engine.window(loaded)?;
                let mut drafter = engine.drafter(llm, &params, on)?;
                let generate = |s: &_, piece: &mut dyn FnMut(&str) -> bool| {
                    Ok((prefill, session.generate(s, drafter.as_draft(), piece)?))
                };
                engine.stream_checked(question, &prep, sources, so_far, on, generate)?
            }
            _ => engine.remote_checked(question, &prep, sources, so_far, on)?,
        };
        let user = prep
            .packed
            .messages
            .last()
            .map(|m| m.parts.clone())
            .unwrap_or_default();
        self.history.push(Turn {
            user,
            answer: raw.trim().to_string(),
        });
        Ok(answer)
    }

    /// Packs this turn after the history, dropping the oldest turns while the history takes
    /// more than half the budget (leaving room for this turn's sources).
    fn pack(&mut self, question: &str, ranked: &[crate::retrieve::Ranked]) -> Result<Prepared> {
        let gen = self.engine.loaded(self.model);
        let style = self.engine.style();
        let overhead = |history: &[Turn]| {
            gen.chat_len(&prompt::conversation(history, &[], question, style.system))
        };
        let mut used = overhead(&self.history)?;
        while !self.history.is_empty() && used > self.budget / 2 {
            self.history.remove(0);
            used = overhead(&self.history)?;
        }
        let hits: Vec<_> = ranked.iter().map(|r| (r.hit.clone(), r.score)).collect();
        let count = |t: &str| gen.count_tokens(t);
        let packed = prompt::pack_turn(
            &self.history,
            question,
            &hits,
            self.budget,
            used,
            &count,
            style,
        );
        Ok(Prepared {
            route: self.route.clone(),
            model: self.model,
            packed,
            best_similarity: super::best_similarity(ranked),
        })
    }
}

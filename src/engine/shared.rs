//! Answers that arrive one by one on many threads (`rag serve`), generated together: each
//! request is retrieved, routed and packed on its own thread, then handed to one generation
//! thread that runs every local answer in one llama.cpp context, `llm.parallel` sequences at
//! a time (continuous batching, `llm::batch`). A request that arrives while others generate
//! starts at the next decode step instead of waiting for them to finish, so concurrent
//! clients share each step's pass over the weights (what pays where decode is bound by
//! memory, as the 1.5B's is here). Pieces stream back to the request's thread, which runs
//! them through its own loop guard and citer and checks the answer as a one-shot answer.
//!
//! One generator computes at a time (each takes every core): when a request for another
//! generator arrives, the running answers finish, no new one for theirs starts, and then
//! the other generator's turn begins, so no request waits behind an endless stream of
//! another route's.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use anyhow::{anyhow, Result};

use super::{Answer, Answerer, On, Prepared, SoFar, SourceOut};
use crate::llm::{Done, Job, Jobs, Token};

/// A prompt for the generation thread, and where its pieces go.
pub struct Request {
    model: usize,
    prompt: Vec<Token>,
    reply: mpsc::Sender<Reply>,
    /// Set by the request's thread when it wants no more pieces (a loop, a client gone).
    stop: Arc<AtomicBool>,
}

enum Reply {
    Piece(String),
    Done(Result<Done>),
}

/// The handle request threads send prompts through; the generation thread ends when it is
/// dropped.
pub struct Batcher(mpsc::Sender<Request>);

/// A handle and the receiving end [`Answerer::run_batches`] serves.
pub fn batcher() -> (Batcher, mpsc::Receiver<Request>) {
    let (tx, rx) = mpsc::channel();
    (Batcher(tx), rx)
}

/// The jobs of one generator's turn: requests in arrival order, the turn ending (no new
/// job) as soon as the next request is for another generator.
struct Turn<'r> {
    model: usize,
    incoming: &'r mpsc::Receiver<Request>,
    /// Arrived and not started, in arrival order.
    waiting: &'r mut VecDeque<Request>,
    /// Where each started job's pieces and result go.
    replies: HashMap<usize, mpsc::Sender<Reply>>,
    next_id: usize,
}

impl Turn<'_> {
    /// The next request of this turn's generator, if the turn goes on.
    fn take(&mut self, wait: bool) -> Option<Request> {
        if self.waiting.is_empty() {
            let r = if wait {
                self.incoming.recv().ok()?
            } else {
                self.incoming.try_recv().ok()?
            };
            self.waiting.push_back(r);
        }
        // Another generator's request is first in line: this turn starts nothing more.
        match self.waiting.front() {
            Some(r) if r.model == self.model => self.waiting.pop_front(),
            _ => None,
        }
    }

    /// Every job started and not finished fails with `msg` (the shared context failed).
    fn fail_all(&mut self, msg: &str) {
        for (_, reply) in self.replies.drain() {
            let _ = reply.send(Reply::Done(Err(anyhow!("{msg}"))));
        }
    }
}

impl<'a> Jobs<'a> for Turn<'_> {
    fn next(&mut self, wait: bool) -> Option<(usize, Job<'a>)> {
        let r = self.take(wait)?;
        let id = self.next_id;
        self.next_id += 1;
        let (reply, stop) = (r.reply.clone(), r.stop);
        self.replies.insert(id, r.reply);
        let on_piece = move |piece: &str| {
            !stop.load(Ordering::Relaxed) && reply.send(Reply::Piece(piece.to_string())).is_ok()
        };
        let job = Job {
            prompt: r.prompt,
            on_piece: Box::new(on_piece),
        };
        Some((id, job))
    }

    fn done(&mut self, id: usize, result: Result<Done>) {
        if let Some(reply) = self.replies.remove(&id) {
            let _ = reply.send(Reply::Done(result));
        }
    }
}

impl Answerer {
    /// The generation thread: answers the requests `incoming` brings, one generator's turn
    /// at a time, until every [`Batcher`] is dropped.
    pub fn run_batches(&self, incoming: mpsc::Receiver<Request>) {
        let mut waiting = VecDeque::new();
        loop {
            if waiting.is_empty() {
                match incoming.recv() {
                    Ok(r) => waiting.push_back(r),
                    Err(_) => return,
                }
            }
            let model = waiting.front().expect("one waits").model;
            let mut turn = Turn {
                model,
                incoming: &incoming,
                waiting: &mut waiting,
                replies: HashMap::new(),
                next_id: 0,
            };
            if let Err(e) = self.turn(&mut turn) {
                let msg = format!("{e:#}");
                turn.fail_all(&msg);
                // The requests of this generator that never started fail the same way,
                // rather than failing again one by one.
                while let Some(r) = turn.take(false) {
                    let _ = r.reply.send(Reply::Done(Err(anyhow!("{msg}"))));
                }
            }
        }
    }

    /// One generator's turn: its context, and the batch loop over the turn's requests.
    fn turn(&self, turn: &mut Turn<'_>) -> Result<()> {
        let loaded = self.loaded(turn.model);
        let Some((llm, _)) = loaded.local() else {
            unreachable!("only local generators' prompts are batched");
        };
        let (params, _) = self.window(loaded)?;
        let sampling = crate::llm::Sampling::of(&self.settings.llm);
        llm.generate_jobs(&params, self.settings.llm.parallel, &sampling, turn)
    }

    /// Generates the answer to `question` on the shared generation thread and checks it;
    /// `prep` is routed to a local generator.
    pub(super) fn generate_batched(
        &self,
        batcher: &Batcher,
        question: &str,
        prep: Prepared,
        sources: Vec<SourceOut>,
        so_far: SoFar,
        on: On<'_>,
    ) -> Result<Answer> {
        let (llm, _) = self.loaded(prep.model).local().expect("a local generator");
        let (reply, replies) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let request = Request {
            model: prep.model,
            prompt: llm.chat_tokens(&prep.packed.messages)?,
            reply,
            stop: stop.clone(),
        };
        batcher
            .0
            .send(request)
            .map_err(|_| anyhow!("the server's generation thread has stopped"))?;
        let generate = |_: &_, piece: &mut dyn FnMut(&str) -> bool| {
            for r in &replies {
                match r {
                    // Pieces sent before the generation thread saw `stop` are dropped.
                    Reply::Piece(p) if !stop.load(Ordering::Relaxed) => {
                        if !piece(&p) {
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                    Reply::Piece(_) => {}
                    Reply::Done(d) => return d.map(|d| (d.prefill, d.decode)),
                }
            }
            Err(anyhow!(
                "the server's generation thread stopped before the answer ended"
            ))
        };
        let (answer, _) = self.stream_checked(question, &prep, sources, so_far, on, generate)?;
        Ok(answer)
    }
}

//! Many questions at once (`rag ask --batch`): each is retrieved, routed and packed as a
//! one-shot answer, then every question routed to the same generator is generated in one
//! llama.cpp context, `llm.parallel` sequences at a time (see `llm::batch`), each through
//! its own loop guard and citer. Answers are checked exactly as one-shot answers are. A
//! remote generator gets up to `llm.parallel` requests at once instead: its server batches.

use anyhow::{anyhow, Result};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::{sources_out, Answer, Answerer, On, Prepared, SoFar, SourceOut};
use crate::ask::stream::AnswerStream;
use crate::llm::{Job, Llm};
use crate::retrieve::Query;

/// A question ready to generate.
struct Ready {
    i: usize,
    prep: Prepared,
    sources: Vec<SourceOut>,
    so_far: SoFar,
}

/// One job per question whose prompt tokenizes, each streaming into its own state; the
/// questions asked (indexes into `group`). A question whose prompt cannot be tokenized fails
/// alone, in `answers`.
fn batch_jobs<'s>(
    llm: &Llm,
    group: &[&Ready],
    states: &'s mut [(AnswerStream, String)],
    answers: &mut [Option<Result<Answer>>],
) -> (Vec<Job<'s>>, Vec<usize>) {
    let mut jobs = Vec::new();
    let mut asked = Vec::new();
    for (k, (r, state)) in group.iter().zip(states.iter_mut()).enumerate() {
        let prompt = match llm.chat_tokens(&r.prep.packed.messages) {
            Ok(p) => p,
            Err(e) => {
                answers[k] = Some(Err(e));
                continue;
            }
        };
        asked.push(k);
        jobs.push(Job {
            prompt,
            on_piece: Box::new(move |piece: &str| match state.0.push(piece) {
                Some(p) => {
                    state.1.push_str(&p);
                    true
                }
                None => false,
            }),
        });
    }
    (jobs, asked)
}

impl Answerer {
    /// Answers every query (in their order); a question that fails does not stop the rest.
    /// `on` gets each question's retrieval events (`-v`); the answers come back whole.
    pub fn answer_many(&self, qs: &[Query], on: On<'_>) -> Vec<Result<Answer>> {
        let mut out: Vec<Option<Result<Answer>>> = qs.iter().map(|_| None).collect();
        let mut ready = Vec::new();
        for (i, q) in qs.iter().enumerate() {
            match self.ready(i, q, on) {
                Ok(Ok(r)) => ready.push(r),
                Ok(Err(a)) => out[i] = Some(Ok(a)),
                Err(e) => out[i] = Some(Err(e)),
            }
        }
        for model in 0..crate::config::Tier::ALL.len() {
            let group: Vec<&Ready> = ready.iter().filter(|r| r.prep.model == model).collect();
            if group.is_empty() {
                continue;
            }
            match self.generate_group(qs, &group) {
                Ok(answers) => {
                    for (r, a) in group.iter().zip(answers) {
                        out[r.i] = Some(a);
                    }
                }
                Err(e) => {
                    let msg = format!("{e:#}");
                    for r in &group {
                        out[r.i] = Some(Err(anyhow!("{msg}")));
                    }
                }
            }
        }
        out.into_iter()
            .map(|a| a.unwrap_or_else(|| Err(anyhow!("not answered"))))
            .collect()
    }

    /// Retrieves, checks abstention and packs question `i`: ready, or already answered.
    fn ready(&self, i: usize, q: &Query, on: On<'_>) -> Result<Result<Ready, Answer>> {
        let r = match self.retrieve_checked(q, &q.text, on)? {
            Ok(r) => r,
            Err(abstention) => return Ok(Err(abstention)),
        };
        let prep = self.prepare(&q.text, &r.retrieval)?;
        Ok(Ok(Ready {
            i,
            sources: sources_out(&prep.packed),
            prep,
            so_far: r.so_far,
        }))
    }

    /// Generates the answers of `group` (all on one generator) together.
    fn generate_group(&self, qs: &[Query], group: &[&Ready]) -> Result<Vec<Result<Answer>>> {
        let loaded = self.loaded(group[0].prep.model);
        let Some((llm, _)) = loaded.local() else {
            return Ok(self.remote_group(qs, group));
        };
        let (params, _) = self.window(loaded)?;
        let texts: Vec<_> = group.iter().map(|r| r.prep.packed.texts()).collect();
        let add = self.settings.llm.add_citations;
        let mut states: Vec<(AnswerStream, String)> = texts
            .iter()
            .map(|t| (AnswerStream::new(t, add), String::new()))
            .collect();
        let mut answers: Vec<Option<Result<Answer>>> = group.iter().map(|_| None).collect();
        let (jobs, asked) = batch_jobs(llm, group, &mut states, &mut answers);
        let parallel = self.settings.llm.parallel;
        let done = llm.generate_many(
            &params,
            parallel,
            &crate::llm::Sampling::of(&self.settings.llm),
            jobs,
        )?;
        let mut states: Vec<Option<(AnswerStream, String)>> =
            states.into_iter().map(Some).collect();
        for (k, d) in asked.into_iter().zip(done) {
            let r = group[k];
            let (mut stream, mut raw) = states[k].take().expect("one state per question");
            answers[k] = Some(d.map(|d| {
                let mut decode = d.decode;
                decode.stop = stream.end(&mut raw, decode.stop).1;
                self.checked(
                    &qs[r.i].text,
                    &r.prep,
                    r.sources.clone(),
                    &raw,
                    (&d.prefill, &decode, stream.ended()),
                    r.so_far.clone(),
                )
            }));
        }
        let answers = answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(anyhow!("not answered"))))
            .collect();
        Ok(answers)
    }

    /// A remote generator's answers: `llm.parallel` requests in flight, each answer checked
    /// as a one-shot answer; a failed request fails only its own question.
    fn remote_group(&self, qs: &[Query], group: &[&Ready]) -> Vec<Result<Answer>> {
        let next = AtomicUsize::new(0);
        let done: Vec<Mutex<Option<Result<Answer>>>> =
            group.iter().map(|_| Mutex::new(None)).collect();
        let workers = self.settings.llm.parallel.clamp(1, group.len());
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(r) = group.get(k) else { break };
                    let answer = self
                        .remote_checked(
                            &qs[r.i].text,
                            &r.prep,
                            r.sources.clone(),
                            r.so_far.clone(),
                            &mut |_| Ok(()),
                        )
                        .map(|(a, _)| a);
                    *done[k].lock().unwrap_or_else(|p| p.into_inner()) = Some(answer);
                });
            }
        });
        done.into_iter()
            .map(|m| {
                let answer = m.into_inner().unwrap_or_else(|p| p.into_inner());
                answer.unwrap_or_else(|| Err(anyhow!("not answered")))
            })
            .collect()
    }
}

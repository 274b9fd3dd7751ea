//! `rag bench llm` (hidden): rag's own prefill and decode loops on synthetic tokens, shaped
//! like llama.cpp's `llama-bench` (`-p N -n M`), so `make bench` can put the two side by side
//! with the same model, threads and lengths.

use std::time::Instant;

use anyhow::Result;
use serde::Serialize;

use crate::config::{threads, Settings};
use crate::exit::Exit;
use crate::llm::{ContextParams, Llm, Sampling};
use crate::ui::Ui;

#[derive(Debug, Serialize)]
struct Run {
    prefill_tok_per_s: f64,
    decode_tok_per_s: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

pub fn llm(settings: &Settings, n_prompt: usize, n_gen: u32, reps: usize, ui: &Ui) -> Result<Exit> {
    // `--model medium|large` names a route: bench the file it answers with (`auto`: the one
    // it picks within the budget), not `llm.model` whatever the route.
    let tier = crate::engine::fixed_route(settings).model;
    let path = settings.generator(tier).1;
    let llm = Llm::load_on(path, false, settings.gpu_layers(tier))?;
    let t = threads(settings.llm.threads);
    let params = ContextParams {
        n_ctx: (n_prompt + n_gen as usize + 16) as u32,
        n_batch: settings.llm.n_batch,
        threads: t,
        threads_batch: threads(settings.llm.threads_batch),
    };
    let prompt = llm.synthetic_prompt(n_prompt);
    let sampling = Sampling {
        ignore_eog: true,
        ..Sampling::greedy(n_gen)
    };
    let mut runs = Vec::new();
    // One warm-up, as llama-bench does.
    // As llama-bench: prefill from an empty context, and decode from an (almost) empty one.
    for rep in 0..=reps {
        let mut s = llm.session(&params)?;
        let start = Instant::now();
        s.prefill(&prompt)?;
        let prefill = n_prompt as f64 / start.elapsed().as_secs_f64();
        let mut s = llm.session(&params)?;
        s.prefill(&prompt[..1])?;
        let d = s.generate(&sampling, None, |_| true)?;
        let decode = d.tokens as f64 * 1e3 / d.ms.max(1e-9);
        if rep > 0 {
            runs.push(Run {
                prefill_tok_per_s: prefill,
                decode_tok_per_s: decode,
            });
        }
    }
    ui.json(&serde_json::json!({
        "model": path,
        "threads": t,
        "threads_batch": params.threads_batch,
        "gpu_layers": llm.offload.0,
        "layers": llm.offload.1,
        "n_prompt": n_prompt,
        "n_gen": n_gen,
        "prefill_tok_per_s": median(runs.iter().map(|r| r.prefill_tok_per_s).collect()),
        "decode_tok_per_s": median(runs.iter().map(|r| r.decode_tok_per_s).collect()),
        "runs": runs,
    }))?;
    Ok(Exit::Success)
}

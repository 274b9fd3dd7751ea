//! `rag bench-llm` (hidden): rag's own prefill and decode loops on synthetic tokens, shaped
//! like llama.cpp's `llama-bench` (`-p N -n M`), so `make bench` can put the two side by side
//! with the same model, threads and lengths.

use std::time::Instant;

use anyhow::Result;
use llama_cpp_2::token::LlamaToken;
use serde::Serialize;

use crate::config::{threads, Settings};
use crate::llm::{ContextParams, Llm, Sampling};
use crate::ui::Ui;
use crate::Exit;

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
    let llm = Llm::load(&settings.llm.model, false)?;
    let t = threads(settings.llm.threads);
    let params = ContextParams {
        n_ctx: (n_prompt + n_gen as usize + 16) as u32,
        n_batch: settings.llm.n_batch,
        threads: t,
        threads_batch: threads(settings.llm.threads_batch),
    };
    // Deterministic spread of token ids, like llama-bench's random prompt.
    let n_vocab = llm.n_vocab().max(2) as u64;
    let prompt: Vec<LlamaToken> = (0..n_prompt as u64)
        .map(|i| LlamaToken::new(((i * 7919 + 13) % (n_vocab - 1) + 1) as i32))
        .collect();
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
        let d = s.generate(&sampling, |_| true)?;
        let decode = d.tokens as f64 * 1e3 / d.ms.max(1e-9);
        if rep > 0 {
            runs.push(Run {
                prefill_tok_per_s: prefill,
                decode_tok_per_s: decode,
            });
        }
    }
    ui.json(&serde_json::json!({
        "model": settings.llm.model,
        "threads": t,
        "n_prompt": n_prompt,
        "n_gen": n_gen,
        "prefill_tok_per_s": median(runs.iter().map(|r| r.prefill_tok_per_s).collect()),
        "decode_tok_per_s": median(runs.iter().map(|r| r.decode_tok_per_s).collect()),
        "runs": runs,
    }))?;
    Ok(Exit::Success)
}

//! `rag bench-llm` (hidden): rag's own prefill and decode loops on synthetic tokens, shaped
//! like llama.cpp's `llama-bench` (`-p N -n M`), so `make bench` can put the two side by side
//! with the same model, threads and lengths.

use std::time::Instant;

use anyhow::Result;
use llama_cpp_2::token::LlamaToken;
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
    let llm = Llm::load(path, false)?;
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
        "n_prompt": n_prompt,
        "n_gen": n_gen,
        "prefill_tok_per_s": median(runs.iter().map(|r| r.prefill_tok_per_s).collect()),
        "decode_tok_per_s": median(runs.iter().map(|r| r.decode_tok_per_s).collect()),
        "runs": runs,
    }))?;
    Ok(Exit::Success)
}

/// `rag bench-store` (hidden): fills the configured index with `n` synthetic chunks (random
/// unit vectors, text drawn from a fixed vocabulary) so search latency can be measured at a
/// scale no test corpus reaches. Writes in commits of 10,000 rows.
pub fn store(settings: &Settings, n: usize, ui: &Ui) -> Result<Exit> {
    use crate::embed::Embedder;
    use crate::store::{IndexMeta, Store};
    let embedder = Embedder::load(&settings.embed)?;
    let dim = embedder.info.dim;
    let meta = IndexMeta::new(
        embedder.info.clone(),
        crate::ingest::chunk_meta(&settings.chunk),
        settings.root.clone(),
    );
    let loc = crate::store::Location::of(&settings.index)?;
    let store = Store::open_or_create(&loc, meta)?;
    // xorshift: deterministic and dependency-free.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let started = Instant::now();
    for start in (0..n).step_by(10_000) {
        let end = (start + 10_000).min(n);
        write_batch(&store, &mut next, dim, start, end)?;
        ui.info(&format!("{end} / {n} chunks"));
    }
    store.refresh_text_index()?;
    ui.json(
        &serde_json::json!({ "chunks": n, "elapsed_ms": started.elapsed().as_millis() as u64 }),
    )?;
    Ok(Exit::Success)
}

/// One commit of `rag bench-store`: chunks `start..end` with random text and unit vectors
/// drawn from `next`, 100 chunks to a synthetic file, so each commit stays a bounded write.
fn write_batch(
    store: &crate::store::Store,
    next: &mut impl FnMut() -> u64,
    dim: usize,
    start: usize,
    end: usize,
) -> Result<()> {
    use crate::store::{FileState, Row};
    const WORDS: &[&str] = &[
        "cache", "token", "prefill", "decode", "vector", "index", "model", "batch", "memory",
        "thread", "quant", "layer", "query", "score", "rank", "chunk", "embed", "prompt", "sample",
        "latency", "router", "expert", "window", "budget", "kernel", "tensor", "weight", "stream",
        "search", "fusion",
    ];
    let per_file = 100;
    let mut texts = Vec::with_capacity(end - start);
    let mut vectors = Vec::with_capacity(end - start);
    let mut ids = Vec::with_capacity(end - start);
    let mut paths = Vec::with_capacity(end - start);
    for i in start..end {
        let words: Vec<&str> = (0..60)
            .map(|_| WORDS[(next() % WORDS.len() as u64) as usize])
            .collect();
        texts.push(words.join(" "));
        let mut v: Vec<f32> = (0..dim)
            .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0)
            .collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
        v.iter_mut().for_each(|x| *x /= norm);
        vectors.push(v);
        ids.push(format!("synthetic-{i}"));
        paths.push(format!("synthetic/file-{}.md", i / per_file));
    }
    let rows: Vec<Row> = (0..texts.len())
        .map(|j| Row {
            id: &ids[j],
            path: &paths[j],
            heading: "",
            line_start: 1,
            line_end: 1,
            text: &texts[j],
            file_hash: "synthetic",
            vector: &vectors[j],
        })
        .collect();
    let mut files: Vec<FileState> = paths
        .iter()
        .map(|p| FileState {
            path: p.clone(),
            hash: "synthetic".into(),
            size: 0,
            mtime_ns: 0,
            chunks: per_file as u32,
        })
        .collect();
    files.dedup_by(|a, b| a.path == b.path);
    store.replace_files(&files, &[], &rows)
}

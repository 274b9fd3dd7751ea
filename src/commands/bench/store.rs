//! `rag bench store` (hidden): fills the configured index with synthetic chunks, so search
//! latency can be measured at a scale no test corpus reaches.

use std::time::Instant;

use anyhow::Result;

use crate::config::Settings;
use crate::exit::Exit;
use crate::ui::Ui;

/// Fills the configured index with `n` synthetic chunks (random
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

/// One commit of `rag bench store`: chunks `start..end` with random text and unit vectors
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

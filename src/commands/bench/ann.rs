//! `rag bench ann` (hidden): the ANN vector index against the exact scan, on a table of
//! synthetic vectors shaped like text embeddings: unit vectors in clusters (topics) that lie
//! near each other in groups (subjects), so nearest neighbours are meaningful, unlike uniform
//! random vectors, on which every ANN index looks bad and every exact scan looks typical.
//! For each index type it reports the build time, and for each (nprobes, refine factor) the
//! search latency p50/p95 and recall@10 against the exact top 10 of the same queries.

use std::time::Instant;

use anyhow::{bail, Result};
use serde::Serialize;

use crate::cli::BenchAnnArgs;
use crate::config::{AnnType, Settings};
use crate::exit::Exit;
use crate::store::{FileState, IndexMeta, Location, Row, Store, VectorSearch};
use crate::ui::Ui;

/// Deterministic normal samples (xorshift + Box-Muller): the same table on every machine.
struct Gauss(u64);

impl Gauss {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    fn normal(&mut self) -> f32 {
        let (u, v) = (self.uniform(), self.uniform());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }

    /// `center` plus noise of norm about `spread`, scaled to unit length.
    fn near(&mut self, center: &[f32], spread: f32) -> Vec<f32> {
        let s = spread / (center.len() as f32).sqrt();
        let mut v: Vec<f32> = center.iter().map(|c| c + s * self.normal()).collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-9);
        v.iter_mut().for_each(|x| *x /= n);
        v
    }
}

/// Vectors of `dim` dimensions: 1 subject per 20 topics, 1 topic per 100 chunks; a chunk's
/// cosine to its topic's centre is about 0.8, like passages of one page under MiniLM.
struct Corpus {
    topics: Vec<Vec<f32>>,
    rng: Gauss,
}

impl Corpus {
    fn new(dim: usize, chunks: usize) -> Corpus {
        let mut rng = Gauss(0x9e37_79b9_7f4a_7c15);
        let zero = vec![0.0; dim];
        let n_topics = (chunks / 100).max(1);
        let subjects: Vec<Vec<f32>> = (0..n_topics.div_ceil(20))
            .map(|_| rng.near(&zero, 1.0))
            .collect();
        let topics = (0..n_topics)
            .map(|t| rng.near(&subjects[t / 20], 0.9))
            .collect();
        Corpus { topics, rng }
    }

    fn sample(&mut self, i: usize) -> Vec<f32> {
        let t = i % self.topics.len();
        let topic = self.topics[t].clone();
        self.rng.near(&topic, 0.75)
    }
}

#[derive(Serialize)]
struct Measure {
    kind: String,
    nprobes: usize,
    refine_factor: u32,
    p50_ms: f64,
    p95_ms: f64,
    recall_at_10: f64,
}

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(((v.len() as f64 - 1.0) * p).round() as usize)
        .copied()
        .unwrap_or(0.0)
}

pub fn run(settings: &Settings, a: &BenchAnnArgs, ui: &Ui) -> Result<Exit> {
    let loc = Location::of(&settings.index)?;
    let dim = 384;
    let mut corpus = Corpus::new(dim, a.chunks);
    let mut store = fill(&loc, settings, a.chunks, &mut corpus, ui)?;
    let queries: Vec<Vec<f32>> = (0..a.queries).map(|i| corpus.sample(i * 7 + 3)).collect();

    store.set_search(VectorSearch {
        exact: true,
        ..VectorSearch::default()
    });
    let (exact_ms, truth) = timed(&store, &queries)?;
    let mut out = vec![Measure {
        kind: "exact".into(),
        nprobes: 0,
        refine_factor: 0,
        p50_ms: percentile(&exact_ms, 0.5),
        p95_ms: percentile(&exact_ms, 0.95),
        recall_at_10: 1.0,
    }];
    let mut builds = Vec::new();
    for &kind in &a.kinds {
        let t = Instant::now();
        store.rebuild_ann(kind)?;
        let build_s = t.elapsed().as_secs_f64();
        ui.info(&format!("{kind:?} index built in {build_s:.1} s"));
        builds.push(serde_json::json!({ "kind": format!("{kind:?}"), "build_s": build_s }));
        for &nprobes in &a.nprobes {
            for &refine_factor in &a.refine {
                let search = VectorSearch {
                    exact: false,
                    nprobes,
                    refine_factor,
                };
                out.push(measure(&mut store, kind, search, &queries, &truth)?);
            }
        }
    }
    ui.json(&serde_json::json!({
        "chunks": a.chunks,
        "queries": a.queries,
        "builds": builds,
        "results": out,
    }))?;
    Ok(Exit::Success)
}

/// Latency of each query in ms and the ids it found, under the store's current search
/// settings: the same queries timed the same way for the exact scan and every ANN setting.
fn timed(store: &Store, queries: &[Vec<f32>]) -> Result<(Vec<f64>, Vec<Vec<String>>)> {
    let (mut ms, mut ids) = (Vec::new(), Vec::new());
    for q in queries {
        let t = Instant::now();
        let hits = store.vector_search(q, 10, None)?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        ids.push(hits.into_iter().map(|h| h.id).collect());
    }
    Ok((ms, ids))
}

/// One row of the report: the ANN index of `kind` searched with `search`, its recall judged
/// against the exact scan's ids in `truth`.
fn measure(
    store: &mut Store,
    kind: AnnType,
    search: VectorSearch,
    queries: &[Vec<f32>],
    truth: &[Vec<String>],
) -> Result<Measure> {
    store.set_search(search);
    let (ms, ids) = timed(store, queries)?;
    let found: usize = ids
        .iter()
        .zip(truth)
        .map(|(got, want)| got.iter().filter(|id| want.contains(id)).count())
        .sum();
    let total: usize = truth.iter().map(Vec::len).sum();
    Ok(Measure {
        kind: format!("{kind:?}"),
        nprobes: search.nprobes,
        refine_factor: search.refine_factor,
        p50_ms: percentile(&ms, 0.5),
        p95_ms: percentile(&ms, 0.95),
        recall_at_10: found as f64 / total.max(1) as f64,
    })
}

/// The table of `chunks` synthetic vectors at `loc`: written in commits of 10,000 rows, or
/// reused when a previous run left exactly that many.
fn fill(
    loc: &Location,
    settings: &Settings,
    chunks: usize,
    corpus: &mut Corpus,
    ui: &Ui,
) -> Result<Store> {
    let info = crate::embed::ModelInfo::synthetic(384);
    let meta = IndexMeta::new(
        info,
        crate::ingest::chunk_meta(&settings.chunk),
        settings.root.clone(),
    );
    let store = Store::open_or_create(loc, meta)?;
    let have = store.stats()?.chunks;
    if have == chunks {
        ui.info(&format!(
            "reusing the {chunks} vectors at {}",
            loc.display()
        ));
        // Same seed: the queries drawn next are the ones of the run that wrote the table.
        (0..chunks).for_each(|i| drop(corpus.sample(i)));
        return Ok(store);
    }
    if have != 0 {
        bail!(
            "{} holds {have} chunks, not {chunks}: give `rag bench ann` an empty --index folder",
            loc.display()
        );
    }
    let started = Instant::now();
    for start in (0..chunks).step_by(10_000) {
        let end = (start + 10_000).min(chunks);
        write_batch(&store, corpus, start, end)?;
        ui.info(&format!("{end} / {chunks} vectors"));
    }
    ui.info(&format!(
        "wrote {chunks} vectors in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(store)
}

/// One commit of the table: vectors `start..end`, recorded as one synthetic file so each
/// commit stays a bounded write.
fn write_batch(store: &Store, corpus: &mut Corpus, start: usize, end: usize) -> Result<()> {
    let vectors: Vec<Vec<f32>> = (start..end).map(|i| corpus.sample(i)).collect();
    let ids: Vec<String> = (start..end).map(|i| format!("v{i}")).collect();
    let path = format!("synthetic/{}.md", start / 10_000);
    let rows: Vec<Row> = (0..vectors.len())
        .map(|j| Row {
            id: &ids[j],
            path: &path,
            heading: "",
            line_start: 1,
            line_end: 1,
            text: "",
            file_hash: "synthetic",
            vector: &vectors[j],
        })
        .collect();
    let file = FileState {
        path: path.clone(),
        hash: "synthetic".into(),
        size: 0,
        mtime_ns: 0,
        chunks: rows.len() as u32,
    };
    store.replace_files(&[file], &[], &rows)
}

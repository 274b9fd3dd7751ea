//! Retrieval policy: run the vector and full-text retrievers, fuse their rankings with
//! reciprocal rank fusion, merge overlapping chunks of one file, break ties stably.
//! The fusion and merging are pure functions with their own tests.

use std::collections::HashMap;

use anyhow::Result;
use serde::Serialize;

use crate::config::Mode;
use crate::store::{Hit, Store};

mod retriever;
pub use retriever::{Help, Helped, Query, Rescore, Retrieval, Retriever};

#[derive(Debug, Clone, Copy)]
pub struct Fusion {
    pub k: f32,
    pub vector_weight: f32,
    pub text_weight: f32,
    /// Share of the other same-file candidates' fused scores added to a chunk's score.
    pub file_weight: f32,
    /// Candidates asked of each retriever.
    pub candidates: usize,
    /// Best spans widened with their neighbouring chunks.
    pub neighbors: usize,
    /// Share of its kind's weight each list of a generator's expansion gets.
    pub expand_weight: f32,
}

/// A fused result: the chunk, its fused score, and what each retriever said of it.
#[derive(Debug, Clone, Serialize)]
pub struct Ranked {
    #[serde(skip)]
    pub hit: Hit,
    pub score: f32,
    /// Cosine similarity, when the vector retriever found it.
    pub vector_score: Option<f32>,
    /// BM25, when the text retriever found it.
    pub text_score: Option<f32>,
    pub vector_rank: Option<usize>,
    pub text_rank: Option<usize>,
    /// The cross-encoder's score, when a reranker re-ordered the candidates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rerank_score: Option<f32>,
}

/// Reciprocal rank fusion: score = Σ weight / (k + rank), ranks from 1. Ties break on the
/// better single rank, then on chunk id, so equal inputs always give equal outputs.
#[cfg(test)]
pub fn fuse(vector: &[Hit], text: &[Hit], f: Fusion) -> Vec<Ranked> {
    fuse_all(&[vector], &[text], f)
}

/// [`fuse`] over several vector and full-text rankings: the question's own first, then those
/// of what a generator wrote for it (`retrieval.expand`), each list at its kind's weight.
/// Scores and ranks shown to people (`-v`, abstention, routing) are the question's own.
pub fn fuse_all(vectors: &[&[Hit]], texts: &[&[Hit]], f: Fusion) -> Vec<Ranked> {
    let mut by_id: HashMap<&str, Ranked> = HashMap::new();
    let lists = (vectors
        .iter()
        .enumerate()
        .map(|(n, l)| (*l, f.vector_weight, true, n == 0)))
    .chain(
        texts
            .iter()
            .enumerate()
            .map(|(n, l)| (*l, f.text_weight, false, n == 0)),
    );
    for (list, weight, is_vector, own) in lists {
        let weight = if own {
            weight
        } else {
            weight * f.expand_weight
        };
        for (i, hit) in list.iter().enumerate() {
            let rank = i + 1;
            let r = by_id.entry(hit.id.as_str()).or_insert_with(|| Ranked {
                hit: hit.clone(),
                score: 0.0,
                vector_score: None,
                text_score: None,
                vector_rank: None,
                text_rank: None,
                rerank_score: None,
            });
            r.score += weight / (f.k + rank as f32);
            if !own {
                continue;
            }
            if is_vector {
                r.vector_score = Some(hit.score);
                r.vector_rank = Some(rank);
            } else {
                r.text_score = Some(hit.score);
                r.text_rank = Some(rank);
            }
        }
    }
    let mut out: Vec<Ranked> = by_id.into_values().collect();
    add_file_signal(&mut out, f.file_weight);
    let best = |r: &Ranked| {
        r.vector_rank
            .unwrap_or(usize::MAX)
            .min(r.text_rank.unwrap_or(usize::MAX))
    };
    out.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| best(a).cmp(&best(b)))
            .then_with(|| a.hit.id.cmp(&b.hit.id))
    });
    out
}

/// The document-level signal (`retrieval.file_weight`): each span gains this share of the
/// fused score of the best other span of its file.
fn add_file_signal(out: &mut [Ranked], file_weight: f32) {
    if file_weight <= 0.0 {
        return;
    }
    // The best two scores of each file: a chunk gains from the best *other* chunk of its
    // file. (A sum over all of them was tried first: long pages with many mediocre
    // chunks then won every question.)
    let mut top2: HashMap<String, (f32, f32)> = HashMap::new();
    for r in out.iter() {
        let t = top2.entry(r.hit.path.clone()).or_insert((0.0, 0.0));
        if r.score > t.0 {
            *t = (r.score, t.0);
        } else if r.score > t.1 {
            t.1 = r.score;
        }
    }
    for r in out.iter_mut() {
        let (first, second) = top2[&r.hit.path];
        let other = if r.score >= first { second } else { first };
        r.score += file_weight * other;
    }
}

/// What a reranker reads of a span: its heading path and text, as the embedder did.
pub fn rerank_text(hit: &Hit) -> String {
    if hit.heading.is_empty() {
        hit.text.clone()
    } else {
        format!("{}\n\n{}", hit.heading, hit.text)
    }
}

/// Orders spans by the reranker's `scores` (one per span, in order, for the first
/// `scores.len()` of them); equal scores keep the fused order, so the result is
/// deterministic, and spans past the scored ones (a reranker out of time) follow them in
/// fused order.
pub fn reorder(mut ranked: Vec<Ranked>, scores: &[f32]) -> Vec<Ranked> {
    let rest = ranked.split_off(scores.len().min(ranked.len()));
    let mut out: Vec<Ranked> = ranked
        .into_iter()
        .zip(scores)
        .map(|(mut r, &s)| {
            r.rerank_score = Some(s);
            r
        })
        .collect();
    // A stable sort: ties stay in fused order.
    out.sort_by(|a, b| {
        b.rerank_score
            .unwrap_or(f32::MIN)
            .total_cmp(&a.rerank_score.unwrap_or(f32::MIN))
    });
    out.extend(rest);
    out
}

/// Orders the first `scores.len()` spans by the sum of their fused rank and their rank by
/// `scores` (higher first), ties in fused order, the rest after them in fused order: a
/// generator's judgement moves a span, it does not replace fusion (ordering by the 0.5B's
/// P(yes) alone halved hit@1 on Bash dev, docs/quality.md).
pub fn blend(mut ranked: Vec<Ranked>, scores: &[f32]) -> Vec<Ranked> {
    let rest = ranked.split_off(scores.len().min(ranked.len()));
    let mut by_score: Vec<usize> = (0..ranked.len()).collect();
    by_score.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let mut rank = vec![0; ranked.len()];
    for (r, &i) in by_score.iter().enumerate() {
        rank[i] = r;
    }
    let mut out: Vec<(usize, Ranked)> = ranked
        .into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            r.rerank_score = Some(scores[i]);
            (i + rank[i], r)
        })
        .collect();
    out.sort_by_key(|(sum, _)| *sum);
    out.into_iter().map(|(_, r)| r).chain(rest).collect()
}

/// Merges results that overlap or touch in one file into one span (kept at the better
/// result's rank), so the prompt never holds the same lines twice.
pub fn merge_adjacent(ranked: Vec<Ranked>) -> Vec<Ranked> {
    let mut out: Vec<Ranked> = Vec::with_capacity(ranked.len());
    for r in ranked {
        let target = out.iter_mut().find(|o| {
            o.hit.path == r.hit.path
                && r.hit.line_start <= o.hit.line_end + 1
                && o.hit.line_start <= r.hit.line_end + 1
        });
        match target {
            None => out.push(r),
            Some(o) => {
                let (first, second) = if r.hit.line_start < o.hit.line_start {
                    (&r.hit, &o.hit)
                } else {
                    (&o.hit, &r.hit)
                };
                let text = join_overlapping(&first.text, &second.text);
                let heading = first.heading.clone();
                let lines = (
                    first.line_start.min(second.line_start),
                    first.line_end.max(second.line_end),
                );
                (o.hit.line_start, o.hit.line_end) = lines;
                o.hit.text = text;
                o.hit.heading = heading;
                o.vector_score = max_opt(o.vector_score, r.vector_score);
                o.text_score = max_opt(o.text_score, r.text_score);
            }
        }
    }
    out
}

fn max_opt(a: Option<f32>, b: Option<f32>) -> Option<f32> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// `a` then `b`, without repeating the lines `b` shares with `a`'s end (chunk overlap).
fn join_overlapping(a: &str, b: &str) -> String {
    let a_lines: Vec<&str> = a.lines().collect();
    let b_lines: Vec<&str> = b.lines().collect();
    let max = a_lines.len().min(b_lines.len());
    let shared = (1..=max)
        .rev()
        .find(|&n| a_lines[a_lines.len() - n..] == b_lines[..n])
        .unwrap_or(0);
    if shared == 0 {
        if b.contains(a) {
            return b.to_string();
        }
        if a.contains(b) {
            return a.to_string();
        }
        return format!("{a}\n\n{b}");
    }
    let mut out = a_lines.join("\n");
    for l in &b_lines[shared..] {
        out.push('\n');
        out.push_str(l);
    }
    out
}

/// A SQL filter from `--path GLOB` and `--where SQL`. In the glob, `*` and `**` match any
/// characters (folders included) and `?` one character.
pub fn filter(path_glob: Option<&str>, where_sql: Option<&str>) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(g) = path_glob {
        let mut like = String::new();
        let mut chars = g.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '*' => {
                    while chars.peek() == Some(&'*') {
                        chars.next();
                    }
                    like.push('%');
                }
                '?' => like.push('_'),
                '%' | '_' | '\\' => {
                    like.push('\\');
                    like.push(c);
                }
                '\'' => like.push_str("''"),
                c => like.push(c),
            }
        }
        parts.push(format!(r"path LIKE '{like}'"));
    }
    if let Some(w) = where_sql.map(str::trim).filter(|w| !w.is_empty()) {
        parts.push(format!("({w})"));
    }
    (!parts.is_empty()).then(|| parts.join(" AND "))
}

/// `scope` narrowed by `more`: both must hold. A request's `path` narrows the scope the
/// operator started a server or batch with (`--path`, `--where`); it never replaces it.
pub fn narrow(scope: Option<&str>, more: Option<String>) -> Option<String> {
    match (scope, more) {
        (Some(s), Some(m)) => Some(format!("({s}) AND ({m})")),
        (Some(s), None) => Some(s.to_string()),
        (None, m) => m,
    }
}

/// What one retrieval searches with: the query's words and vector, then what a generator
/// wrote for it (`retrieval.expand`): more vectors searched beside the query's, more texts
/// searched by full text beside its words.
#[derive(Debug, Clone, Copy)]
pub struct Searched<'a> {
    pub text: &'a str,
    pub vector: Option<&'a [f32]>,
    pub more_vectors: &'a [Vec<f32>],
    pub more_texts: &'a [String],
}

/// Retrieves up to `k` spans for `s`. Each retriever is asked for more than `k`, since
/// fusion and merging need candidates from every list.
pub fn retrieve(
    store: &Store,
    s: Searched<'_>,
    mode: Mode,
    k: usize,
    fusion: Fusion,
    filter: Option<&str>,
) -> Result<Vec<Ranked>> {
    let depth = fusion.candidates.max(k * 2);
    let mut vec_hits = Vec::new();
    if let (Mode::Hybrid | Mode::Vector, Some(v)) = (mode, s.vector) {
        for v in std::iter::once(v).chain(s.more_vectors.iter().map(Vec::as_slice)) {
            vec_hits.push(store.vector_search(v, depth, filter)?);
        }
    }
    let mut text_hits = Vec::new();
    if let Mode::Hybrid | Mode::Text = mode {
        for t in std::iter::once(s.text).chain(s.more_texts.iter().map(String::as_str)) {
            text_hits.push(store.text_search(t, depth, filter)?);
        }
    }
    let vectors: Vec<&[Hit]> = vec_hits.iter().map(Vec::as_slice).collect();
    let texts: Vec<&[Hit]> = text_hits.iter().map(Vec::as_slice).collect();
    let mut ranked = merge_adjacent(fuse_all(&vectors, &texts, fusion));
    ranked.truncate(k);
    Ok(ranked)
}

/// The passages of the widened spans: those of all of them, and those of the best `cap`
/// alone (`None` where `cap` is 0 or covers them all), merged among themselves only, so a
/// span a generator reading `cap` does not read never joins one it does.
pub fn passages(widened: Vec<Ranked>, cap: usize) -> (Vec<Ranked>, Option<Vec<Ranked>>) {
    let fewer = (cap > 0 && cap < widened.len()).then(|| merge_adjacent(widened[..cap].to_vec()));
    (merge_adjacent(widened), fewer)
}

/// The best `n` spans widened with the chunks before and after them in their files (the
/// prompt gets them merged where they then overlap, [`merge_adjacent`]; search results and
/// their ranks do not).
pub fn widen_best(store: &Store, ranked: &[Ranked], n: usize) -> Result<Vec<Ranked>> {
    let mut out = ranked.to_vec();
    for r in out.iter_mut().take(n) {
        let chunks: Vec<Hit> = store
            .chunks_of(&r.hit.path, None)?
            .into_iter()
            .map(|c| Hit {
                id: String::new(),
                path: r.hit.path.clone(),
                heading: c.heading,
                line_start: c.line_start,
                line_end: c.line_end,
                text: c.text,
                score: 0.0,
            })
            .collect();
        widen(&mut r.hit, &chunks);
    }
    Ok(out)
}

/// Widens `hit` with the chunk of `file` that ends just before it and the one that starts
/// just after it (chunks in any order; overlapping lines are not repeated).
pub fn widen(hit: &mut Hit, file: &[Hit]) {
    let before = file
        .iter()
        .filter(|c| c.line_end < hit.line_start)
        .max_by_key(|c| c.line_end);
    let after = file
        .iter()
        .filter(|c| c.line_start > hit.line_end)
        .min_by_key(|c| c.line_start);
    if let Some(b) = before {
        hit.text = join_overlapping(&b.text, &hit.text);
        hit.line_start = b.line_start;
        hit.heading = b.heading.clone();
    }
    if let Some(a) = after {
        hit.text = join_overlapping(&hit.text, &a.text);
        hit.line_end = a.line_end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(id: &str, path: &str, lines: (u32, u32), text: &str) -> Hit {
        Hit {
            id: id.into(),
            path: path.into(),
            heading: String::new(),
            line_start: lines.0,
            line_end: lines.1,
            text: text.into(),
            score: 0.5,
        }
    }
    const F: Fusion = Fusion {
        k: 60.0,
        vector_weight: 1.0,
        text_weight: 1.0,
        file_weight: 0.0,
        candidates: 20,
        neighbors: 0,
        expand_weight: 1.0,
    };

    #[test]
    fn the_file_signal_lifts_a_chunk_whose_file_matches_often() {
        let a1 = hit("a1", "a.md", (1, 2), "a");
        let a2 = hit("a2", "a.md", (5, 6), "a");
        let b = hit("b", "b.md", (1, 2), "b");
        // b leads both lists; a1 and a2 follow. Plain RRF keeps b first.
        let v = [b.clone(), a1.clone(), a2.clone()];
        let t = [b.clone(), a2.clone(), a1.clone()];
        assert_eq!(fuse(&v, &t, F)[0].hit.id, "b");
        // With the file signal, a1 gains a2's score (its file's best other chunk).
        let f = Fusion {
            file_weight: 0.5,
            ..F
        };
        let fused = fuse(&v, &t, f);
        assert_eq!(fused[0].hit.path, "a.md");
        let plain_a1 = 1.0 / 62.0 + 1.0 / 63.0;
        let expect = plain_a1 + 0.5 * (1.0 / 63.0 + 1.0 / 62.0);
        let a1_score = fused.iter().find(|r| r.hit.id == "a1").unwrap().score;
        assert!((a1_score - expect).abs() < 1e-6, "{a1_score} vs {expect}");
    }

    #[test]
    fn reranking_reorders_by_score_and_keeps_ties_in_fused_order() {
        let ranked = fuse(
            &[
                hit("a", "a.md", (1, 2), "a"),
                hit("b", "b.md", (1, 2), "b"),
                hit("c", "c.md", (1, 2), "c"),
                hit("d", "d.md", (1, 2), "d"),
            ],
            &[],
            Fusion {
                k: 60.0,
                vector_weight: 1.0,
                text_weight: 1.0,
                file_weight: 0.0,
                candidates: 10,
                neighbors: 0,
                expand_weight: 1.0,
            },
        );
        let out = reorder(ranked, &[0.1, 2.0, 0.1, -1.0]);
        let ids: Vec<&str> = out.iter().map(|r| r.hit.id.as_str()).collect();
        assert_eq!(ids, ["b", "a", "c", "d"]);
        assert_eq!(out[0].rerank_score, Some(2.0));
        assert!(out[0].vector_rank == Some(2), "fused ranks are kept for -v");
    }

    #[test]
    fn a_reranker_out_of_time_leaves_the_unscored_in_fused_order() {
        let ids = ["a", "b", "c", "d"];
        let hits: Vec<Hit> = ids.iter().map(|i| hit(i, i, (1, 2), i)).collect();
        let out = reorder(fuse(&hits, &[], F), &[0.2, 0.9]);
        let got: Vec<&str> = out.iter().map(|r| r.hit.id.as_str()).collect();
        assert_eq!(got, ["b", "a", "c", "d"]);
        assert_eq!(out[2].rerank_score, None);
    }

    #[test]
    fn expansion_lists_add_to_the_fused_score_but_not_to_the_question_s_own_figures() {
        let (a, b, c) = (
            hit("a", "x", (1, 2), "a"),
            hit("b", "y", (1, 2), "b"),
            hit("c", "z", (1, 2), "c"),
        );
        let own = [a.clone(), b.clone()];
        let more = [c.clone(), b.clone()];
        let plain = fuse(&own, &[], F);
        assert_eq!(plain[0].hit.id, "a");
        let fused = fuse_all(&[&own, &more], &[], F);
        // b: rank 2 in the question's list and 2 in the expansion's; a: rank 1 once.
        assert_eq!(fused[0].hit.id, "b");
        assert_eq!(fused[0].vector_rank, Some(2), "the question's own rank");
        let c_only = fused.iter().find(|r| r.hit.id == "c").unwrap();
        assert_eq!((c_only.vector_rank, c_only.vector_score), (None, None));
        let texts = fuse_all(&[], &[&[a.clone()], &[c.clone(), a]], F);
        assert_eq!(texts[0].hit.id, "a");
        assert_eq!(texts[0].text_rank, Some(1));
    }

    #[test]
    fn blending_moves_a_span_by_the_generator_s_rank_without_replacing_fusion() {
        let ids = ["a", "b", "c", "d", "e"];
        let hits: Vec<Hit> = ids.iter().map(|i| hit(i, i, (1, 2), i)).collect();
        // Judged in reverse of fusion: every sum is 3, so fused order stands; e was not
        // judged. Then d judged best and c worst: d (3 + 0) passes c (2 + 3).
        let out = blend(fuse(&hits, &[], F), &[0.1, 0.2, 0.3, 0.9]);
        let got: Vec<&str> = out.iter().map(|r| r.hit.id.as_str()).collect();
        assert_eq!(got, ["a", "b", "c", "d", "e"]);
        let out = blend(fuse(&hits, &[], F), &[0.1, 0.2, 0.05, 0.9]);
        let got: Vec<&str> = out.iter().map(|r| r.hit.id.as_str()).collect();
        assert_eq!(got, ["a", "b", "d", "c", "e"]);
        assert_eq!(out[2].rerank_score, Some(0.9));
        assert_eq!(out[4].rerank_score, None);
    }

    #[test]
    fn widening_takes_the_chunks_around_a_span() {
        let file = vec![
            hit("3", "f.md", (9, 12), "nine\nten"),
            hit("1", "f.md", (1, 4), "one\ntwo"),
            hit("2", "f.md", (5, 8), "five\nsix"),
        ];
        let mut h = hit("2", "f.md", (5, 8), "five\nsix");
        widen(&mut h, &file);
        assert_eq!((h.line_start, h.line_end), (1, 12));
        assert_eq!(h.text, "one\ntwo\n\nfive\nsix\n\nnine\nten");
        let mut first = hit("1", "f.md", (1, 4), "one\ntwo");
        widen(&mut first, &file);
        assert_eq!((first.line_start, first.line_end), (1, 8));
    }

    #[test]
    fn rrf_rewards_agreement_and_breaks_ties_stably() {
        let a = hit("a", "x", (1, 2), "a");
        let b = hit("b", "y", (1, 2), "b");
        let c = hit("c", "z", (1, 2), "c");
        let fused = fuse(&[a.clone(), b.clone()], &[b.clone(), c.clone()], F);
        assert_eq!(fused[0].hit.id, "b");
        assert_eq!(fused[0].vector_rank, Some(2));
        assert_eq!(fused[0].text_rank, Some(1));
        // a and c tie (each rank 1 in one list); the id decides.
        assert_eq!(fused[1].hit.id, "a");
        assert_eq!(fused[2].hit.id, "c");
        let again = fuse(&[a, b.clone()], &[b, c], F);
        assert_eq!(
            fused.iter().map(|r| &r.hit.id).collect::<Vec<_>>(),
            again.iter().map(|r| &r.hit.id).collect::<Vec<_>>()
        );
    }

    #[test]
    fn filters_from_flags() {
        assert_eq!(filter(None, None), None);
        assert_eq!(
            filter(Some("docs/**/*.md"), None).unwrap(),
            r"path LIKE 'docs/%/%.md'"
        );
        assert_eq!(
            filter(Some("a_b?'"), Some("line_start > 3")).unwrap(),
            r"path LIKE 'a\_b_''' AND (line_start > 3)"
        );
    }

    #[test]
    fn weights_shift_the_order() {
        let a = hit("a", "x", (1, 2), "a");
        let c = hit("c", "z", (1, 2), "c");
        let f = Fusion {
            text_weight: 2.0,
            ..F
        };
        assert_eq!(
            fuse(std::slice::from_ref(&a), std::slice::from_ref(&c), f)[0]
                .hit
                .id,
            "c"
        );
    }

    /// `h` as a fused result of score 1.
    fn r(h: Hit) -> Ranked {
        Ranked {
            hit: h,
            score: 1.0,
            vector_score: None,
            text_score: None,
            vector_rank: None,
            text_rank: None,
            rerank_score: None,
        }
    }

    #[test]
    fn adjacent_chunks_merge_without_repeating_lines() {
        let first = hit("1", "f.md", (1, 3), "one\ntwo\nthree");
        let second = hit("2", "f.md", (3, 5), "three\nfour\nfive");
        let other = hit("3", "g.md", (1, 1), "g");
        let merged = merge_adjacent(vec![r(second), r(other), r(first)]);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].hit.text, "one\ntwo\nthree\nfour\nfive");
        assert_eq!((merged[0].hit.line_start, merged[0].hit.line_end), (1, 5));
    }

    /// The large generator reads the best 4 spans: a fifth that touches the first joins it
    /// in the passages of all five, never in those of the best 4.
    #[test]
    fn a_span_past_the_cap_joins_no_passage_within_it() {
        let widened = vec![
            r(hit("1", "f.md", (1, 3), "one\ntwo\nthree")),
            r(hit("2", "g.md", (1, 1), "g")),
            r(hit("3", "h.md", (1, 1), "h")),
            r(hit("4", "f.md", (2, 3), "two\nthree")),
            r(hit("5", "f.md", (4, 5), "four\nfive")),
        ];
        let (all, fewer) = passages(widened.clone(), 4);
        assert_eq!(all.len(), 3);
        assert_eq!(all[0].hit.text, "one\ntwo\nthree\n\nfour\nfive");
        let fewer = fewer.unwrap();
        assert_eq!(fewer.len(), 3);
        assert_eq!(fewer[0].hit.text, "one\ntwo\nthree");
        assert!(passages(widened.clone(), 0).1.is_none());
        assert!(passages(widened, 5).1.is_none());
    }
}

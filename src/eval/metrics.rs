//! The metrics of `rag eval`, pure, each on a ranked list of "which expected source (if
//! any) does this result come from". Relevance is per expected source: a second chunk of a
//! file already credited earns nothing, so five chunks of one page do not look like five
//! right answers, and nDCG's ideal is one hit per expected source.

/// Ranking figures of one case at cut-offs 1, 5 and 10.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Ranking {
    pub hit1: f64,
    pub hit5: f64,
    pub hit10: f64,
    pub mrr10: f64,
    pub ndcg10: f64,
}

/// `matches[i]`: the expected source that result `i + 1` comes from, if any; `n_expected`:
/// how many expected sources the case names.
pub fn ranking(matches: &[Option<usize>], n_expected: usize) -> Ranking {
    let first = matches.iter().position(Option::is_some).map(|i| i + 1);
    let within = |k: usize| f64::from(u8::from(first.is_some_and(|r| r <= k)));
    let mut credited = std::collections::HashSet::new();
    let mut dcg = 0.0;
    for (i, m) in matches.iter().take(10).enumerate() {
        if let Some(e) = m {
            if credited.insert(*e) {
                dcg += 1.0 / ((i + 2) as f64).log2();
            }
        }
    }
    let ideal: f64 = (0..n_expected.min(10))
        .map(|i| 1.0 / ((i + 2) as f64).log2())
        .sum();
    Ranking {
        hit1: within(1),
        hit5: within(5),
        hit10: within(10),
        mrr10: first.filter(|&r| r <= 10).map_or(0.0, |r| 1.0 / r as f64),
        ndcg10: if ideal > 0.0 { dcg / ideal } else { 0.0 },
    }
}

/// Lowercase with every run of whitespace as one space: how answer strings are compared.
pub fn normalize(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// Whether every needle occurs in the haystack (case-insensitive, whitespace collapsed).
/// `None` when there are no needles: such a case does not count either way.
pub fn contains_all(haystack: &str, needles: &[String]) -> Option<bool> {
    if needles.is_empty() {
        return None;
    }
    let h = normalize(haystack);
    Some(needles.iter().all(|n| h.contains(&normalize(n))))
}

/// Phrases with which a model declines. A refusal is "false" when rag's retrieval check did
/// not abstain: the answer was probably in the context and the model gave up on it.
const REFUSALS: &[&str] = &[
    "do not answer",
    "does not answer",
    "don't answer",
    "doesn't answer",
    "do not contain",
    "does not contain",
    "don't contain",
    "doesn't contain",
    "do not mention",
    "does not mention",
    "doesn't mention",
    "do not provide",
    "does not provide",
    "no information",
    "not mentioned",
    "not provided",
    "cannot answer",
    "can't answer",
    "unable to answer",
    "not specified",
    "there is no mention",
];

/// Whether an answer declines instead of answering.
pub fn is_refusal(answer: &str) -> bool {
    let a = normalize(answer).replace('’', "'");
    REFUSALS.iter().any(|r| a.contains(r))
}

/// The mean of the values that are `Some`; `None` when none is.
pub fn mean(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let (mut sum, mut n) = (0.0, 0usize);
    for v in values.into_iter().flatten() {
        sum += v;
        n += 1;
    }
    (n > 0).then(|| sum / n as f64)
}

/// Nearest-rank percentile (p in 0..=100) of `values`; `None` when empty.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    Some(v[rank.min(v.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn ranking_by_hand() {
        // Expected sources 0 and 1; results: miss, source 0, source 0 again, miss, source 1.
        let r = ranking(&[None, Some(0), Some(0), None, Some(1)], 2);
        assert_eq!((r.hit1, r.hit5, r.hit10), (0.0, 1.0, 1.0));
        assert!(close(r.mrr10, 0.5));
        // DCG = 1/log2(3) + 1/log2(6); ideal = 1/log2(2) + 1/log2(3).
        let dcg = 1.0 / 3f64.log2() + 1.0 / 6f64.log2();
        let ideal = 1.0 + 1.0 / 3f64.log2();
        assert!(close(r.ndcg10, dcg / ideal), "{}", r.ndcg10);
        // First place: everything is 1 for one expected source.
        let top = ranking(&[Some(0), None], 1);
        assert_eq!(
            top,
            Ranking {
                hit1: 1.0,
                hit5: 1.0,
                hit10: 1.0,
                mrr10: 1.0,
                ndcg10: 1.0
            }
        );
        // Rank 7: only hit@10, MRR 1/7, nDCG 1/log2(8) = 1/3.
        let mut m = vec![None; 6];
        m.push(Some(0));
        let r = ranking(&m, 1);
        assert_eq!((r.hit1, r.hit5, r.hit10), (0.0, 0.0, 1.0));
        assert!(close(r.mrr10, 1.0 / 7.0) && close(r.ndcg10, 1.0 / 3.0));
        // Past rank 10, nothing counts.
        let mut m = vec![None; 10];
        m.push(Some(0));
        assert_eq!(ranking(&m, 1), Ranking::default());
    }

    #[test]
    fn strings_and_refusals() {
        let needles = vec!["PRAGMA  foreign_keys".to_string(), "on".to_string()];
        assert_eq!(
            contains_all("Run pragma foreign_keys\n= ON first", &needles),
            Some(true)
        );
        assert_eq!(
            contains_all("Run pragma foreign_keys", &["off".to_string()]),
            Some(false)
        );
        assert_eq!(contains_all("x", &[]), None);
        assert!(is_refusal("The documents do not answer the question."));
        assert!(is_refusal("The sources don’t contain that."));
        assert!(!is_refusal("Use PRAGMA foreign_keys = ON [S1]."));
    }

    #[test]
    fn means_and_percentiles() {
        assert_eq!(mean([Some(1.0), None, Some(0.0)]), Some(0.5));
        assert_eq!(mean([None]), None);
        let v = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(percentile(&v, 50.0), Some(3.0));
        assert_eq!(percentile(&v, 95.0), Some(5.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&[], 50.0), None);
    }
}

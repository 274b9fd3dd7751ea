//! Context compression, pure: within each retrieved span keep the sentences closest to the
//! question and blank the rest. Small generators copy well and reason badly; a source cut to
//! its few relevant sentences gives them less to get lost in and fewer tokens to prefill.
//! A dropped sentence keeps its newlines, so line numbers (evidence `path:line`) still match.

use std::ops::Range;

/// The units a span is compressed by: its sentences (a wrapped line continues a sentence).
pub fn units(text: &str) -> Vec<Range<usize>> {
    super::cite::sentences(text)
        .into_iter()
        .filter(|r| !text[r.clone()].trim().is_empty())
        .collect()
}

/// Which units to keep: the `n` most similar to the question, and the one right after the
/// best (a topic sentence is often followed by the fact itself). Headings (`#` lines) stay.
pub fn choose(text: &str, units: &[Range<usize>], similarity: &[f32], n: usize) -> Vec<bool> {
    let mut order: Vec<usize> = (0..units.len()).collect();
    order.sort_by(|&a, &b| similarity[b].total_cmp(&similarity[a]).then(a.cmp(&b)));
    let mut keep = vec![false; units.len()];
    for &i in order.iter().take(n) {
        keep[i] = true;
    }
    if let Some(&best) = order.first() {
        if best + 1 < units.len() {
            keep[best + 1] = true;
        }
    }
    for (i, r) in units.iter().enumerate() {
        if text[r.clone()].trim_start().starts_with('#') {
            keep[i] = true;
        }
    }
    keep
}

/// `text` with the units not kept replaced by their newlines, and `…` where text was cut.
pub fn compress(text: &str, units: &[Range<usize>], keep: &[bool]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    let mut cut = false;
    for (r, &k) in units.iter().zip(keep) {
        out.push_str(&text[last..r.start]);
        if k {
            out.push_str(&text[r.clone()]);
            cut = false;
        } else {
            if !cut {
                out.push('…');
                cut = true;
            }
            out.extend(text[r.clone()].chars().filter(|&c| c == '\n'));
        }
        last = r.end;
    }
    out.push_str(&text[last..]);
    out
}

/// Cosine similarity (0 for a zero vector).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_closest_sentences_and_the_line_structure() {
        let text = "# Cache\nThe cache is fast. It stores keys.\nTomatoes are red.\nSky is blue.";
        let u = units(text);
        let pieces: Vec<&str> = u.iter().map(|r| text[r.clone()].trim()).collect();
        assert_eq!(
            pieces,
            vec![
                "# Cache",
                "The cache is fast.",
                "It stores keys.",
                "Tomatoes are red.",
                "Sky is blue."
            ]
        );
        // Best: "The cache is fast." (kept with the sentence after it); n = 1.
        let keep = choose(text, &u, &[0.0, 0.9, 0.1, 0.5, 0.2], 1);
        assert_eq!(keep, vec![true, true, true, false, false]);
        let out = compress(text, &u, &keep);
        assert_eq!(out, "# Cache\nThe cache is fast. It stores keys.\n…\n");
        assert_eq!(out.matches('\n').count(), text.matches('\n').count());
        assert!((cosine(&[1.0, 0.0], &[1.0, 0.0]) - 1.0).abs() < 1e-6);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
    }
}

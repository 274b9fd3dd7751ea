//! Property tests (proptest) of prompt packing and the citation checker, on the documents
//! `ingest::fuzz` generates: packing stays within its token budget and accounts for every
//! hit, and every citation the checker keeps names a packed source. `RAG_FUZZ_CASES=N` runs
//! more cases (`make stress`).

use proptest::prelude::*;
use proptest::sample::select;

use crate::ask::{cite, prompt};
use crate::ingest::fuzz::{config, document, WORDS};
use crate::store::Hit;

/// Search hits over generated documents, as retrieval would hand them to packing.
fn hits() -> impl Strategy<Value = Vec<(Hit, f32)>> {
    let hit = (document("a.md"), 0..4usize, select(WORDS));
    prop::collection::vec(hit, 0..12).prop_map(|hs| {
        hs.into_iter()
            .enumerate()
            .map(|(i, (text, file, heading))| {
                let lines = text.lines().count().max(1) as u32;
                let hit = Hit {
                    id: format!("c{i}"),
                    path: format!("d/{file}.md"),
                    heading: heading.to_string(),
                    line_start: 1,
                    line_end: lines,
                    text,
                    score: 0.5,
                };
                (hit, 0.5)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(config(4))]

    #[test]
    fn packing_stays_within_its_budget_and_the_citation_checker_never_panics(
        hits in hits(),
        question in document("a.txt"),
        slack in 0..3000usize,
        answer in document("a.txt"),
    ) {
        let count = |s: &str| s.split_whitespace().count() + s.len() / 40;
        let overhead = count(&question) + 20;
        let budget = overhead + slack;
        let packed = prompt::pack(&question, &hits, budget, overhead, &count);
        prop_assert!(
            packed.prompt_tokens <= budget,
            "{} tokens packed into {budget}",
            packed.prompt_tokens
        );
        prop_assert_eq!(packed.sources.len() + packed.dropped.len(), hits.len());
        let sources: Vec<(usize, &str)> = packed
            .sources
            .iter()
            .map(|s| (s.n, s.hit.text.as_str()))
            .collect();
        let checked = cite::check(&answer, &sources);
        for c in &checked.citations {
            prop_assert!(
                sources.iter().any(|(n, _)| format!("S{n}") == c.id),
                "a citation of {} among {} sources",
                c.id,
                sources.len()
            );
        }
    }
}

//! Retrieval quality on a fixture question set over corpus/: hybrid must recall at least
//! as well as either retriever alone.

use crate::support::{copy_dir, repo, Project};

#[derive(serde::Deserialize)]
struct Q {
    question: String,
    file: String,
}

/// (recall@5, MRR) of one mode.
fn score(p: &Project, qs: &[Q], mode: &str) -> (f64, f64) {
    let (mut hits, mut rr) = (0.0, 0.0);
    for q in qs {
        let v = p.json(&["search", "--json", "-k", "5", "--mode", mode, &q.question]);
        let paths = crate::support::hit_paths(&v);
        if let Some(i) = paths.iter().position(|p| *p == q.file) {
            hits += 1.0;
            rr += 1.0 / (i + 1) as f64;
        }
    }
    (hits / qs.len() as f64, rr / qs.len() as f64)
}

#[test]
fn hybrid_recall_is_at_least_that_of_each_retriever() {
    let qs: Vec<Q> = serde_yaml::from_str(
        &std::fs::read_to_string(repo().join("fixtures/questions.yaml")).unwrap(),
    )
    .unwrap();
    let p = Project::empty();
    copy_dir(&repo().join("corpus"), &p.path().join("corpus"));
    p.json(&["ingest", "--json", "corpus"]);
    let hybrid = score(&p, &qs, "hybrid");
    let vector = score(&p, &qs, "vector");
    let text = score(&p, &qs, "text");
    eprintln!("recall@5 / MRR: hybrid {hybrid:?} vector {vector:?} text {text:?}");
    assert!(
        hybrid.0 >= vector.0 && hybrid.0 >= text.0,
        "hybrid {hybrid:?} vector {vector:?} text {text:?}"
    );
    assert!(hybrid.0 >= 0.8, "hybrid recall@5 {:.2}", hybrid.0);
}

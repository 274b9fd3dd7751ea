//! Tests of the speed records.

use super::*;

/// A sample on a quiet machine (5% of the CPU taken by others) or a busy one (60%).
fn sample(prefill: (usize, f64), decode: (usize, f64), load: Option<f64>, busy: bool) -> Sample {
    Sample::of(prefill, decode, load, Some(if busy { 0.6 } else { 0.05 }))
}

/// A speeds file in a new folder, and a model file in it.
fn fresh() -> (tempfile::TempDir, std::path::PathBuf, Speeds) {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.gguf");
    std::fs::write(&model, b"GGUF").unwrap();
    let speeds = Speeds::in_dir(dir.path());
    (dir, model, speeds)
}

fn typical(s: Speed) -> f64 {
    s.seconds().unwrap()
}

#[test]
fn the_fastest_of_the_last_quiet_answers_gives_the_typical_time() {
    let (dir, model, speeds) = fresh();
    assert_eq!(speeds.speed(&model), Speed::Unmeasured);
    assert_eq!(speeds.speed(&dir.path().join("none.gguf")), Speed::Missing);
    // Too short to measure: nothing kept.
    speeds.record(&model, sample((10, 100.0), (3, 100.0), None, false));
    assert_eq!(speeds.speed(&model), Speed::Unmeasured);
    // 1,000 tokens at 100 tok/s, 150 at 25 tok/s, a second's load: 17 s.
    speeds.record(
        &model,
        sample((500, 5_000.0), (50, 2_000.0), Some(1_000.0), false),
    );
    let f = speeds.figures(&model).unwrap();
    assert_eq!((f.prefill_tok_per_s, f.decode_tok_per_s), (100.0, 25.0));
    assert!((f.typical_s() - 17.0).abs() < 1e-9, "{f:?}");
    assert!(f.quiet);
    // A slow answer does not move it; a faster one does.
    speeds.record(&model, sample((500, 50_000.0), (50, 20_000.0), None, false));
    assert_eq!(speeds.figures(&model).unwrap().prefill_tok_per_s, 100.0);
    speeds.record(&model, sample((500, 2_500.0), (50, 1_000.0), None, false));
    let f = speeds.figures(&model).unwrap();
    assert_eq!((f.prefill_tok_per_s, f.decode_tok_per_s), (200.0, 50.0));
    assert_eq!(f.load_ms, 1_000.0, "the quickest load");
    assert!(f.age_s.is_some_and(|a| a < 60), "just measured: {f:?}");
    // Only the last five quiet ones are kept; a replaced file starts over.
    for _ in 0..KEEP {
        speeds.record(&model, sample((500, 50_000.0), (50, 20_000.0), None, false));
    }
    assert_eq!(speeds.figures(&model).unwrap().prefill_tok_per_s, 10.0);
    std::fs::write(&model, b"GGUF and more").unwrap();
    assert_eq!(speeds.speed(&model), Speed::Unmeasured);
    // A damaged file is an empty record; so is a FIFO in its place, at once.
    std::fs::write(dir.path().join("speeds.json"), b"{not json").unwrap();
    assert_eq!(speeds.speed(&model), Speed::Unmeasured);
}

#[test]
fn busy_answers_count_only_where_no_quiet_one_is_kept() {
    let (_dir, model, speeds) = fresh();
    // Only busy answers: a bound, not the machine's speed.
    speeds.record(&model, sample((500, 10_000.0), (50, 4_000.0), None, true));
    let Speed::Measured(m) = speeds.speed(&model) else {
        panic!("measured")
    };
    assert!(!m.quiet);
    assert_eq!(m.typical_s, 32.0);
    let f = speeds.figures(&model).unwrap();
    assert_eq!(f.others, Some(0.6));
    // One quiet answer, even a slower one, is the machine's speed from then on.
    speeds.record(&model, sample((500, 12_500.0), (50, 5_000.0), None, false));
    let Speed::Measured(m) = speeds.speed(&model) else {
        panic!("measured")
    };
    assert!(m.quiet);
    assert_eq!(m.typical_s, 40.0);
    // Many busy answers never push the quiet one out.
    for _ in 0..3 * KEEP {
        speeds.record(&model, sample((500, 1_000.0), (50, 400.0), None, true));
    }
    assert_eq!(typical(speeds.speed(&model)), 40.0);
    // Samples from before the load was measured are not known to be quiet (on Linux).
    let (_dir, model, speeds) = fresh();
    speeds.record(
        &model,
        Sample::of((500, 5_000.0), (50, 2_000.0), None, None),
    );
    assert_eq!(speeds.figures(&model).unwrap().quiet, !load::known());
}

#[test]
fn a_quiet_measure_older_than_an_hour_is_measured_again_only_on_a_quiet_machine() {
    let (_dir, model, speeds) = fresh();
    let mut old = sample((500, 5_000.0), (50, 2_000.0), None, false);
    old.at = Some(now() - RETRY_AFTER_S - 60);
    speeds.record(&model, old.clone());
    let retry = |quiet_now: bool| match speeds.read().speed(&model, || quiet_now) {
        Speed::Measured(m) => m.retry,
        s => panic!("{s:?}"),
    };
    assert!(retry(true));
    assert!(!retry(false), "not on a busy machine");
    // A new measure makes it current again.
    speeds.record(&model, sample((500, 5_000.0), (50, 2_000.0), None, false));
    assert!(!retry(true));
    assert_eq!(typical(speeds.speed(&model)), 16.0);
}

#[test]
fn a_smaller_generator_is_predicted_from_the_parameters_and_bytes() {
    let f = Figures {
        prefill_tok_per_s: 100.0,
        decode_tok_per_s: 10.0,
        load_ms: 2_000.0,
        answers: 5,
        age_s: Some(1),
        quiet: true,
        others: Some(0.0),
    };
    let large = Weights {
        params: 1_500,
        bytes: 1_000,
    };
    let small = Weights {
        params: 150,
        bytes: 100,
    };
    let p = f.predict(&large, &small);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-6 * b.abs().max(1.0);
    assert!(
        close(p.prefill_tok_per_s, 100.0 * 10f64.powf(PREFILL_EXPONENT)),
        "{p:?}"
    );
    assert!(
        close(p.decode_tok_per_s, 10.0 * 10f64.powf(DECODE_EXPONENT)),
        "{p:?}"
    );
    assert!(close(p.load_ms, 200.0), "{p:?}");
    // Faster than the larger one, and slower than its sizes alone would say.
    assert!(
        p.typical_s() < f.typical_s() && p.typical_s() > 0.2 + 1.0 + 1.5,
        "{p:?}"
    );
    // The same file predicts itself.
    assert!(close(f.predict(&large, &large).typical_s(), f.typical_s()));
}

#[test]
fn the_route_note_is_due_once_a_day() {
    let (_dir, model, speeds) = fresh();
    assert!(speeds.note_due(&model));
    assert!(!speeds.note_due(&model));
    speeds.record(&model, sample((500, 5_000.0), (50, 2_000.0), None, false));
    assert!(!speeds.note_due(&model), "a new sample keeps the mark");
}

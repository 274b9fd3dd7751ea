//! Tests of the route.

use super::*;

fn budget(budget_s: f64, similarity: f32) -> Budget {
    Budget {
        budget_s,
        similarity,
    }
}

fn measured(typical_s: f64, quiet: bool, retry: bool) -> Speed {
    Speed::Measured(Measure {
        typical_s,
        quiet,
        retry,
    })
}

fn pick(large: Speed, medium: Speed, small: Speed) -> Route {
    route(
        ChosenRoute::Auto,
        Some(0.9),
        budget(20.0, 0.0),
        |t| match t {
            Tier::Large => large,
            Tier::Medium => medium,
            Tier::Small => small,
        },
    )
}

#[test]
fn auto_takes_the_best_generator_and_steps_down_only_on_evidence() {
    use Speed::*;
    let fast = Speed::quiet;
    let r = pick(fast(9.8), fast(18.0), fast(4.0));
    assert_eq!(r.model, Tier::Large);
    assert!(r.reason.contains("9.8 s here, within"), "{}", r.reason);
    assert_eq!(r.note, None);
    assert_eq!(pick(Unmeasured, Missing, fast(4.0)).model, Tier::Large);
    // Over the budget on a quiet machine: the largest smaller one known to fit, with a note.
    let r = pick(fast(31.0), fast(18.0), fast(4.0));
    assert_eq!(r.model, Tier::Medium);
    assert!(
        r.reason.contains("large generator takes 31.0 s"),
        "{}",
        r.reason
    );
    assert!(r
        .note
        .as_deref()
        .is_some_and(|n| n.contains("--model large")));
    let predicted = Predicted {
        typical_s: 5.0,
        from: Tier::Large,
    };
    let r = pick(fast(31.0), Missing, predicted);
    assert_eq!(r.model, Tier::Small);
    assert!(
        r.reason.contains("5.0 s predicted from the large one"),
        "{}",
        r.reason
    );
    // The case of the slower host: the large one over the budget, the small one never
    // measured and not predictable. It is not tried as a guess: the large one answers.
    let r = pick(fast(30.9), Missing, Unmeasured);
    assert_eq!(r.model, Tier::Large);
    assert!(r.reason.contains("none fits"), "{}", r.reason);
    // ... and a small one measured slower (on a busy machine) is no reason to take it.
    let r = pick(fast(30.9), Missing, measured(53.8, false, false));
    assert_eq!(r.model, Tier::Large);
    assert!(r.reason.contains("30.9 s here"), "{}", r.reason);
    assert!(
        !r.reason.contains("answers in"),
        "not called quicker: {}",
        r.reason
    );
    // Busy figures are not the machine's speed: the best one stays.
    let r = pick(measured(31.0, false, false), fast(18.0), fast(4.0));
    assert_eq!(r.model, Tier::Large);
    assert!(
        r.reason.contains("other processes held the CPU"),
        "{}",
        r.reason
    );
    // Too slow over an hour ago, quiet now: measured again.
    let r = pick(measured(31.0, true, true), fast(18.0), fast(4.0));
    assert_eq!(r.model, Tier::Large);
    assert!(r.reason.contains("measures it again"), "{}", r.reason);
    // None fits: the best installed one, never the smallest; the note names the trade.
    let r = pick(fast(90.0), fast(40.0), fast(25.0));
    assert_eq!(r.model, Tier::Large);
    assert!(r.reason.contains("none fits"), "{}", r.reason);
    let note = r.note.unwrap();
    assert!(
        note.contains("90.0 s") && note.contains("--model small"),
        "{note}"
    );
    assert_eq!(pick(Missing, Missing, Missing).model, Tier::Small);
    assert_eq!(pick(Missing, Missing, Unmeasured).model, Tier::Small);
    // A fixed route is the user's choice, whatever is installed.
    let fixed = |c| route(c, None, budget(20.0, 0.0), |_| Missing).model;
    assert_eq!(fixed(ChosenRoute::Large), Tier::Large);
    assert_eq!(fixed(ChosenRoute::Medium), Tier::Medium);
    assert_eq!(fixed(ChosenRoute::Small), Tier::Small);
}

#[test]
fn a_strong_match_goes_to_the_small_generator_only_when_asked() {
    let all = |_: Tier| Speed::Unmeasured;
    let auto = ChosenRoute::Auto;
    assert_eq!(
        route(auto, Some(0.8), budget(20.0, 0.0), all).model,
        Tier::Large
    );
    assert_eq!(
        route(auto, Some(0.8), budget(20.0, 0.7), all).model,
        Tier::Small
    );
    assert_eq!(
        route(auto, Some(0.6), budget(20.0, 0.7), all).model,
        Tier::Large
    );
    assert_eq!(route(auto, None, budget(20.0, 0.7), all).model, Tier::Large);
    let no_small = |t: Tier| match t {
        Tier::Small => Speed::Missing,
        _ => Speed::Unmeasured,
    };
    assert_eq!(
        route(auto, Some(0.9), budget(20.0, 0.7), no_small).model,
        Tier::Large
    );
}

/// Every speed a generator can show, over a grid of times around the budgets.
fn speeds_of(tier: Tier) -> Vec<Speed> {
    let mut out = vec![Speed::Missing, Speed::Unmeasured];
    for t in [3.0, 19.95, 20.0, 20.04, 35.0, 59.9, 75.0] {
        for (quiet, retry) in [(true, false), (false, false), (true, true)] {
            out.push(measured(t, quiet, retry));
        }
        for from in [Tier::Large, Tier::Medium] {
            if from > tier {
                out.push(Speed::Predicted { typical_s: t, from });
            }
        }
    }
    out
}

/// The figures a reason may quote: "31.0 s" must be one of the table's.
fn quoted_seconds(reason: &str) -> Vec<String> {
    let words: Vec<&str> = reason.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[1].trim_end_matches([',', ';', ')']) == "s")
        .map(|w| w[0].trim_start_matches('(').to_string())
        .filter(|n| n.contains('.') && n.parse::<f64>().is_ok())
        .collect()
}

/// Over every table of speeds the grid makes: the route is never a guess below a known
/// generator, and no reason calls a generator within budget, fitting, the best installed,
/// or over the budget when the figures say otherwise.
#[test]
fn no_route_reason_contradicts_the_figures() {
    let mut tables = 0;
    for budget_s in [20.0, 60.0] {
        for large in speeds_of(Tier::Large) {
            for medium in speeds_of(Tier::Medium) {
                for small in speeds_of(Tier::Small) {
                    let of = |t: Tier| match t {
                        Tier::Large => large,
                        Tier::Medium => medium,
                        Tier::Small => small,
                    };
                    // A prediction needs its source measured on a quiet machine.
                    let sourced = |s: Speed| match s {
                        Speed::Predicted { from, .. } => {
                            matches!(of(from), Speed::Measured(m) if m.quiet)
                        }
                        _ => true,
                    };
                    if !Tier::ALL.iter().all(|&t| sourced(of(t))) {
                        continue;
                    }
                    tables += 1;
                    let r = route(ChosenRoute::Auto, None, budget(budget_s, 0.0), of);
                    check(&r, budget_s, &of);
                }
            }
        }
    }
    assert!(tables > 10_000, "{tables} tables");
}

/// One table's route: what is chosen, what its words claim, what figures it quotes.
struct Case<'a, F: Fn(Tier) -> Speed> {
    r: &'a Route,
    budget_s: f64,
    of: &'a F,
    installed: Vec<Tier>,
    ctx: String,
}

fn check(r: &Route, budget_s: f64, of: &impl Fn(Tier) -> Speed) {
    let ctx = format!(
        "budget {budget_s}: large {:?}, medium {:?}, small {:?} -> {} ({})",
        of(Tier::Large),
        of(Tier::Medium),
        of(Tier::Small),
        r.model.name(),
        r.reason
    );
    let installed: Vec<Tier> = BEST_FIRST
        .into_iter()
        .filter(|&t| of(t) != Speed::Missing)
        .collect();
    if installed.is_empty() {
        assert!(r.reason.contains("no generator installed"), "{ctx}");
        return;
    }
    let c = Case {
        r,
        budget_s,
        of,
        installed,
        ctx,
    };
    c.choice();
    c.words();
    c.figures();
}

impl<F: Fn(Tier) -> Speed> Case<'_, F> {
    fn top(&self) -> Tier {
        self.installed[0]
    }

    fn fits(&self, s: Speed) -> bool {
        s.seconds().is_some_and(|x| x <= self.budget_s)
    }

    /// Stepped down only on a quiet, current measure of the best one over the budget, to
    /// the largest smaller one known to fit; never to an unmeasured one.
    fn choice(&self) {
        let (r, of, ctx, top) = (self.r, self.of, &self.ctx, self.top());
        assert!(self.installed.contains(&r.model), "an installed one: {ctx}");
        let chosen = of(r.model);
        if r.model == top {
            assert!(r.reason.contains("best installed"), "{ctx}");
            return;
        }
        assert!(
            matches!(of(top), Speed::Measured(m) if m.quiet && !m.retry && m.typical_s > self.budget_s),
            "stepped down without evidence: {ctx}"
        );
        assert!(
            self.fits(chosen),
            "stepped down to one not known to fit: {ctx}"
        );
        let between = self.installed.iter().take_while(|&&t| t != r.model).skip(1);
        for &t in between {
            assert!(!self.fits(of(t)), "passed over one that fits: {ctx}");
        }
        assert!(r.note.is_some(), "a step down is said: {ctx}");
        assert!(
            chosen != Speed::Unmeasured,
            "an unmeasured one tried as a guess: {ctx}"
        );
    }

    /// What the words claim holds of the figures.
    fn words(&self) {
        let (r, of, ctx, top) = (self.r, self.of, &self.ctx, self.top());
        let (reason, chosen) = (&r.reason, of(r.model));
        assert!(!reason.contains("fastest"), "{ctx}");
        if reason.contains("within llm.answer_budget_s") {
            assert!(self.fits(chosen), "called within budget: {ctx}");
        }
        if reason.contains(&format!("the {} one fits", r.model.name())) {
            assert!(self.fits(chosen), "called fitting: {ctx}");
        }
        if reason.contains("none fits") {
            for &t in &self.installed {
                assert!(!self.fits(of(t)), "none fits, but {} does: {ctx}", t.name());
            }
            assert!(r.note.is_some(), "{ctx}");
        }
        if reason.contains("over llm.answer_budget_s") {
            let over = of(top).seconds().is_some_and(|x| x > self.budget_s);
            assert!(over, "called over budget: {ctx}");
        }
        if reason.contains("other processes held the CPU") {
            assert!(matches!(of(top), Speed::Measured(m) if !m.quiet), "{ctx}");
        }
    }

    /// Every figure quoted is one of the table's; a quicker generator named is quicker.
    fn figures(&self) {
        let (r, of, ctx, top) = (self.r, self.of, &self.ctx, self.top());
        let figures: Vec<String> = Tier::ALL
            .iter()
            .filter_map(|&t| of(t).seconds())
            .map(|s| format!("{s:.1}"))
            .collect();
        let note = r.note.as_deref().unwrap_or("");
        for n in quoted_seconds(&r.reason)
            .iter()
            .chain(&quoted_seconds(note))
        {
            assert!(figures.contains(n), "{n} s is no figure: {ctx}");
        }
        for t in Tier::ALL {
            let named = format!("`--model {}` answers in", t.name());
            if note.contains(&named) && r.model == top {
                let (a, b) = (of(t).seconds(), of(top).seconds());
                assert!(a.zip(b).is_some_and(|(a, b)| a < b), "{ctx}");
            }
        }
    }
}

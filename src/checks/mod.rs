//! What `rag doctor` checks, everything a command needs before a user finds out the hard way:
//! model files (present, the expected checksum when they are ones of rag's catalog,
//! loadable), the ONNX Runtime library, llama.cpp's threads and GPU devices, the index (opens, matches the configured
//! embedder, its project root, versions, size, files that failed), the prompt cache (every
//! entry's checksum) and free disk. Each problem comes with its fix; any failure exits 1.

use std::path::Path;

use serde::Serialize;

use crate::config::Settings;
use crate::embed::{Embedder, Reranker};

mod compute;
mod index;

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
}

fn check(name: &'static str, status: Status, detail: impl Into<String>) -> Check {
    Check {
        name,
        status,
        detail: detail.into(),
    }
}

/// "checksum matches" / a failure naming the fix / nothing for a file the catalog does not
/// name (a model of the user's own).
fn checksum(path: &Path, memo: &Path) -> Option<Check> {
    let known = crate::catalog::by_file_name(path.file_name()?.to_str()?)?;
    let want = known.sha256;
    let got = crate::hashcache::sha256(path, memo).ok()?;
    Some(if got == want {
        check(
            "checksum",
            Status::Ok,
            format!("{} matches rag's model catalog", path.display()),
        )
    } else {
        check(
            "checksum",
            Status::Fail,
            format!(
                "{} does not match rag's model catalog (damaged or replaced); move it aside and run `rag models fetch` again (`make models` in rag's checkout)",
                path.display()
            ),
        )
    })
}

/// Where the local model files come from: the project's folder, the user's model folder
/// (`rag models fetch`, `make install`) or a path of the user's own.
fn model_folders(s: &Settings) -> Check {
    let user = crate::config::user_models_dir();
    let files = [
        &s.embed.model,
        &s.embed.tokenizer_dir,
        &s.embed.ort_lib,
        &s.llm.model,
        &s.llm.medium_model,
        &s.llm.large_model,
    ];
    let (mut in_user, mut elsewhere) = (0, 0);
    for f in files.iter().filter(|f| f.exists()) {
        if user.as_ref().is_some_and(|u| f.starts_with(u)) {
            in_user += 1;
        } else {
            elsewhere += 1;
        }
    }
    let user_text = user.map_or_else(|| "(no home folder)".into(), |u| u.display().to_string());
    check(
        "model folders",
        Status::Ok,
        format!(
            "{in_user} of the model files from the user's model folder {user_text}, {elsewhere} from the project or rag.toml paths; a missing one: {}",
            crate::config::setup_hint()
        ),
    )
}

fn models(s: &Settings, memo: &Path, out: &mut Vec<Check>) -> Option<Embedder> {
    out.push(model_folders(s));
    let embedder = load_embedder(s, out);
    if s.embed.backend == crate::config::Backend::Local {
        out.extend(checksum(&s.embed.model, memo));
    }
    if !s.rerank.model.as_os_str().is_empty() {
        out.push(match Reranker::load(&s.rerank, &s.embed) {
            Ok(_) => check("reranker", Status::Ok, s.rerank.model.display().to_string()),
            Err(e) => check("reranker", Status::Fail, format!("{e:#}")),
        });
    }
    for tier in crate::config::Tier::ALL {
        generator_checks(s, tier, memo, out);
    }
    routing(s, out);
    embedder
}

/// Loads the embedder once: its check goes into `out`, and the loaded model is kept for
/// the index check, which compares it with the model the index was made with.
fn load_embedder(s: &Settings, out: &mut Vec<Check>) -> Option<Embedder> {
    match Embedder::load(&s.embed) {
        Ok(e) => {
            out.push(check(
                "embedder",
                Status::Ok,
                if s.embed.backend == crate::config::Backend::Openai {
                    format!("{} ({} dims) at {}", e.info.name, e.info.dim, s.embed.url)
                } else {
                    let ort = crate::embed::ort_version(&s.embed.ort_lib)
                        .unwrap_or_else(|_| "(version unknown)".into());
                    format!(
                        "{} ({} dims, {} pooling), ONNX Runtime {ort} from {}",
                        e.info.name,
                        e.info.dim,
                        e.info.pooling,
                        s.embed.ort_lib.display()
                    )
                },
            ));
            Some(e)
        }
        Err(e) => {
            out.push(check("embedder", Status::Fail, format!("{e:#}")));
            None
        }
    }
}

/// The checks of one generator tier: only the small one is required, so a missing medium or
/// large model is a warning that says how to fetch it.
fn generator_checks(s: &Settings, tier: crate::config::Tier, memo: &Path, out: &mut Vec<Check>) {
    let (backend, path) = s.generator(tier);
    let name = match tier {
        crate::config::Tier::Small => "generator (small)",
        crate::config::Tier::Medium => "generator (medium)",
        crate::config::Tier::Large => "generator (large)",
    };
    let required = tier == crate::config::Tier::Small;
    if backend == crate::config::Backend::Openai {
        out.push(match crate::llm::Remote::open(&s.llm) {
            Ok(g) => check(name, Status::Ok, format!("{} answers", g.name())),
            Err(e) => check(name, Status::Fail, format!("{e:#}")),
        });
        return;
    }
    if !required && !path.exists() {
        let fetch = match tier {
            crate::config::Tier::Medium => crate::catalog::MEDIUM.fetch,
            _ => crate::catalog::LARGE.fetch,
        };
        out.push(check(name, Status::Warn, format!(
            "{} not installed: --model {} fails and auto routing passes it over; `{fetch}` fetches it into the user's model folder (`--dir models` into the project's)",
            path.display(),
            tier.name(),
        )));
        return;
    }
    // A model named in another tool's store: the name, then the file it resolved to.
    let key = match tier {
        crate::config::Tier::Small => "llm.model",
        crate::config::Tier::Medium => "llm.medium_model",
        crate::config::Tier::Large => "llm.large_model",
    };
    let named = s
        .model_names
        .get(key)
        .map_or_else(String::new, |n| format!("{n} → "));
    out.push(match crate::llm::Llm::load(path, true) {
        Ok(_) => {
            let mb = std::fs::metadata(path).map(|m| m.len() >> 20).unwrap_or(0);
            check(
                name,
                Status::Ok,
                format!("{named}{} ({mb} MiB), loads", path.display()),
            )
        }
        Err(e) => check(name, Status::Fail, format!("{e:#}")),
    });
    out.extend(checksum(path, memo));
}

/// The speeds earlier answers measured of each local generator on this machine, and the
/// generator the route answers with now (`auto`: the best installed, unless it is over
/// `llm.answer_budget_s` and a smaller one is known to fit).
fn routing(s: &Settings, out: &mut Vec<Check>) {
    use crate::config::{Backend, Tier};
    let record = crate::engine::speeds::Speeds::in_dir(&s.index.state_dir()).read();
    let mut seen = Vec::new();
    for tier in Tier::ALL {
        let (backend, path) = s.generator(tier);
        if backend != Backend::Local || !path.is_file() {
            continue;
        }
        let predicted = match crate::engine::speed_of(s, &record, tier) {
            crate::ask::route::Speed::Predicted { typical_s, from } => {
                format!("; predicted {typical_s:.1} s from the {} one", from.name())
            }
            _ => String::new(),
        };
        seen.push(match record.figures(path) {
            Some(f) => format!(
                "{}: prefill {:.0} tok/s, decode {:.1} tok/s, load {:.1} s (the best of its last {} answers{}): a typical question {:.1} s{predicted}",
                tier.name(),
                f.prefill_tok_per_s,
                f.decode_tok_per_s,
                f.load_ms / 1e3,
                f.answers,
                load_said(&f),
                f.typical_s()
            ),
            None => format!(
                "{}: not measured here yet{}",
                tier.name(),
                if predicted.is_empty() { " (its next answer measures it)".into() } else { predicted }
            ),
        });
    }
    if !seen.is_empty() {
        out.push(check("generator speeds", Status::Ok, seen.join("; ")));
    }
    let chosen = crate::engine::fixed_route(s);
    let route = format!("{:?}", s.llm.route).to_lowercase();
    let note = chosen
        .note
        .map(|n| format!(". Note: {n}"))
        .unwrap_or_default();
    out.push(check(
        "route",
        Status::Ok,
        format!(
            "llm.route = {route}: the {} generator answers ({}){note}",
            chosen.model.name(),
            chosen.reason
        ),
    ));
}

/// Whether a generator's figures are the machine's own: taken on a quiet machine, or while
/// other processes held the CPU (then only a bound).
fn load_said(f: &crate::engine::speeds::Figures) -> String {
    match (f.quiet, f.others) {
        (true, Some(o)) => format!(", on a quiet machine: others used {:.0}% of the CPU", o * 100.0),
        (true, None) => String::new(),
        (false, Some(o)) => format!(
            ", while other processes used up to {:.0}% of the CPU: a bound, not this machine's speed",
            o * 100.0
        ),
        (false, None) => ", from before rag measured the load: not known to be quiet".into(),
    }
}

pub(crate) fn dir_bytes(p: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(p) else {
        return 0;
    };
    rd.filter_map(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Every check, in the order `rag doctor` shows them.
pub fn all(s: &Settings) -> Vec<Check> {
    let mut out = Vec::new();
    let memo = s.index.state_dir().join("model-hashes.json");
    let embedder = models(s, &memo, &mut out);
    compute::compute(s, &mut out);
    index::index(s, embedder.as_ref(), &mut out);
    index::cache_and_disk(s, &mut out);
    out
}

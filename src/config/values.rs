//! The value types settings are made of: enums a key takes (`retrieval.mode`, `llm.route`,
//! `embed.pooling`, …) and the object-storage options. A leaf: stages and engines take these
//! from here, so reading a setting never ties a module to a stage.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The retriever: `retrieval.mode`, `--mode`, `rag eval --modes`, a batch line's `mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    // The default of `retrieval.mode`.
    #[default]
    Hybrid,
    Vector,
    Text,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "hybrid" => Some(Mode::Hybrid),
            "vector" => Some(Mode::Vector),
            "text" => Some(Mode::Text),
            _ => None,
        }
    }
}

/// The order of the packed sources in the prompt (`retrieval.source_order`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    /// By path and line: two asks that retrieve the same sources share the prompt prefix.
    Path,
    /// The best-ranked source first.
    BestFirst,
    /// The best-ranked source last, next to the question.
    BestLast,
}

/// How the embedder's token vectors become one: `embed.pooling`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// MiniLM, e5, gte
    Mean,
    /// bge
    Cls,
}

impl Pooling {
    /// As recorded in the index.
    pub fn as_str(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
        }
    }
}

/// What the generator adds to a question before retrieval: `retrieval.expand`, `--expand`.
/// (Plain comments on the variants: doc comments would turn `--help` into its long form.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Expand {
    // The question alone.
    Off,
    // A short passage that would answer it (HyDE), embedded and searched beside the
    // question's own vector.
    Hyde,
    // Search terms for it, searched by full text beside the question's own words.
    Keywords,
    // Both.
    Both,
}

impl Expand {
    pub fn hyde(self) -> bool {
        matches!(self, Expand::Hyde | Expand::Both)
    }

    pub fn keywords(self) -> bool {
        matches!(self, Expand::Keywords | Expand::Both)
    }
}

/// Who re-orders the fused candidates: `retrieval.rerank`, `--rerank`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Rerank {
    // Fusion's order (or the cross-encoder's, where `rerank.model` is set).
    Off,
    // A generator's yes/no judgement of each candidate ([`crate::llm::rerank`]; a served
    // one's from its `logprobs`).
    Generator,
}

/// Where a generator runs: `llm.backend`, `llm.medium_backend`, `llm.large_backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// In this process, through llama.cpp, on the GGUF file `llm.model` / `llm.medium_model`
    /// / `llm.large_model`.
    Local,
    /// An OpenAI-compatible chat-completions server at `llm.url` (llama-server, vLLM,
    /// Ollama, a hosted API).
    Openai,
}

/// Which generator answers: `llm.route`, `--model small|medium|large|auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    Small,
    Medium,
    Large,
    /// Chosen per question from what retrieval found (see docs/how-it-works.md: routing).
    Auto,
}

/// One of the three generators: `small` (llm.model), `medium` (llm.medium_model), `large`
/// (llm.large_model).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Small,
    Medium,
    Large,
}

impl Tier {
    pub const ALL: [Tier; 3] = [Tier::Small, Tier::Medium, Tier::Large];

    pub fn name(self) -> &'static str {
        match self {
            Tier::Small => "small",
            Tier::Medium => "medium",
            Tier::Large => "large",
        }
    }
}

/// How decoding guesses ahead: `llm.speculative`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Speculative {
    /// One token per decode step.
    Off,
    /// Drafts copied from the prompt where its last tokens occurred before (prompt lookup):
    /// an answer that quotes its sources gets those tokens checked several at a time.
    Lookup,
    /// Drafts written by `llm.draft_model` (a smaller model with the same vocabulary).
    Draft,
}

/// The ANN index kinds rag builds (LanceDB's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum AnnType {
    IvfHnswSq,
    IvfPq,
}

/// `[index.storage]`: object-store options (`aws_endpoint`, `aws_region`, `allow_http`, …).
/// Shown by `rag config` with the values of secret keys masked.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(transparent)]
pub struct StorageOptions(pub BTreeMap<String, String>);

impl StorageOptions {
    /// Whether `key` names a credential (its value is never printed).
    pub fn is_secret(key: &str) -> bool {
        let k = key.to_ascii_lowercase();
        ["secret", "password", "token", "sas", "key"]
            .iter()
            .any(|w| k.contains(w))
            && !k.ends_with("key_id")
    }
}

impl Serialize for StorageOptions {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = ser.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            let shown = if StorageOptions::is_secret(k) {
                "***"
            } else {
                v.as_str()
            };
            map.serialize_entry(k, shown)?;
        }
        map.end()
    }
}

/// Where a setting's value came from, for `rag config`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "lowercase", tag = "from", content = "name")]
pub enum Source {
    Default,
    File(PathBuf),
    Env(String),
    Flag,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File(p) => write!(f, "{}", p.display()),
            Source::Env(var) => write!(f, "{var}"),
            Source::Flag => f.write_str("command line"),
        }
    }
}

/// How many of a generator's layers llama.cpp puts on a GPU: `llm.gpu_layers` (and the
/// medium and large routes' own), `--gpu-layers`. In TOML `"auto"` or a count; 0 keeps the
/// generator on the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layers {
    /// Every layer where this build has a GPU backend and llama.cpp found a device, else 0.
    #[default]
    Auto,
    /// At most this many (llama.cpp counts the output layer as one more).
    Count(u32),
}

impl std::str::FromStr for Layers {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "auto" => Ok(Layers::Auto),
            n => n.parse().map(Layers::Count).map_err(|_| {
                format!("{s:?} is not a layer count: give `auto` or a whole number (0 = CPU only)")
            }),
        }
    }
}

impl std::fmt::Display for Layers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Layers::Auto => f.write_str("auto"),
            Layers::Count(n) => write!(f, "{n}"),
        }
    }
}

impl Serialize for Layers {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Layers::Auto => s.serialize_str("auto"),
            Layers::Count(n) => s.serialize_u32(*n),
        }
    }
}

impl<'de> Deserialize<'de> for Layers {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // A count from TOML arrives as an integer; from RAG_LLM_GPU_LAYERS (typed like the
        // default, "auto") as a string.
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = Layers;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"auto\" or a whole number of layers (0 = CPU only)")
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Layers, E> {
                u32::try_from(n).map(Layers::Count).map_err(|_| {
                    E::custom(format!("{n} is not a layer count: give \"auto\" or a whole number from 0 (0 = CPU only)"))
                })
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Layers, E> {
                self.visit_i64(i64::try_from(n).unwrap_or(-1))
            }
            fn visit_str<E: serde::de::Error>(self, t: &str) -> Result<Layers, E> {
                t.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(Visit)
    }
}

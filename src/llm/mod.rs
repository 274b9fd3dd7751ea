//! llama.cpp, and only here (crate llama-cpp-2): load a GGUF file, render the model's chat
//! template into tokens without letting document text become control tokens, prefill in
//! `n_batch` slices with logits for the last token only, sample, and stream UTF-8-safe pieces.
//!
//! A [`Session`] owns one `LlamaContext` and remembers which tokens its KV cache holds, so a
//! new prompt that shares a prefix with the previous one only prefills the rest.

use std::io::Read;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::token::LlamaToken;

/// A token id of the loaded generator (so callers need not name llama-cpp-2).
pub type Token = LlamaToken;

use crate::exit::ExitError;

mod batch;
pub mod device;
mod generator;
pub mod judge;
mod remote;
pub mod rerank;
mod sample;
mod session;
pub mod speculate;
pub use batch::{Done, Job, Jobs};
pub use generator::Generator;
pub use remote::Remote;
pub use sample::Sampling;
use sample::{argmax, pick, sampler, CopyBias};
#[cfg(test)]
use sample::{first_text_token, opens_bracket};
use session::Utf8Stream;
pub use session::{ids, repeating_tail, Decode, Prefill, Session, StopReason};

/// llama.cpp allows one backend per process.
fn backend() -> Result<&'static LlamaBackend> {
    static BACKEND: OnceLock<std::result::Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            // llama.cpp logs every tensor to stderr; route it to `tracing`, which is silent
            // unless a subscriber is installed, so stderr stays for people.
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            LlamaBackend::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| anyhow!("initialising llama.cpp: {e}"))
}

/// A chat message whose content is a list of parts; each part is tokenized on its own, so
/// an earlier part's tokens never depend on a later one (stable prefixes for the KV cache).
#[derive(Debug, Clone)]
pub struct Message {
    pub role: &'static str,
    pub parts: Vec<String>,
}

/// A prompt of two messages: `system`, then the user's `parts` (each tokenized on its own,
/// [`Message`]): what the citation judge, the reranker and query expansion send.
pub fn chat<const N: usize>(system: &str, parts: [&str; N]) -> Vec<Message> {
    vec![
        Message {
            role: "system",
            parts: vec![system.to_string()],
        },
        Message {
            role: "user",
            parts: parts.iter().map(|p| p.to_string()).collect(),
        },
    ]
}

/// How the context is built.
#[derive(Debug, Clone)]
pub struct ContextParams {
    pub n_ctx: u32,
    pub n_batch: u32,
    pub threads: usize,
    pub threads_batch: usize,
}

pub struct Llm {
    model: LlamaModel,
    template: LlamaChatTemplate,
    pub path: PathBuf,
    /// Loaded without weights: it tokenizes, but a context on it would abort llama.cpp.
    vocab_only: bool,
    /// Layers on a GPU, of the model's layers (llama.cpp's count: blocks + output).
    pub offload: (u32, u32),
}

/// Checks the file before llama.cpp sees it: llama.cpp answers a bad file with a null pointer
/// and no reason, so we give the reason and the fix ourselves.
fn check_gguf(path: &Path) -> Result<()> {
    // A FIFO or a device would block or never end: only a regular file is opened.
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        return Err(ExitError::model(format!(
            "model file {} is not a regular file; point llm.model, llm.medium_model, llm.large_model or --model at a GGUF file",
            path.display()
        )));
    }
    let mut f = crate::atomic::open_regular(path).map_err(|e| {
        // The cause alone ("No such file or directory"): the path is named once, here.
        let cause = e.root_cause();
        ExitError::model(format!(
            "model file {} cannot be opened ({cause}); {} (it fetches the 1.5B too; `--small` the 0.5B) or point llm.model, llm.medium_model, llm.large_model or --model at a GGUF file",
            path.display(),
            crate::config::setup_hint()
        ))
    })?;
    let mut magic = [0u8; 4];
    if f.read_exact(&mut magic).is_err() || &magic != b"GGUF" {
        return Err(ExitError::model(format!(
            "{} is not a GGUF model file (it does not start with `GGUF`); point llm.model / --model at a .gguf file",
            path.display()
        )));
    }
    Ok(())
}

impl Llm {
    /// Loads a GGUF model (memory-mapped). `vocab_only` loads just the tokenizer, for dry runs.
    /// On the CPU alone.
    pub fn load(path: &Path, vocab_only: bool) -> Result<Llm> {
        Self::load_on(path, vocab_only, crate::config::Layers::Count(0))
    }

    /// Loads a GGUF model with up to `layers` of its layers on a GPU, where this build has
    /// a GPU backend and llama.cpp found a device ([`device`]).
    pub fn load_on(path: &Path, vocab_only: bool, layers: crate::config::Layers) -> Result<Llm> {
        let started = Instant::now();
        let have_device = !vocab_only && !device::devices().is_empty();
        let llm = Self::load_inner(path, vocab_only, device::requested(layers, have_device))?;
        tracing::info!(model = %path.display(), vocab_only, gpu_layers = llm.offload.0, ms = started.elapsed().as_millis() as u64, "generator loaded");
        Ok(llm)
    }

    fn load_inner(path: &Path, vocab_only: bool, gpu_layers: u32) -> Result<Llm> {
        check_gguf(path)?;
        let backend = backend()?;
        let params = LlamaModelParams::default()
            .with_n_gpu_layers(gpu_layers)
            .with_use_mmap(true)
            .with_vocab_only(vocab_only);
        let model = LlamaModel::load_from_file(backend, path, &params).map_err(|e| {
            ExitError::model(format!(
                "llama.cpp could not load {} ({e}); the file may be truncated or of an unsupported architecture",
                path.display()
            ))
        })?;
        // ChatML is the common fallback for models that ship no template.
        let template = model
            .chat_template(None)
            .or_else(|_| LlamaChatTemplate::new("chatml").map_err(|e| anyhow!(e)))
            .context("reading the model's chat template")?;
        let offload = device::offloaded(gpu_layers, model.n_layer());
        Ok(Llm {
            model,
            template,
            path: path.to_path_buf(),
            vocab_only,
            offload,
        })
    }

    /// Tokens of `text`; `special` lets text like `<|im_start|>` become control tokens, so it
    /// is true only for text that comes from the chat template itself.
    pub fn tokenize(&self, text: &str, special: bool) -> Vec<LlamaToken> {
        self.model.vocab().tokenize(text.as_bytes(), false, special)
    }

    pub fn count_tokens(&self, text: &str) -> usize {
        self.tokenize(text, false).len()
    }

    /// Whether llama.cpp may compute on a GPU for this model. With no layer there, large
    /// batches would still go to the device (llama.cpp's op offload, on by default): on
    /// lavapipe that made a prefill of 32 tokens 6 tok/s instead of hundreds. `gpu_layers =
    /// 0` means the CPU alone.
    pub fn offloads(&self) -> bool {
        self.offload.0 > 0
    }

    pub fn n_vocab(&self) -> i32 {
        self.model.n_vocab()
    }

    /// `n` token ids spread deterministically over the vocabulary, like llama-bench's random
    /// prompt (`rag bench llm`).
    pub fn synthetic_prompt(&self, n: usize) -> Vec<LlamaToken> {
        let n_vocab = self.n_vocab().max(2) as u64;
        (0..n as u64)
            .map(|i| LlamaToken::new(((i * 7919 + 13) % (n_vocab - 1) + 1) as i32))
            .collect()
    }

    pub fn n_ctx_train(&self) -> u32 {
        self.model.n_ctx_train()
    }

    /// Renders messages with the model's chat template and tokenizes the result: template text
    /// with special-token parsing, message content without it.
    pub fn chat_tokens(&self, messages: &[Message]) -> Result<Vec<LlamaToken>> {
        // Render with sentinels in place of the content, then splice the content back in as
        // tokens. The sentinels use private-use characters no template touches.
        let sentinel = |i: usize| format!("\u{E000}{i}\u{E001}");
        let chat = messages
            .iter()
            .enumerate()
            .map(|(i, m)| LlamaChatMessage::new(m.role.to_string(), sentinel(i)))
            .collect::<std::result::Result<Vec<_>, _>>()
            .context("building chat messages")?;
        let rendered = self
            .model
            .apply_chat_template(&self.template, &chat, true)
            .map_err(|e| anyhow!("applying the chat template of {}: {e}", self.path.display()))?;

        let mut tokens = Vec::new();
        let vocab = self.model.vocab();
        if vocab.should_add_bos() {
            tokens.push(vocab.bos());
        }
        let mut rest = rendered.as_str();
        for (i, m) in messages.iter().enumerate() {
            let s = sentinel(i);
            let at = rest.find(&s).ok_or_else(|| {
                anyhow!(
                    "the chat template of {} dropped message {i}",
                    self.path.display()
                )
            })?;
            tokens.extend(self.tokenize(&rest[..at], true));
            for part in &m.parts {
                tokens.extend(self.tokenize(part, false));
            }
            rest = &rest[at + s.len()..];
        }
        tokens.extend(self.tokenize(rest, true));
        Ok(tokens)
    }

    /// The prompt text exactly as the chat template renders it (for `--dry-run`).
    pub fn render(&self, messages: &[Message]) -> Result<String> {
        let chat = messages
            .iter()
            .map(|m| LlamaChatMessage::new(m.role.to_string(), m.parts.concat()))
            .collect::<std::result::Result<Vec<_>, _>>()
            .context("building chat messages")?;
        self.model
            .apply_chat_template(&self.template, &chat, true)
            .map_err(|e| anyhow!("applying the chat template of {}: {e}", self.path.display()))
    }

    pub fn session(&self, p: &ContextParams) -> Result<Session<'_>> {
        if self.vocab_only {
            return Err(anyhow!(
                "{} was loaded without its weights (vocabulary only); a context needs them",
                self.path.display()
            ));
        }
        let n_ctx = if p.n_ctx == 0 {
            self.model.n_ctx_train()
        } else {
            p.n_ctx
        };
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(n_ctx))
            .with_n_batch(p.n_batch)
            .with_n_ubatch(p.n_batch)
            .with_n_threads(i32::try_from(p.threads).unwrap_or(1))
            .with_n_threads_batch(i32::try_from(p.threads_batch).unwrap_or(1))
            .with_op_offload(self.offloads());
        let ctx = self.model.new_context(backend()?, params).map_err(|e| {
            anyhow!("creating a llama.cpp context of {n_ctx} tokens: {e}; try a smaller llm.n_ctx")
        })?;
        Ok(Session {
            llm: self,
            ctx,
            tokens: Vec::new(),
            n_batch: p.n_batch as usize,
            last_logits: 0,
        })
    }
}

/// The llama.cpp build this binary links (KV state files are only valid within one build).
pub const LLAMA_CPP_BUILD: &str = env!("BUILD_LLAMA_CPP_SYS");

#[cfg(test)]
mod tests {
    use super::Utf8Stream;

    /// The small generator's vocabulary (no weights): what token-level tests read.
    fn small_vocab() -> super::Llm {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(crate::catalog::default_path("llm.model").unwrap());
        super::Llm::load(&path, true).unwrap()
    }

    #[test]
    fn an_answer_cannot_open_with_a_bracket() {
        let llm = small_vocab();
        let vocab = llm.model.vocab();
        let bracket = llm.tokenize("[S1]", false)[0];
        let bracket_space = llm.tokenize(" [", false)[0];
        let word = llm.tokenize("The", false)[0];
        assert!(super::opens_bracket(&vocab, bracket));
        assert!(super::opens_bracket(&vocab, bracket_space));
        assert!(!super::opens_bracket(&vocab, word));
        // The bracket tokens lead; the best token that starts text wins.
        let mut logits = vec![0.0f32; llm.n_vocab() as usize];
        logits[bracket.0 as usize] = 9.0;
        logits[bracket_space.0 as usize] = 8.0;
        logits[word.0 as usize] = 7.0;
        assert_eq!(super::first_text_token(&logits, &vocab), word);
    }

    #[test]
    fn the_copy_bias_lifts_the_prompts_tokens_and_end_of_turn_only() {
        let llm = small_vocab();
        let prompt = llm.tokenize("Run PRAGMA auto_vacuum", false);
        assert!(super::CopyBias::new(0.0, &prompt, &llm.model).is_none());
        let c = super::CopyBias::new(1.5, &prompt, &llm.model).unwrap();
        let n = llm.n_vocab() as usize;
        let invented = llm.tokenize(" zebra", false)[0];
        let mut logits = vec![0.0f32; n];
        logits[invented.0 as usize] = 1.0;
        let biased = c.apply(&logits);
        for t in &prompt {
            assert_eq!(biased[t.0 as usize], 1.5);
        }
        assert_eq!(biased[invented.0 as usize], 1.0);
        let vocab = llm.model.vocab();
        let eog: Vec<usize> = (0..n)
            .filter(|&t| vocab.is_eog(llama_cpp_2::token::LlamaToken::new(t as i32)))
            .collect();
        assert!(!eog.is_empty());
        assert!(eog.iter().all(|&t| biased[t] == 1.5));
        // Everything else keeps its logit, and llama.cpp's sampler gets the same set.
        let lifted = biased.iter().filter(|&&l| l == 1.5).count();
        assert_eq!(c.biases().len(), lifted);
        assert!(lifted < 20, "{lifted} tokens lifted");
        assert_ne!(super::argmax(&biased), invented);
    }

    #[test]
    fn repetition_is_found_at_its_shortest_period() {
        use llama_cpp_2::token::LlamaToken;
        let t = |v: &[i32]| v.iter().map(|&i| LlamaToken::new(i)).collect::<Vec<_>>();
        let block = [1, 2, 3, 4, 5, 6, 7, 8, 9];
        let looped: Vec<i32> = [9, 8].into_iter().chain(block.repeat(3)).collect();
        assert_eq!(super::repeating_tail(&t(&looped), 3), Some(9));
        assert_eq!(super::repeating_tail(&t(&looped), 4), None);
        // Short repeats (table rows, "| |") are not loops.
        assert_eq!(
            super::repeating_tail(&t(&[1, 2, 1, 2, 1, 2, 1, 2]), 2),
            None
        );
        assert_eq!(
            super::repeating_tail(&t(&(1..=40).collect::<Vec<_>>()), 2),
            None
        );
    }

    #[test]
    fn utf8_stream_holds_split_characters() {
        let mut s = Utf8Stream::default();
        let euro = "€".as_bytes();
        assert_eq!(s.push(b"a"), Some("a".into()));
        assert_eq!(s.push(&euro[..1]), None);
        assert_eq!(s.push(&euro[1..2]), None);
        assert_eq!(s.push(&euro[2..]), Some("€".into()));
        assert_eq!(s.push(&[0xff, b'b']), Some("\u{FFFD}b".into()));
        assert_eq!(s.push(&euro[..2]), None);
        assert_eq!(s.finish(), Some("\u{FFFD}".into()));
    }
}

//! One generator over both backends: a GGUF file loaded in this process (with its SHA-256,
//! the prompt cache's key) or an OpenAI-compatible server. What packing and reporting need
//! (token counts, the training window, the rendered prompt, a name) is one call on either;
//! what only a model in this process can do (a KV session to reuse, drafts to verify,
//! sequences batched together) is reached through [`Generator::local`].

use std::path::Path;

use anyhow::Result;

use super::{Llm, Message, Remote};
use crate::config::{Backend, Layers, LlmSettings};

pub enum Generator {
    Local { llm: Llm, sha256: String },
    Remote(Remote),
}

impl Generator {
    /// Loads the GGUF file at `path` (named by `sha256`, which hashes it) with up to
    /// `layers` of it on a GPU, or connects to the server `s.url` names. `vocab_only` loads
    /// a local model's vocabulary alone: enough to pack prompts, not to generate.
    pub fn open(
        backend: Backend,
        path: &Path,
        s: &LlmSettings,
        vocab_only: bool,
        layers: Layers,
        sha256: impl FnOnce(&Path) -> Result<String>,
    ) -> Result<Generator> {
        Ok(match backend {
            Backend::Local => {
                let llm = Llm::load_on(path, vocab_only, layers)?;
                let sha256 = sha256(&llm.path)?;
                Generator::Local { llm, sha256 }
            }
            Backend::Openai => Generator::Remote(Remote::open(s)?),
        })
    }

    /// The model in this process and its SHA-256, if it is one.
    pub fn local(&self) -> Option<(&Llm, &str)> {
        match self {
            Generator::Local { llm, sha256 } => Some((llm, sha256)),
            Generator::Remote(_) => None,
        }
    }

    /// The server connection, if it is one.
    pub fn remote(&self) -> Option<&Remote> {
        match self {
            Generator::Local { .. } => None,
            Generator::Remote(g) => Some(g),
        }
    }

    pub fn count_tokens(&self, text: &str) -> usize {
        match self {
            Generator::Local { llm, .. } => llm.count_tokens(text),
            Generator::Remote(g) => g.count_tokens(text),
        }
    }

    /// Tokens of the whole chat prompt.
    pub fn chat_len(&self, messages: &[Message]) -> Result<usize> {
        match self {
            Generator::Local { llm, .. } => Ok(llm.chat_tokens(messages)?.len()),
            Generator::Remote(g) => g.chat_len(messages),
        }
    }

    /// The context the model was trained for, or the server's per-request context.
    pub fn n_ctx_train(&self) -> Result<u32> {
        match self {
            Generator::Local { llm, .. } => Ok(llm.n_ctx_train()),
            Generator::Remote(g) => g.n_ctx_default(),
        }
    }

    /// What an answer names as its model: the file and its SHA-256, or the server and model.
    pub fn identity(&self) -> (String, String) {
        match self {
            Generator::Local { llm, sha256 } => (llm.path.display().to_string(), sha256.clone()),
            Generator::Remote(g) => (g.name(), String::new()),
        }
    }

    /// The prompt exactly as the model reads it, and its length in tokens.
    pub fn render(&self, messages: &[Message]) -> Result<(String, usize)> {
        match self {
            Generator::Local { llm, .. } => {
                let tokens = llm.chat_tokens(messages)?;
                Ok((llm.render(messages)?, tokens.len()))
            }
            Generator::Remote(g) => Ok((g.render(messages), g.chat_len(messages)?)),
        }
    }
}

//! Settings: built-in defaults < `rag.toml` < `RAG_*` environment < command-line flags,
//! resolved once into [`Settings`]. Only this module reads the config file and the environment.
//!
//! Every key `section.key` has an environment variable `RAG_SECTION_KEY` (for example
//! `llm.n_ctx` ↔ `RAG_LLM_N_CTX`), generated from the defaults so no key can be forgotten.
//! Relative paths in `rag.toml` are relative to that file; in the environment and on the
//! command line they are relative to the current directory.

mod file;
mod flags;
pub mod init;
mod models;
mod resolve;
mod settings;
pub mod stores;
mod validate;
mod values;

pub use flags::{Flags, LlmFlags, ModelChoice, RetrievalFlags};
pub use models::{find_ort, found_ort, setup_hint, user_models_dir};
pub use resolve::{log_filter, resolve, Env};
pub use settings::*;
pub use values::*;

#[cfg(test)]
mod tests;

//! The command line's layer of settings, typed: the flags a command was given, as the
//! settings they set, over the defaults, `rag.toml` and `RAG_*`. Field names are the
//! settings keys (`llm.max_tokens` is `Flags::llm.max_tokens`), so a flag cannot name a key
//! that does not exist (the resolver checks every key it serialises) nor give a value of the
//! wrong type.

use std::path::PathBuf;

use serde::Serialize;

use super::{Mode, Route};

/// Every setting a flag can set; `None` leaves the lower layers in force (TOML has no null:
/// serialising leaves a `None` field out of the layer).
#[derive(Debug, Default, Clone, Serialize)]
pub struct Flags {
    pub index: IndexFlags,
    pub embed: EmbedFlags,
    pub retrieval: RetrievalFlags,
    pub llm: LlmFlags,
    pub serve: ServeFlags,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct IndexFlags {
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct EmbedFlags {
    pub batch_size: Option<usize>,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct RetrievalFlags {
    pub top_k: Option<usize>,
    pub large_top_k: Option<usize>,
    pub mode: Option<Mode>,
    pub exact: Option<bool>,
    pub expand: Option<super::Expand>,
    pub rerank: Option<super::Rerank>,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct LlmFlags {
    pub route: Option<Route>,
    pub model: Option<PathBuf>,
    pub max_tokens: Option<u32>,
    pub seed: Option<u32>,
    pub n_ctx: Option<u32>,
    pub threads: Option<usize>,
    pub threads_batch: Option<usize>,
    pub gpu_layers: Option<super::Layers>,
    pub medium_gpu_layers: Option<super::Layers>,
    pub large_gpu_layers: Option<super::Layers>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct ServeFlags {
    pub addr: Option<String>,
}

/// `--model`: a route (`small`, `medium`, `large`, `auto`) or a GGUF file to answer with.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelChoice {
    Route(Route),
    File(PathBuf),
}

impl ModelChoice {
    /// clap's parser for `--model`: the route names win over files of the same name.
    pub fn parse(s: &str) -> Result<Self, String> {
        use clap::ValueEnum;
        if s.is_empty() {
            return Err("give small, medium, large, auto or a GGUF file".into());
        }
        Ok(match Route::from_str(s, false) {
            Ok(r) => ModelChoice::Route(r),
            Err(_) => ModelChoice::File(s.into()),
        })
    }

    /// The settings it stands for: a file answers alone (route small, with that model).
    pub fn apply(&self, llm: &mut LlmFlags) {
        match self {
            ModelChoice::Route(r) => llm.route = Some(*r),
            ModelChoice::File(f) => {
                llm.model = Some(f.clone());
                llm.route = Some(Route::Small);
            }
        }
    }
}

impl Flags {
    /// As a TOML layer of `section.key` values, only the keys set.
    pub(super) fn layer(&self) -> anyhow::Result<toml::Table> {
        match toml::Value::try_from(self) {
            Ok(toml::Value::Table(t)) => Ok(t),
            // A path that is not UTF-8 cannot become a setting (nor a TOML string).
            Ok(_) | Err(_) => Err(crate::exit::ExitError::usage(
                "a path given on the command line is not valid UTF-8; rename it or give another"
                    .into(),
            )),
        }
    }
}

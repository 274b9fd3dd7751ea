//! The optional cross-encoder reranker: fastembed's `TextRerank` on a user's own ONNX model
//! (no reranker weights ship with rag). A cross-encoder reads the question and a passage
//! together, so it judges relevance better than comparing two separately made vectors, at
//! the cost of one model run per candidate: it only re-scores the fused candidates.

use std::path::Path;

use anyhow::{anyhow, Result};
use fastembed::{
    AutoDevicePolicy, RerankInitOptionsUserDefined, TextRerank, UserDefinedRerankingModel,
};

use super::{ort_environment, read, tokenizer_files};
use crate::config::{threads, EmbedSettings, RerankSettings};
use crate::exit::ExitError;

pub struct Reranker {
    model: TextRerank,
    batch_size: usize,
    /// How many fused spans it scores.
    pub candidates: usize,
}

impl Reranker {
    /// The configured reranker, or `None` when `rerank.model` is empty.
    pub fn load(s: &RerankSettings, embed: &EmbedSettings) -> Result<Option<Reranker>> {
        if s.model.as_os_str().is_empty() {
            return Ok(None);
        }
        let keys = "rerank.model / rerank.tokenizer_dir";
        let onnx = read(&s.model, "reranker model", keys)?;
        let dir = if s.tokenizer_dir.as_os_str().is_empty() {
            s.model.parent().unwrap_or(Path::new("."))
        } else {
            &s.tokenizer_dir
        };
        let files = tokenizer_files(dir, keys)?;
        let options = RerankInitOptionsUserDefined::new()
            .with_environment(ort_environment(&embed.ort_lib)?)
            .with_max_length(s.max_length)
            .with_intra_threads(threads(embed.threads))
            // As for the embedder: idle workers must not spin while llama.cpp needs the cores.
            .with_session_config("session.intra_op.allow_spinning", "0")
            .with_session_config("session.inter_op.allow_spinning", "0")
            .with_auto_device(AutoDevicePolicy::PreferCPU);
        let model =
            TextRerank::try_new_from_user_defined(UserDefinedRerankingModel::new(onnx, files), options)
                .map_err(|e| {
                    ExitError::model(format!(
                        "cannot load the reranker {} ({e}); it must be an ONNX cross-encoder with inputs input_ids and attention_mask and output logits, or set rerank.model = \"\" to turn reranking off",
                        s.model.display()
                    ))
                })?;
        Ok(Some(Reranker {
            model,
            batch_size: s.batch_size,
            candidates: s.candidates,
        }))
    }

    /// One relevance score per passage, in input order (higher is more relevant).
    pub fn scores(&mut self, query: &str, passages: &[String]) -> Result<Vec<f32>> {
        if passages.is_empty() {
            return Ok(Vec::new());
        }
        let docs: Vec<&str> = passages.iter().map(String::as_str).collect();
        let ranked = self
            .model
            .rerank(query, docs.as_slice(), false, Some(self.batch_size))
            .map_err(|e| anyhow!("reranking: {e}"))?;
        let mut out = vec![f32::NEG_INFINITY; passages.len()];
        for r in ranked {
            if let Some(slot) = out.get_mut(r.index) {
                *slot = r.score;
            }
        }
        Ok(out)
    }
}

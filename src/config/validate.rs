//! Validation of resolved settings: ranges, finiteness and the relations between keys, each
//! refused with a message naming the key and what to give instead.

use anyhow::Result;
use toml::Value;

use super::resolve::key_default;
use super::settings::Settings;
use crate::exit::ExitError;

impl Settings {
    pub(super) fn validate(&self) -> Result<()> {
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
    fn float_ranges(&self) -> [(&'static str, f64, f64, f64); 18] {
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
            ("retrieval.expand_weight", r.expand_weight.into(), 0.0, 1e3),
            ("retrieval.text_weight", r.text_weight.into(), 0.0, 1e3),
            ("retrieval.file_weight", r.file_weight.into(), 0.0, 1e3),
            ("llm.repeat_penalty", l.repeat_penalty.into(), 0.0, 10.0),
            ("llm.dry_multiplier", l.dry_multiplier.into(), 0.0, 10.0),
            ("llm.dry_base", l.dry_base.into(), 1.0, 10.0),
            ("llm.copy_bias", l.copy_bias.into(), -10.0, 10.0),
            ("chunk.parse_timeout_s", c.parse_timeout_s, 0.001, 86_400.0),
            ("llm.temperature", l.temperature.into(), 0.0, 2.0),
            ("llm.top_p", l.top_p.into(), 0.0, 1.0),
            ("llm.answer_budget_s", l.answer_budget_s, 0.1, 86_400.0),
            ("llm.route_similarity", l.route_similarity.into(), 0.0, 1.0),
            ("llm.judge_min", l.judge_min.into(), 0.0, 1.0),
        ]
    }

    /// Each integer setting with its value and valid range (`llm.repeat_last_n` shifted by
    /// one, so its -1 fits).
    fn int_ranges(&self) -> [(&'static str, u64, u64, u64); 25] {
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
            ("retrieval.large_top_k", r.large_top_k as u64, 0, 1_000),
            ("retrieval.candidates", r.candidates as u64, 1, 100_000),
            ("retrieval.neighbors", r.neighbors as u64, 0, 1_000),
            ("retrieval.compress", r.compress as u64, 0, 10_000),
            ("retrieval.expand_tokens", r.expand_tokens.into(), 1, 1_024),
            (
                "retrieval.rerank_candidates",
                r.rerank_candidates as u64,
                1,
                64,
            ),
            ("retrieval.rerank_ms", r.rerank_ms, 1, 3_600_000),
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
}

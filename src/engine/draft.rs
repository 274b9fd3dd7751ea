//! Which draft speculative decoding reads for an answer (`llm.speculative`): none, the
//! prompt (lookup), or `llm.draft_model`, loaded once per engine and given a context of its
//! own per answer. A draft model that cannot serve (missing, another vocabulary, the answering
//! model itself) falls back to lookup with a warning: the answer is the same either way.

use std::sync::OnceLock;

use super::{Answerer, Event, On};
use crate::config::Speculative;
use crate::llm::speculate::{Drafter, Lookup, ModelDraft};
use crate::llm::{ContextParams, Llm};

/// The draft model, or why it could not be loaded (kept, so a failure is not retried).
pub(super) type DraftSlot = OnceLock<std::result::Result<Llm, String>>;

impl Answerer {
    /// The draft for an answer by `llm` in a context of `params`; a draft model that cannot
    /// serve is a warning on `on`.
    pub(super) fn drafter(
        &self,
        llm: &Llm,
        params: &ContextParams,
        on: On<'_>,
    ) -> std::io::Result<Drafter<'_>> {
        Ok(match self.settings.llm.speculative {
            Speculative::Off => Drafter::Off,
            Speculative::Lookup => Drafter::Lookup(Lookup::new(self.settings.llm.draft_tokens)),
            Speculative::Draft => match self.model_draft(llm, params) {
                Ok(Some(d)) => Drafter::Model(d),
                Ok(None) => Drafter::Lookup(Lookup::new(self.settings.llm.draft_tokens)),
                Err(e) => {
                    let w = format!("{e:#}; drafting from the prompt instead");
                    on(Event::Warning(&w))?;
                    Drafter::Lookup(Lookup::new(self.settings.llm.draft_tokens))
                }
            },
        })
    }

    /// `None` when the answering model is the draft model (it would only guess itself).
    fn model_draft(
        &self,
        llm: &Llm,
        params: &ContextParams,
    ) -> anyhow::Result<Option<ModelDraft<'_>>> {
        let path = &self.settings.llm.draft_model;
        let same = |a: &std::path::Path, b: &std::path::Path| {
            std::fs::canonicalize(a)
                .ok()
                .zip(std::fs::canonicalize(b).ok())
                .is_some_and(|(a, b)| a == b)
        };
        if same(path, &llm.path) {
            return Ok(None);
        }
        let draft = self
            .draft
            .get_or_init(|| Llm::load(path, false).map_err(|e| format!("llm.draft_model: {e:#}")))
            .as_ref()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let session = draft.session(params)?;
        Ok(Some(ModelDraft::new(
            draft,
            llm,
            session,
            self.settings.llm.draft_tokens,
        )?))
    }
}

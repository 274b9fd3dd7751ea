//! A remote embedder: OpenAI-compatible `POST /embeddings` (llama-server `--embeddings`, TEI,
//! vLLM, Ollama, a hosted API), one request per batch, retried like every remote request.

use anyhow::Result;
use serde_json::{json, Value};

use crate::config::EmbedSettings;
use crate::exit::ExitError;
use crate::remote::Client;

pub struct Embeddings {
    client: Client,
    model: String,
}

impl Embeddings {
    pub fn open(s: &EmbedSettings) -> Result<Embeddings> {
        let client = Client::new(&s.url, &s.api_key_env, s.timeout_s, s.retries, "embed.url")?;
        let model = if s.remote_model.is_empty() {
            client.first_model("embed.remote_model")?
        } else {
            s.remote_model.clone()
        };
        Ok(Embeddings { client, model })
    }

    /// The model name the server was asked for (what the index records, with `openai:`).
    pub fn model(&self) -> &str {
        &self.model
    }

    /// One vector per text, in order.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let body = json!({ "model": self.model, "input": texts, "encoding_format": "float" });
        let v: Value = self
            .client
            .post("/embeddings", &body)?
            .json()
            .map_err(|e| {
                ExitError::model(format!(
                    "{}/embeddings did not answer JSON: {e}",
                    self.client.base()
                ))
            })?;
        vectors(&v, texts.len()).map_err(|why| {
            ExitError::model(format!(
                "{}/embeddings: {why}; is embed.url an embeddings server (llama-server needs --embeddings)?",
                self.client.base()
            ))
        })
    }
}

/// The vectors of an embeddings response, placed by their `index`; all `n` present, of one
/// dimension, finite.
fn vectors(v: &Value, n: usize) -> std::result::Result<Vec<Vec<f32>>, String> {
    let data = v
        .get("data")
        .and_then(Value::as_array)
        .ok_or("no `data` list in the answer")?;
    let mut out: Vec<Option<Vec<f32>>> = vec![None; n];
    for (k, item) in data.iter().enumerate() {
        let i = item
            .get("index")
            .and_then(Value::as_u64)
            .map_or(k, |i| i as usize);
        let emb = item
            .get("embedding")
            .and_then(Value::as_array)
            .ok_or("an item without an `embedding` list")?;
        let vec: Option<Vec<f32>> = emb
            .iter()
            .map(|x| x.as_f64().map(|f| f as f32).filter(|f| f.is_finite()))
            .collect();
        let vec = vec.ok_or("an embedding with a value that is not a finite number")?;
        let slot = out
            .get_mut(i)
            .ok_or("an embedding for an input never sent")?;
        *slot = Some(vec);
    }
    let out: Vec<Vec<f32>> = out
        .into_iter()
        .collect::<Option<_>>()
        .ok_or_else(|| format!("{} embeddings for {n} inputs", data.len()))?;
    let dim = out.first().map_or(0, Vec::len);
    if dim == 0 || out.iter().any(|v| v.len() != dim) {
        return Err("embeddings of different or zero length".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embeddings_are_placed_by_index_and_checked() {
        let v = json!({"data": [
            {"index": 1, "embedding": [0.0, 1.0]},
            {"index": 0, "embedding": [1.0, 0.0]}
        ]});
        assert_eq!(
            vectors(&v, 2).unwrap(),
            vec![vec![1.0, 0.0], vec![0.0, 1.0]]
        );
        assert!(vectors(&v, 3).unwrap_err().contains("2 embeddings for 3"));
        let ragged = json!({"data": [{"embedding": [1.0]}, {"embedding": [1.0, 2.0]}]});
        assert!(vectors(&ragged, 2).is_err());
        let nan = json!({"data": [{"embedding": [1.0, "x"]}]});
        assert!(vectors(&nan, 1).is_err());
        assert!(vectors(&json!({"object": "list"}), 1).is_err());
    }
}

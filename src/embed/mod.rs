//! Text embeddings with fastembed on ONNX Runtime, loaded from local files only (crates
//! fastembed and ort live here and nowhere else), or from an OpenAI-compatible server
//! (`embed.backend = "openai"`, see `embed::remote`). Also owns the embedder's tokenizer, which
//! the chunker uses to size chunks, so a chunk is never silently truncated by the model.
//! The optional cross-encoder reranker lives in [`rerank`].

mod remote;
mod rerank;
pub use rerank::Reranker;

use std::path::Path;
use std::sync::OnceLock;

use anyhow::{anyhow, Context, Result};
use fastembed::{
    AutoDevicePolicy, InitOptionsUserDefined, Pooling, QuantizationMode, TextEmbedding,
    TokenizerFiles, UserDefinedEmbeddingModel,
};
use serde::{Deserialize, Serialize};
use tokenizers::Tokenizer;

use crate::config::{threads, EmbedSettings};
use crate::exit::ExitError;

/// What identifies the vectors in an index: another model or dimension makes them incomparable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelInfo {
    pub name: String,
    pub dim: usize,
    /// blake3 of the ONNX file.
    pub file_hash: String,
    /// mean | cls (indexes from before this setting were mean-pooled).
    #[serde(default = "mean")]
    pub pooling: String,
    /// Text put before every chunk when it was embedded.
    #[serde(default)]
    pub passage_prefix: String,
}

impl ModelInfo {
    /// The record of an index of synthetic vectors (benchmarks): no model can search it.
    pub fn synthetic(dim: usize) -> ModelInfo {
        ModelInfo {
            name: "synthetic".into(),
            dim,
            file_hash: "synthetic".into(),
            pooling: mean(),
            passage_prefix: String::new(),
        }
    }
}

fn mean() -> String {
    "mean".into()
}

/// Where the vectors come from.
enum Model {
    Local(Box<TextEmbedding>),
    Remote(remote::Embeddings),
}

pub struct Embedder {
    model: Model,
    /// The model's tokenizer without truncation or padding, for counting.
    counter: Tokenizer,
    pub info: ModelInfo,
    pub max_length: usize,
    batch_size: usize,
    query_prefix: String,
}

/// The order texts are embedded in: by length, so each batch pads little. Byte length tracks
/// token length closely enough; a stable sort keeps the batches deterministic.
pub fn batch_order(texts: &[String]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..texts.len()).collect();
    order.sort_by_key(|&i| texts[i].len());
    order
}

/// Padding tokens a batching adds: each batch is padded to its longest text.
pub fn padding(lens: &[usize], order: &[usize], batch: usize) -> usize {
    order
        .chunks(batch.max(1))
        .map(|b| {
            let longest = b.iter().map(|&i| lens[i]).max().unwrap_or(0);
            b.iter().map(|&i| longest - lens[i]).sum::<usize>()
        })
        .sum()
}

/// ONNX Runtime allows one environment per process.
fn ort_environment(lib: &Path) -> Result<ort::environment::Environment> {
    static ENV: OnceLock<ort::environment::Environment> = OnceLock::new();
    if let Some(env) = ENV.get() {
        return Ok(env.clone());
    }
    if !lib.is_file() {
        return Err(ExitError::model(format!(
            "ONNX Runtime library {} not found; {}, or set embed.ort_lib (RAG_EMBED_ORT_LIB) to a libonnxruntime.so >= 1.24 (rag also finds the onnxruntime Python package installed beside it, ORT_DYLIB_PATH and /usr/lib)",
            lib.display(),
            crate::config::setup_hint()
        )));
    }
    // An absolute path: ort resolves relative ones against the executable's folder.
    let lib = std::path::absolute(lib).unwrap_or_else(|_| lib.to_path_buf());
    let builder = ort::init_from(&lib).map_err(|e| {
        ExitError::model(format!(
            "cannot load ONNX Runtime from {} ({e}); use the library `rag models fetch` fetches (1.24 or newer)",
            lib.display()
        ))
    })?;
    let env = builder
        .with_name("rag")
        .with_telemetry(false)
        .build()
        .map_err(|e| anyhow!("creating the ONNX Runtime environment: {e}"))?;
    Ok(ENV.get_or_init(|| env).clone())
}

/// The version of the ONNX Runtime library at `lib` (loading it, as an embedder would).
pub fn ort_version(lib: &Path) -> Result<String> {
    ort_environment(lib)?;
    // ort exposes the build string only; the version is OrtApiBase::GetVersionString of
    // the library it loaded (a stable part of the ONNX Runtime C ABI).
    #[repr(C)]
    struct ApiBase {
        get_api: unsafe extern "C" fn(u32) -> *const std::ffi::c_void,
        get_version_string: unsafe extern "C" fn() -> *const std::ffi::c_char,
    }
    use std::os::unix::ffi::OsStrExt;
    let path = std::path::absolute(lib).unwrap_or_else(|_| lib.to_path_buf());
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: the library is already loaded (RTLD_NOLOAD returns it without running any
    // constructor again); OrtGetApiBase returns a static table whose second entry returns a
    // static NUL-terminated string.
    unsafe {
        let handle = libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        if handle.is_null() {
            return Ok(ort::info().to_string());
        }
        let sym = libc::dlsym(handle, c"OrtGetApiBase".as_ptr());
        let version = if sym.is_null() {
            ort::info().to_string()
        } else {
            let get_base: unsafe extern "C" fn() -> *const ApiBase = std::mem::transmute(sym);
            let base = get_base();
            std::ffi::CStr::from_ptr(((*base).get_version_string)())
                .to_string_lossy()
                .into_owned()
        };
        libc::dlclose(handle);
        Ok(version)
    }
}

fn read(path: &Path, what: &str, keys: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        ExitError::model(format!(
            "{what} {} cannot be read ({e}); {} or fix {keys} in rag.toml",
            path.display(),
            crate::config::setup_hint()
        ))
    })
}

/// The four tokenizer files fastembed wants, from `dir`.
fn tokenizer_files(dir: &Path, keys: &str) -> Result<TokenizerFiles> {
    let file = |name: &str| read(&dir.join(name), "tokenizer file", keys);
    Ok(TokenizerFiles {
        tokenizer_file: file("tokenizer.json")?,
        config_file: file("config.json")?,
        special_tokens_map_file: file("special_tokens_map.json")?,
        tokenizer_config_file: file("tokenizer_config.json")?,
    })
}

/// ONNX Runtime's settings for the local model, so it shares the CPU fairly with llama.cpp.
fn session_options(s: &EmbedSettings) -> Result<InitOptionsUserDefined> {
    let env = ort_environment(&s.ort_lib)?;
    let n = threads(s.threads);
    Ok(InitOptionsUserDefined::new()
        .with_environment(env)
        .with_max_length(s.max_length)
        .with_intra_threads(n)
        // Idle ONNX Runtime workers must not spin while llama.cpp needs the cores.
        .with_session_config("session.intra_op.allow_spinning", "0")
        .with_session_config("session.inter_op.allow_spinning", "0")
        .with_auto_device(AutoDevicePolicy::PreferCPU))
}

impl Embedder {
    pub fn load(s: &EmbedSettings) -> Result<Embedder> {
        let started = std::time::Instant::now();
        let e = Self::load_inner(s)?;
        tracing::info!(model = %s.model.display(), dim = e.info.dim, ms = started.elapsed().as_millis() as u64, "embedder loaded");
        Ok(e)
    }

    fn load_inner(s: &EmbedSettings) -> Result<Embedder> {
        // Tokenizing runs on the calling thread: no rayon pool competing with ONNX Runtime.
        tokenizers::utils::parallelism::set_parallelism(false);
        if s.backend == crate::config::Backend::Openai {
            return Self::remote(s);
        }
        let keys = "embed.model / embed.tokenizer_dir";
        let onnx = read(&s.model, "embedding model", keys)?;
        let files = tokenizer_files(&s.tokenizer_dir, keys)?;
        let file_hash = blake3::hash(&onnx).to_hex().to_string();
        // fastembed pools user-defined models with CLS unless told; MiniLM is trained for mean,
        // bge for CLS: the setting says which.
        let pooling = match s.pooling {
            crate::config::Pooling::Cls => Pooling::Cls,
            crate::config::Pooling::Mean => Pooling::Mean,
        };
        let model = UserDefinedEmbeddingModel::new(onnx, files)
            .with_pooling(pooling)
            .with_quantization(QuantizationMode::None);
        let options = session_options(s)?;
        let mut model = TextEmbedding::try_new_from_user_defined(model, options).map_err(|e| {
            ExitError::model(format!(
                "cannot load the embedding model {}: {e}",
                s.model.display()
            ))
        })?;
        let mut counter = model.tokenizer.clone();
        counter
            .with_truncation(None)
            .map_err(|e| anyhow!("configuring the tokenizer: {e}"))?;
        counter.with_padding(None);
        let dim = model
            .embed(["dimension probe"], None)
            .map_err(|e| anyhow!("running the embedding model {}: {e}", s.model.display()))?
            .first()
            .map(Vec::len)
            .context("the embedding model returned no vector")?;
        let name = s
            .model
            .file_stem()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(Embedder {
            model: Model::Local(Box::new(model)),
            counter,
            info: ModelInfo {
                name,
                dim,
                file_hash,
                pooling: s.pooling.as_str().to_string(),
                passage_prefix: s.passage_prefix.clone(),
            },
            max_length: s.max_length,
            batch_size: s.batch_size,
            query_prefix: s.query_prefix.clone(),
        })
    }

    /// An embeddings server: the index records `openai:MODEL` and its dimension, so its
    /// vectors never mix with another model's; the chunker counts with the tokenizer in
    /// `embed.tokenizer_dir`.
    fn remote(s: &EmbedSettings) -> Result<Embedder> {
        let path = s.tokenizer_dir.join("tokenizer.json");
        read(&path, "tokenizer file", "embed.tokenizer_dir")?;
        let mut counter = Tokenizer::from_file(&path).map_err(|e| {
            ExitError::model(format!("cannot read the tokenizer {}: {e}", path.display()))
        })?;
        counter
            .with_truncation(None)
            .map_err(|e| anyhow!("configuring the tokenizer: {e}"))?;
        counter.with_padding(None);
        let remote = remote::Embeddings::open(s)?;
        let dim = remote
            .embed(&["dimension probe"])?
            .first()
            .map_or(0, Vec::len);
        Ok(Embedder {
            info: ModelInfo {
                name: format!("openai:{}", remote.model()),
                dim,
                // No file to hash: the model's name is its identity.
                file_hash: "remote".into(),
                pooling: "server".into(),
                passage_prefix: s.passage_prefix.clone(),
            },
            model: Model::Remote(remote),
            counter,
            max_length: s.max_length,
            batch_size: s.batch_size,
            query_prefix: s.query_prefix.clone(),
        })
    }

    /// Tokens the model sees for `text`, special tokens included.
    pub fn count_tokens(&self, text: &str) -> usize {
        self.counter
            .encode(text, true)
            .map(|e| e.len())
            .unwrap_or(usize::MAX)
    }

    /// The tokenizer without special tokens, truncation or padding: the chunker's sizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.counter
    }

    /// Tokens the passage prefix adds to every chunk, which the chunker must leave room for.
    pub fn prefix_tokens(&self) -> usize {
        let p = &self.info.passage_prefix;
        if p.is_empty() {
            return 0;
        }
        self.counter
            .encode(p.as_str(), false)
            .map(|e| e.len())
            .unwrap_or(0)
    }

    /// Embeds passages (chunks, sentences) in batches of similar length (less padding per
    /// batch), in input order, each behind `embed.passage_prefix`.
    pub fn embed(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let prefix = &self.info.passage_prefix;
        if prefix.is_empty() {
            return self.embed_raw(texts);
        }
        let texts: Vec<String> = texts.iter().map(|t| format!("{prefix}{t}")).collect();
        self.embed_raw(&texts)
    }

    fn embed_raw(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        let order = batch_order(texts);
        let mut out = vec![Vec::new(); texts.len()];
        for batch in order.chunks(self.batch_size) {
            let inputs: Vec<&str> = batch.iter().map(|&i| texts[i].as_str()).collect();
            let vectors = match &mut self.model {
                Model::Local(m) => m
                    .embed(&inputs, Some(self.batch_size))
                    .map_err(|e| anyhow!("embedding: {e}"))?,
                Model::Remote(r) => r.embed(&inputs)?,
            };
            for (&i, v) in batch.iter().zip(vectors) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// A question's vector, behind `embed.query_prefix`.
    pub fn embed_query(&mut self, query: &str) -> Result<Vec<f32>> {
        self.embed_raw(&[format!("{}{query}", self.query_prefix)])?
            .pop()
            .context("the embedding model returned no vector")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sorting_by_length_cuts_padding() {
        let texts: Vec<String> = ["a", "bbbbbbbb", "cc", "dddddddd"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let lens: Vec<usize> = texts.iter().map(String::len).collect();
        let sorted = super::batch_order(&texts);
        assert_eq!(sorted, vec![0, 2, 1, 3]);
        assert_eq!(super::padding(&lens, &[0, 1, 2, 3], 2), 7 + 6);
        assert_eq!(super::padding(&lens, &sorted, 2), 1);
    }
}

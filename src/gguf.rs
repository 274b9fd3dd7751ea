//! What a GGUF file says about itself, read from its header without loading it: the model's
//! name, architecture, quantisation, parameter count, context length and layers. `rag models
//! list` shows them for every GGUF it finds (rag's folders, ollama, the Hugging Face cache,
//! LM Studio), routing predicts a generator's speed from a larger one's with them
//! (src/engine/speeds.rs), and `rag doctor` counts the layers a GPU takes.
//!
//! Written here rather than taken from a crate: the GGUF crates read whatever lengths a file
//! declares, and a header is input rag did not write. Every length in it is bounded before
//! it is believed, and so are the bytes read in all, so a damaged or hostile file is an
//! error, never a huge allocation or a hang.
//!
//! Why by hand: the format is a few dozen lines of little-endian fields (ggml's
//! docs/gguf.md), and llama.cpp reads a whole vocabulary to tell the same; no crate on the
//! registry reads only the header without pulling in a tensor library.

use std::io::{BufReader, Read};
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Serialize;

/// What `rag models list` shows of a GGUF file.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Meta {
    pub name: Option<String>,
    pub architecture: Option<String>,
    /// `Q4_K_M`, `Q8_0`, … (`general.file_type`).
    pub quantisation: Option<String>,
    /// The sum of every tensor's elements.
    pub parameters: u64,
    /// `{architecture}.context_length`: the context the model was trained for.
    pub context_length: Option<u64>,
    /// `{architecture}.block_count`: the transformer blocks (llama.cpp's layers, less the
    /// output layer).
    pub block_count: Option<u64>,
}

/// Bounds on what a header may claim (far above any real model's).
const MAX_STRING: u64 = 16 << 20;
const MAX_ITEMS: u64 = 1 << 24;
const MAX_KEYS: u64 = 1 << 16;
const MAX_TENSORS: u64 = 1 << 20;
const MAX_DIMS: u32 = 8;
/// The header of the largest GGUF (a big vocabulary's token list) is tens of MB.
const MAX_HEADER_BYTES: u64 = 256 << 20;

/// Reads the header of the GGUF file at `path` (a regular file; a FIFO or device is refused).
pub fn read(path: &Path) -> Result<Meta> {
    let f = crate::atomic::open_regular(path)?;
    parse(&mut BufReader::with_capacity(1 << 16, f).take(MAX_HEADER_BYTES))
        .with_context(|| format!("{} is not a GGUF file rag can read", path.display()))
}

/// The header of a GGUF stream (versions 2 and 3).
pub fn parse(r: &mut impl Read) -> Result<Meta> {
    let mut magic = [0u8; 4];
    r.read_exact(&mut magic)?;
    if &magic != b"GGUF" {
        bail!("it does not start with GGUF");
    }
    let version = u32(r)?;
    if !(2..=3).contains(&version) {
        bail!("GGUF version {version} (rag reads 2 and 3)");
    }
    let tensors = bounded(u64(r)?, MAX_TENSORS, "tensors")?;
    let keys = bounded(u64(r)?, MAX_KEYS, "metadata keys")?;
    let mut meta = Meta::default();
    let mut file_type = None;
    let mut contexts = Vec::new();
    let mut blocks = Vec::new();
    for _ in 0..keys {
        let key = string(r)?;
        let kind = u32(r)?;
        match key.as_str() {
            "general.name" if kind == 8 => meta.name = Some(string(r)?),
            "general.architecture" if kind == 8 => meta.architecture = Some(string(r)?),
            "general.file_type" => file_type = number(r, kind)?,
            k if k.ends_with(".context_length") => {
                let arch = k.trim_end_matches(".context_length").to_string();
                if let Some(n) = number(r, kind)? {
                    contexts.push((arch, n));
                }
            }
            k if k.ends_with(".block_count") => {
                let arch = k.trim_end_matches(".block_count").to_string();
                if let Some(n) = number(r, kind)? {
                    blocks.push((arch, n));
                }
            }
            _ => skip(r, kind, 0)?,
        }
    }
    // A key of the file's own architecture wins over another's (a projector's, say).
    let of_arch = |found: &[(String, u64)]| {
        found
            .iter()
            .find(|(a, _)| Some(a) == meta.architecture.as_ref())
            .or(found.first())
            .map(|(_, n)| *n)
    };
    meta.context_length = of_arch(&contexts);
    meta.block_count = of_arch(&blocks);
    meta.quantisation = file_type.map(quantisation);
    meta.parameters = parameters(r, tensors)?;
    Ok(meta)
}

/// The elements of the `tensors` tensor descriptions that follow the metadata, summed.
fn parameters(r: &mut impl Read, tensors: u64) -> Result<u64> {
    let mut sum: u64 = 0;
    for _ in 0..tensors {
        let _name = string(r)?;
        let dims = u32(r)?;
        if dims > MAX_DIMS {
            bail!("a tensor of {dims} dimensions");
        }
        let mut n: u64 = 1;
        for _ in 0..dims {
            n = n.saturating_mul(u64(r)?);
        }
        let _type = u32(r)?;
        let _offset = u64(r)?;
        sum = sum.saturating_add(n);
    }
    Ok(sum)
}

fn bounded(n: u64, max: u64, what: &str) -> Result<u64> {
    if n > max {
        bail!("it claims {n} {what}");
    }
    Ok(n)
}

fn u32(r: &mut impl Read) -> Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn u64(r: &mut impl Read) -> Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn string(r: &mut impl Read) -> Result<String> {
    let n = bounded(u64(r)?, MAX_STRING, "bytes in a string")?;
    let mut b = Vec::new();
    r.take(n).read_to_end(&mut b)?;
    if b.len() as u64 != n {
        bail!("it ends inside a string");
    }
    Ok(String::from_utf8_lossy(&b).into_owned())
}

/// The size of a scalar of `kind`, None for strings and arrays.
fn scalar_size(kind: u32) -> Result<Option<u64>> {
    Ok(match kind {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        8 | 9 => None,
        _ => bail!("a metadata value of unknown type {kind}"),
    })
}

/// An integer value of `kind` (None for any other kind, which is skipped).
fn number(r: &mut impl Read, kind: u32) -> Result<Option<u64>> {
    Ok(match kind {
        4 | 5 => Some(u64::from(u32(r)?)),
        10 | 11 => Some(u64(r)?),
        _ => {
            skip(r, kind, 0)?;
            None
        }
    })
}

/// Reads past a value of `kind` (arrays of arrays to a depth of 2).
fn skip(r: &mut impl Read, kind: u32, depth: u32) -> Result<()> {
    if let Some(n) = scalar_size(kind)? {
        return drop_bytes(r, n);
    }
    if kind == 8 {
        let n = bounded(u64(r)?, MAX_STRING, "bytes in a string")?;
        return drop_bytes(r, n);
    }
    if depth > 1 {
        bail!("arrays nested too deep");
    }
    let item = u32(r)?;
    let count = bounded(u64(r)?, MAX_ITEMS, "items in an array")?;
    match scalar_size(item)? {
        Some(n) => drop_bytes(r, n * count),
        None => (0..count).try_for_each(|_| skip(r, item, depth + 1)),
    }
}

fn drop_bytes(r: &mut impl Read, n: u64) -> Result<()> {
    let got = std::io::copy(&mut r.take(n), &mut std::io::sink())?;
    if got != n {
        bail!("it ends inside a value");
    }
    Ok(())
}

/// llama.cpp's `llama_ftype` names.
fn quantisation(t: u64) -> String {
    let name = match t {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        _ => return format!("type {t}"),
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GGUF header as llama.cpp writes one: a few keys and two tensors.
    fn header(arch: &str, shapes: &[&[u64]]) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend((shapes.len() as u64).to_le_bytes());
        b.extend(3u64.to_le_bytes());
        let s = |b: &mut Vec<u8>, t: &str| {
            b.extend((t.len() as u64).to_le_bytes());
            b.extend(t.as_bytes());
        };
        s(&mut b, "general.architecture");
        b.extend(8u32.to_le_bytes());
        s(&mut b, arch);
        s(&mut b, &format!("{arch}.context_length"));
        b.extend(4u32.to_le_bytes());
        b.extend(32768u32.to_le_bytes());
        s(&mut b, "tokenizer.ggml.tokens");
        b.extend(9u32.to_le_bytes());
        b.extend(8u32.to_le_bytes());
        b.extend(2u64.to_le_bytes());
        s(&mut b, "a");
        s(&mut b, "b");
        for (i, shape) in shapes.iter().enumerate() {
            s(&mut b, &format!("t{i}"));
            b.extend((shape.len() as u32).to_le_bytes());
            for d in *shape {
                b.extend(d.to_le_bytes());
            }
            b.extend(2u32.to_le_bytes());
            b.extend(0u64.to_le_bytes());
        }
        b
    }

    #[test]
    fn the_header_gives_architecture_parameters_and_context() {
        let h = parse(&mut &header("qwen2", &[&[896, 151936], &[896]])[..]).unwrap();
        assert_eq!(h.architecture.as_deref(), Some("qwen2"));
        assert_eq!(h.parameters, 896 * 151936 + 896);
        assert_eq!(h.context_length, Some(32768));
    }

    #[test]
    fn a_hostile_header_is_an_error_not_an_allocation() {
        let mut b = header("llama", &[&[4, 4]]);
        // The first key's length set to 2^60.
        b[24..32].copy_from_slice(&(1u64 << 60).to_le_bytes());
        assert!(parse(&mut &b[..]).is_err());
        assert!(parse(&mut &b"GGUF"[..]).is_err());
        let dir = tempfile::tempdir().unwrap();
        let e = read(dir.path()).unwrap_err();
        assert!(format!("{e:#}").contains("not a regular file"), "{e:#}");
    }

    /// The real 135M and 1.5B: what llama.cpp says of them (`rag doctor`, llama-bench).
    #[test]
    fn the_real_models_read_as_llama_cpp_reads_them() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let small = read(&root.join(crate::catalog::default_path("llm.model").unwrap())).unwrap();
        assert_eq!(small.architecture.as_deref(), Some("llama"));
        assert_eq!(small.quantisation.as_deref(), Some("Q4_1"));
        assert_eq!(small.context_length, Some(8192));
        assert_eq!(small.block_count, Some(30));
        assert!(
            (130e6..140e6).contains(&(small.parameters as f64)),
            "{small:?}"
        );
        let large = root.join(crate::catalog::default_path("llm.large_model").unwrap());
        if large.exists() {
            let large = read(&large).unwrap();
            assert_eq!(large.architecture.as_deref(), Some("qwen2"));
            assert_eq!(large.quantisation.as_deref(), Some("Q4_K_M"));
            assert_eq!(large.context_length, Some(32768));
            assert_eq!(large.block_count, Some(28));
            // Every tensor, the output matrix included: llama-bench's "1.78 B".
            assert!(
                (1.7e9..1.8e9).contains(&(large.parameters as f64)),
                "{large:?}"
            );
        }
    }

    #[test]
    fn a_damaged_header_is_an_error_not_an_allocation() {
        let mut h = b"GGUF".to_vec();
        h.extend(3u32.to_le_bytes());
        h.extend(0u64.to_le_bytes());
        h.extend(1u64.to_le_bytes());
        h.extend(4u64.to_le_bytes());
        h.extend(b"name");
        h.extend(8u32.to_le_bytes());
        h.extend(u64::MAX.to_le_bytes());
        let e = parse(&mut &h[..]).unwrap_err();
        assert!(format!("{e:#}").contains("bytes in a string"), "{e:#}");
        assert!(parse(&mut &b"GGUF\x03\0\0\0"[..]).is_err(), "cut short");
        assert!(parse(&mut &b"PK\x03\x04"[..]).is_err(), "not GGUF");
    }
}

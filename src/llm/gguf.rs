//! What a GGUF file says of itself, read from its header without loading the weights:
//! architecture, name, parameter count (the tensors' shapes), context length, layers.
//! Routing predicts a generator's speed from a larger one's with these (src/engine/speeds.rs).
//!
//! Written here rather than taken from a crate: the GGUF crates read whatever lengths a file
//! declares, and a header is input rag did not write; this reader checks the file is a
//! regular file and bounds every length, count and the bytes read in all.

use std::collections::HashMap;
use std::io::{BufReader, Read};
use std::path::Path;

use anyhow::{bail, Context, Result};

/// The header of the largest GGUF (a big vocabulary's token list) is tens of MB.
const MAX_HEADER_BYTES: u64 = 256 << 20;
const MAX_STRING: u64 = 64 << 10;
const MAX_COUNT: u64 = 1 << 24;
const MAX_DIMS: u32 = 8;

/// The facts rag uses.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Header {
    pub architecture: String,
    pub name: Option<String>,
    /// Weights in all tensors.
    pub n_params: u64,
    pub context_length: Option<u64>,
    pub layers: Option<u64>,
    pub embedding_length: Option<u64>,
    /// `general.file_type` (llama.cpp's quantisation number).
    pub file_type: Option<u64>,
}

#[derive(Debug, Clone)]
enum Value {
    Int(u64),
    Str(String),
    Other,
}

/// Reads the header of the GGUF at `path`.
pub fn read(path: &Path) -> Result<Header> {
    let file = crate::atomic::open_regular(path)?;
    parse(BufReader::new(file).take(MAX_HEADER_BYTES))
        .with_context(|| format!("{} is not a readable GGUF file", path.display()))
}

fn parse(mut r: impl Read) -> Result<Header> {
    let mut magic = [0u8; 4];
    r.read_exact(&mut magic)?;
    if &magic != b"GGUF" {
        bail!("no GGUF magic");
    }
    let version = u32_of(&mut r)?;
    if !(2..=3).contains(&version) {
        bail!("GGUF version {version} (2 and 3 are read)");
    }
    let tensors = count(&mut r)?;
    let kvs = count(&mut r)?;
    let mut meta = HashMap::new();
    for _ in 0..kvs {
        let key = string(&mut r)?;
        let kind = u32_of(&mut r)?;
        let value = value(&mut r, kind)?;
        meta.insert(key, value);
    }
    let mut n_params: u64 = 0;
    for _ in 0..tensors {
        string(&mut r)?;
        let dims = u32_of(&mut r)?;
        if dims > MAX_DIMS {
            bail!("a tensor of {dims} dimensions");
        }
        let mut n: u64 = 1;
        for _ in 0..dims {
            n = n.saturating_mul(u64_of(&mut r)?);
        }
        u32_of(&mut r)?; // type
        u64_of(&mut r)?; // offset
        n_params = n_params.saturating_add(n);
    }
    let str_of = |k: &str| match meta.get(k) {
        Some(Value::Str(s)) => Some(s.clone()),
        _ => None,
    };
    let int_of = |k: &str| match meta.get(k) {
        Some(Value::Int(n)) => Some(*n),
        _ => None,
    };
    let architecture = str_of("general.architecture").unwrap_or_default();
    let arch = |k: &str| int_of(&format!("{architecture}.{k}"));
    Ok(Header {
        name: str_of("general.name"),
        n_params,
        context_length: arch("context_length"),
        layers: arch("block_count"),
        embedding_length: arch("embedding_length"),
        file_type: int_of("general.file_type"),
        architecture,
    })
}

fn value(r: &mut impl Read, kind: u32) -> Result<Value> {
    Ok(match kind {
        0 | 1 | 7 => Value::Int(u64::from(byte(r)?)),
        2 | 3 => Value::Int(u64::from(u16::from_le_bytes(bytes(r)?))),
        4 | 5 => Value::Int(u64::from(u32_of(r)?)),
        6 => {
            u32_of(r)?;
            Value::Other
        }
        8 => Value::Str(string(r)?),
        9 => {
            let inner = u32_of(r)?;
            if inner == 9 {
                bail!("an array of arrays");
            }
            for _ in 0..count(r)? {
                value(r, inner)?;
            }
            Value::Other
        }
        10 | 11 => Value::Int(u64_of(r)?),
        12 => {
            u64_of(r)?;
            Value::Other
        }
        k => bail!("unknown value type {k}"),
    })
}

fn bytes<const N: usize>(r: &mut impl Read) -> Result<[u8; N]> {
    let mut b = [0u8; N];
    r.read_exact(&mut b).context("the header ends early")?;
    Ok(b)
}

fn byte(r: &mut impl Read) -> Result<u8> {
    Ok(bytes::<1>(r)?[0])
}

fn u32_of(r: &mut impl Read) -> Result<u32> {
    Ok(u32::from_le_bytes(bytes(r)?))
}

fn u64_of(r: &mut impl Read) -> Result<u64> {
    Ok(u64::from_le_bytes(bytes(r)?))
}

fn count(r: &mut impl Read) -> Result<u64> {
    let n = u64_of(r)?;
    if n > MAX_COUNT {
        bail!("a count of {n}");
    }
    Ok(n)
}

fn string(r: &mut impl Read) -> Result<String> {
    let n = u64_of(r)?;
    if n > MAX_STRING {
        bail!("a string of {n} bytes");
    }
    let mut b = vec![0u8; n as usize];
    r.read_exact(&mut b).context("the header ends early")?;
    Ok(String::from_utf8_lossy(&b).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GGUF header as llama.cpp writes one: a few keys and two tensors.
    pub(crate) fn header(arch: &str, shapes: &[&[u64]]) -> Vec<u8> {
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
        let h = parse(&header("qwen2", &[&[896, 151936], &[896]])[..]).unwrap();
        assert_eq!(h.architecture, "qwen2");
        assert_eq!(h.n_params, 896 * 151936 + 896);
        assert_eq!(h.context_length, Some(32768));
    }

    #[test]
    fn a_hostile_header_is_an_error_not_an_allocation() {
        let mut b = header("llama", &[&[4, 4]]);
        // The first key's length set to 2^60.
        b[24..32].copy_from_slice(&(1u64 << 60).to_le_bytes());
        assert!(parse(&b[..]).is_err());
        assert!(parse(&b"GGUF"[..]).is_err());
        assert!(parse(&b"NOPE\x03\0\0\0"[..]).is_err());
        let dir = tempfile::tempdir().unwrap();
        let e = read(dir.path()).unwrap_err();
        assert!(format!("{e:#}").contains("not a regular file"), "{e:#}");
    }
}

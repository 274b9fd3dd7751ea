//! SHA-256 of large files (model weights), memoized by path, size and mtime in a small JSON
//! file, so reporting and keying by a model's hash does not re-read 100 MB on every run.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::time::UNIX_EPOCH;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The largest memo read: a few hundred bytes a model.
const MAX_MEMO: u64 = 1 << 20;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Entry {
    size: u64,
    mtime_ns: i64,
    sha256: String,
}

/// A file's modification time in nanoseconds since the epoch (0 where the system has none),
/// as the memo and the index's file states record it.
pub fn mtime_ns(meta: &std::fs::Metadata) -> i64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// The file's SHA-256 in hex. `memo` is the JSON file that remembers earlier results; it is
/// rewritten atomically, and a damaged one is ignored.
pub fn sha256(file: &Path, memo: &Path) -> Result<String> {
    let meta = std::fs::metadata(file).with_context(|| format!("reading {}", file.display()))?;
    if !meta.is_file() {
        anyhow::bail!(
            "{} is not a regular file: point the setting at the model file itself",
            file.display()
        );
    }
    let mtime_ns = mtime_ns(&meta);
    let key = std::path::absolute(file)
        .unwrap_or_else(|_| file.to_path_buf())
        .to_string_lossy()
        .into_owned();
    // A memo that is not a small regular file (a FIFO, a device) is ignored and rewritten.
    let mut entries: BTreeMap<String, Entry> = crate::atomic::read_bounded(memo, MAX_MEMO)
        .ok()
        .and_then(|t| serde_json::from_slice(&t).ok())
        .unwrap_or_default();
    if let Some(e) = entries.get(&key) {
        if e.size == meta.len() && e.mtime_ns == mtime_ns {
            return Ok(e.sha256.clone());
        }
    }
    let hex = sha256_file(file)?;
    entries.insert(
        key,
        Entry {
            size: meta.len(),
            mtime_ns,
            sha256: hex.clone(),
        },
    );
    // Best effort: a read-only index folder only costs a re-hash next time.
    let _ = crate::atomic::write(memo, &serde_json::to_vec_pretty(&entries)?);
    Ok(hex)
}

/// The file's SHA-256 in hex, read whole (no memo): rag's one hashing of a file. A FIFO or
/// device is refused rather than waited on.
pub fn sha256_file(file: &Path) -> Result<String> {
    let mut f = crate::atomic::open_regular(file)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .with_context(|| format!("reading {}", file.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn memoizes_and_notices_changes() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("m.bin");
        let memo = dir.path().join("memo.json");
        std::fs::write(&file, b"abc").unwrap();
        let h = super::sha256(&file, &memo).unwrap();
        assert_eq!(
            h,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(memo.exists());
        assert_eq!(super::sha256(&file, &memo).unwrap(), h);
        let stamp = std::fs::metadata(&file).unwrap().modified().unwrap();
        let touch = |t: std::time::SystemTime| {
            std::fs::File::options()
                .write(true)
                .open(&file)
                .unwrap()
                .set_modified(t)
                .unwrap()
        };
        // Same size and mtime: the memo answers without reading, even for other bytes.
        std::fs::write(&file, b"xyz").unwrap();
        touch(stamp);
        assert_eq!(super::sha256(&file, &memo).unwrap(), h, "memo used");
        // Same size, another mtime: read again.
        touch(stamp + std::time::Duration::from_secs(2));
        let xyz = super::sha256(&file, &memo).unwrap();
        assert_eq!(
            xyz,
            "3608bca1e44ea6c4d268eb6db02260269892c0b42b86bbf1e77a6fa16c3c9282"
        );
        // Another size, same mtime: read again.
        std::fs::write(&file, b"abcd").unwrap();
        touch(stamp + std::time::Duration::from_secs(2));
        assert_ne!(super::sha256(&file, &memo).unwrap(), xyz);
    }

    #[test]
    fn a_fifo_as_memo_or_model_is_no_wait() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("m.bin");
        std::fs::write(&file, b"abc").unwrap();
        let fifo = crate::atomic::mkfifo;
        let memo = dir.path().join("memo.json");
        fifo(&memo);
        assert!(super::sha256(&file, &memo).is_ok(), "the memo is rebuilt");
        assert!(std::fs::metadata(&memo).unwrap().is_file());
        let model = dir.path().join("fifo.gguf");
        fifo(&model);
        let e = super::sha256(&model, &memo).unwrap_err();
        assert!(format!("{e:#}").contains("not a regular file"), "{e:#}");
    }
}

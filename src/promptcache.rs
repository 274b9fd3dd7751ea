//! The persistent prompt cache: KV states saved after prefill under `<index>/prompt-cache/`,
//! so a later `rag ask` whose prompt shares a prefix with an earlier one prefills only the
//! rest. Entries are keyed by everything that makes a KV state valid (model file hash,
//! context size, llama.cpp build); each has a JSON sidecar with its tokens, so the best entry
//! is chosen without loading states, and a loaded state is checked against it. Bounded on
//! disk; least recently used entries go first.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::Result;
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Sidecar {
    key: String,
    tokens: Vec<i32>,
    /// blake3 of the state file: checked before llama.cpp reads a byte of it, so a
    /// truncated or bit-flipped state never reaches its loader. (Entries written before
    /// this field have none and are dropped.)
    state_blake3: String,
}

fn file_hash(p: &Path) -> Option<String> {
    let mut h = blake3::Hasher::new();
    h.update_reader(crate::atomic::open_regular(p).ok()?).ok()?;
    Some(h.finalize().to_hex().to_string())
}

/// The largest sidecar read: the tokens of a 128k-token context as JSON are under 1 MB.
const MAX_SIDECAR: u64 = 16 << 20;

/// Temporary files of a write that a kill interrupted are removed once this old.
const STALE_TMP: std::time::Duration = std::time::Duration::from_secs(600);

pub struct PromptCache {
    dir: PathBuf,
    key: String,
    max_bytes: u64,
}

/// A candidate state: its file, the tokens it holds, and how many lead the new prompt.
#[derive(Debug)]
pub struct Entry {
    pub state: PathBuf,
    pub tokens: Vec<i32>,
    pub common: usize,
    state_blake3: String,
}

fn common_prefix(a: &[i32], b: &[i32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl PromptCache {
    /// `key_parts` name what a state depends on; any difference gives another key.
    pub fn new(index_dir: &Path, key_parts: &[&str], max_bytes: u64) -> PromptCache {
        let mut h = blake3::Hasher::new();
        for p in key_parts {
            h.update(p.as_bytes());
            h.update(b"\0");
        }
        PromptCache {
            dir: index_dir.join("prompt-cache"),
            key: h.finalize().to_hex()[..16].to_string(),
            max_bytes,
        }
    }

    fn sidecars(&self) -> Vec<PathBuf> {
        let prefix = format!("{}-", self.key);
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        rd.filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension().is_some_and(|x| x == "json")
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
            })
            .collect()
    }

    /// The entry sharing the longest prefix with `tokens` (at least `min_common` tokens).
    /// Unreadable sidecars, or ones of another key, are deleted.
    pub fn best(&self, tokens: &[i32], min_common: usize) -> Option<Entry> {
        let mut best: Option<Entry> = None;
        for side in self.sidecars() {
            let state = side.with_extension("state");
            let parsed = crate::atomic::read_bounded(&side, MAX_SIDECAR)
                .ok()
                .and_then(|t| serde_json::from_slice::<Sidecar>(&t).ok());
            let Some(s) = parsed.filter(|s| s.key == self.key && state.is_file()) else {
                self.discard(&state);
                continue;
            };
            let common = common_prefix(&s.tokens, tokens);
            if common >= min_common && best.as_ref().is_none_or(|b| common > b.common) {
                best = Some(Entry {
                    state,
                    tokens: s.tokens,
                    common,
                    state_blake3: s.state_blake3,
                });
            }
        }
        match &best {
            Some(b) => tracing::info!(
                common = b.common,
                of = tokens.len(),
                "prompt cache: reusing a cached prefix"
            ),
            None => tracing::info!(tokens = tokens.len(), "prompt cache: no cached prefix"),
        }
        if let Some(b) = &best {
            // Mark as recently used for eviction.
            let _ = std::fs::File::options()
                .write(true)
                .open(b.state.with_extension("json"))
                .and_then(|f| f.set_modified(SystemTime::now()));
        }
        best
    }

    /// Whether the entry's state file still has the bytes it was saved with; a damaged one
    /// (truncated, bit-flipped) is discarded before llama.cpp reads any of it.
    pub fn verified(&self, e: &Entry) -> bool {
        let ok = file_hash(&e.state).as_deref() == Some(e.state_blake3.as_str());
        if !ok {
            self.discard(&e.state);
        }
        ok
    }

    /// Removes an entry that failed to load or check.
    pub fn discard(&self, state: &Path) {
        let _ = std::fs::remove_file(state);
        let _ = std::fs::remove_file(state.with_extension("json"));
    }

    /// Saves a state for `tokens` with `save` (which writes the state file), unless an entry
    /// for exactly these tokens exists; then evicts down to the size bound.
    pub fn store(&self, tokens: &[i32], save: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
        if self.max_bytes == 0 || tokens.is_empty() {
            return Ok(());
        }
        crate::store::create_private_dir(&self.dir)?;
        let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
        let name = format!("{}-{}", self.key, &blake3::hash(&bytes).to_hex()[..16]);
        let state = self.dir.join(format!("{name}.state"));
        let side = self.dir.join(format!("{name}.json"));
        if state.is_file() && side.is_file() {
            return Ok(());
        }
        // Write both under temporary names and rename the sidecar last: an entry is visible
        // only when complete, so a crash mid-write leaves no trusted half entry.
        let tmp_state = self
            .dir
            .join(format!(".{name}.{}.state", std::process::id()));
        save(&tmp_state)?;
        let state_blake3 = file_hash(&tmp_state)
            .ok_or_else(|| anyhow::anyhow!("reading back {}", tmp_state.display()))?;
        sync(&tmp_state);
        std::fs::rename(&tmp_state, &state)?;
        let tmp_side = self
            .dir
            .join(format!(".{name}.{}.json", std::process::id()));
        std::fs::write(
            &tmp_side,
            serde_json::to_string(&Sidecar {
                key: self.key.clone(),
                tokens: tokens.to_vec(),
                state_blake3,
            })?,
        )?;
        sync(&tmp_side);
        std::fs::rename(&tmp_side, &side)?;
        self.evict();
        Ok(())
    }

    /// Deletes temporary files a killed write left, then least recently used entries (of
    /// any key) until the folder fits the bound.
    fn evict(&self) {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let paths: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        for p in &paths {
            let tmp = p
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'));
            let age = std::fs::metadata(p)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok());
            if tmp && age.is_some_and(|a| a > STALE_TMP) {
                let _ = std::fs::remove_file(p);
            }
        }
        let mut entries: Vec<(SystemTime, u64, PathBuf)> = paths
            .into_iter()
            .filter(|p| {
                p.extension().is_some_and(|x| x == "state")
                    && !p
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .map(|p| {
                let size = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
                let used = std::fs::metadata(p.with_extension("json"))
                    .and_then(|m| m.modified())
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                (used, size, p)
            })
            .collect();
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        entries.sort_by_key(|e| e.0);
        for (_, size, p) in entries {
            if total <= self.max_bytes {
                break;
            }
            self.discard(&p);
            total = total.saturating_sub(size);
        }
    }
}

/// For `rag doctor`: (entries, bytes, entries whose state fails its checksum) in the
/// prompt cache of the index at `index_dir`, any key.
pub fn audit(index_dir: &Path) -> (usize, u64, usize) {
    let dir = index_dir.join("prompt-cache");
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return (0, 0, 0);
    };
    let (mut entries, mut bytes, mut damaged) = (0, 0, 0);
    for p in rd.filter_map(|e| e.ok().map(|e| e.path())) {
        let hidden = p
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if hidden || p.extension().is_none_or(|x| x != "json") {
            continue;
        }
        entries += 1;
        let state = p.with_extension("state");
        bytes += std::fs::metadata(&state).map(|m| m.len()).unwrap_or(0);
        let side = crate::atomic::read_bounded(&p, MAX_SIDECAR)
            .ok()
            .and_then(|t| serde_json::from_slice::<Sidecar>(&t).ok());
        if side.is_none_or(|s| file_hash(&state).as_deref() != Some(s.state_blake3.as_str())) {
            damaged += 1;
        }
    }
    (entries, bytes, damaged)
}

/// Flushes a file to disk before the rename that publishes it, so after a power cut an
/// entry is whole or absent (the checksum would catch the rest, at the cost of the entry).
fn sync(p: &Path) {
    if let Ok(f) = std::fs::File::open(p) {
        let _ = f.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_save(content: &'static [u8]) -> impl FnOnce(&Path) -> Result<()> {
        move |p| Ok(std::fs::write(p, content)?)
    }

    #[test]
    fn best_entry_by_prefix_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let c = PromptCache::new(dir.path(), &["model-a", "2048"], 1 << 20);
        c.store(&[1, 2, 3, 4], fake_save(b"s1")).unwrap();
        c.store(&[1, 2, 9], fake_save(b"s2")).unwrap();
        let e = c.best(&[1, 2, 3, 4, 5], 2).unwrap();
        assert_eq!((e.common, e.tokens.clone()), (4, vec![1, 2, 3, 4]));
        assert!(c.best(&[7, 7], 1).is_none());
        // Another model never sees these entries.
        let other = PromptCache::new(dir.path(), &["model-b", "2048"], 1 << 20);
        assert!(other.best(&[1, 2, 3, 4], 1).is_none());
    }

    #[test]
    fn corrupt_sidecars_are_dropped_and_size_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let c = PromptCache::new(dir.path(), &["m"], 10);
        c.store(&[1, 2], fake_save(b"123456")).unwrap();
        let side = c.sidecars().pop().unwrap();
        std::fs::write(&side, "{not json").unwrap();
        assert!(c.best(&[1, 2], 1).is_none());
        assert!(!side.exists());
        c.store(&[1], fake_save(b"123456")).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        c.store(&[2], fake_save(b"123456")).unwrap();
        // 12 bytes > 10: the older entry went.
        assert!(c.best(&[1], 1).is_none());
        assert!(c.best(&[2], 1).is_some());
    }

    #[test]
    fn damaged_states_are_never_handed_out_and_stale_temporaries_go() {
        let dir = tempfile::tempdir().unwrap();
        let c = PromptCache::new(dir.path(), &["m"], 1 << 20);
        c.store(&[1, 2, 3], fake_save(b"0123456789")).unwrap();
        let e = c.best(&[1, 2, 3], 1).unwrap();
        assert!(c.verified(&e));
        // Bit-flipped, then truncated: dropped, entry and all.
        std::fs::write(&e.state, b"0123456788").unwrap();
        assert!(!c.verified(&e));
        assert!(!e.state.exists() && !e.state.with_extension("json").exists());
        c.store(&[1, 2, 3], fake_save(b"0123456789")).unwrap();
        std::fs::write(&e.state, b"01234").unwrap();
        assert!(!c.verified(&c.best(&[1, 2, 3], 1).unwrap()));
        // A temporary file from a killed write is removed once stale.
        let tmp = c.dir.join(".x.1.state");
        std::fs::write(&tmp, b"half").unwrap();
        let old = SystemTime::now() - STALE_TMP - std::time::Duration::from_secs(1);
        std::fs::File::options()
            .write(true)
            .open(&tmp)
            .unwrap()
            .set_modified(old)
            .unwrap();
        c.store(&[4], fake_save(b"x")).unwrap();
        assert!(!tmp.exists());
    }
}

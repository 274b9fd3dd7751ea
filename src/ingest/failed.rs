//! Files that could not be indexed, with the hash of the content that failed
//! (`<index>/failed.json`). An unchanged bad file is skipped on the next run instead of being
//! parsed again (a crashing parser would otherwise cost every run the same time, and report
//! the same failure forever); `rag ingest --retry-failed` tries them again, and so does a rag
//! whose parsers changed since the failure ([`super::parse::PARSERS`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

const FILE: &str = "failed.json";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// blake3 of the content that failed.
    pub hash: String,
    pub error: String,
    /// The parsers' version that failed on it (0: a record older than the field).
    #[serde(default)]
    pub parsers: u32,
}

/// The failure records of one index, by path.
#[derive(Debug, Default)]
pub struct Failed {
    path: PathBuf,
    pub files: BTreeMap<String, Failure>,
    dirty: bool,
}

impl Failed {
    /// The records under `dir`; a missing or unreadable file means none (a damaged record
    /// only costs a retry).
    pub fn load(dir: &Path) -> Failed {
        let path = dir.join(FILE);
        // Only a regular file of bounded size: a FIFO or device in its place is no record.
        let files = crate::atomic::read_bounded(&path, 64 << 20)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Failed {
            path,
            files,
            dirty: false,
        }
    }

    /// The earlier failure of `path`, if its content is still the one that failed and the
    /// parsers are still the ones that failed on it.
    pub fn known(&self, path: &str, hash: &str) -> Option<&Failure> {
        self.files
            .get(path)
            .filter(|f| f.hash == hash && f.parsers == super::parse::PARSERS)
    }

    pub fn record(&mut self, path: &str, hash: &str, error: &str) {
        self.files.insert(
            path.to_string(),
            Failure {
                hash: hash.to_string(),
                error: error.to_string(),
                parsers: super::parse::PARSERS,
            },
        );
        self.dirty = true;
    }

    /// Makes the next `save` write the file even if nothing changed.
    pub fn touch(&mut self) {
        self.dirty = true;
    }

    pub fn forget(&mut self, path: &str) {
        self.dirty |= self.files.remove(path).is_some();
    }

    /// Drops records of paths `keep` rejects (files gone from disk).
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        let before = self.files.len();
        self.files.retain(|p, _| keep(p));
        self.dirty |= self.files.len() != before;
    }

    /// Writes the records if they changed: a temporary file renamed over the old one, so a
    /// crash leaves the old or the new records, never half of them.
    pub fn save(&mut self) -> Result<()> {
        if !self.dirty {
            return Ok(());
        }
        crate::atomic::write(&self.path, &serde_json::to_vec_pretty(&self.files)?)?;
        self.dirty = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_a_reload_and_match_only_the_failed_content() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = Failed::load(dir.path());
        assert!(f.files.is_empty());
        f.record("a.html", "h1", "stack overflow");
        f.record("b.pdf", "h2", "timeout");
        f.save().unwrap();
        let mut g = Failed::load(dir.path());
        assert_eq!(g.known("a.html", "h1").unwrap().error, "stack overflow");
        assert!(g.known("a.html", "changed").is_none());
        g.forget("a.html");
        g.retain(|p| p != "b.pdf");
        g.save().unwrap();
        assert!(Failed::load(dir.path()).files.is_empty());
        // A failure under older parsers (a record without the field) is tried again.
        let old = r#"{"c.html": {"hash": "h3", "error": "no text"}}"#;
        std::fs::write(dir.path().join(FILE), old).unwrap();
        let h = Failed::load(dir.path());
        assert_eq!(h.files["c.html"].parsers, 0);
        assert!(h.known("c.html", "h3").is_none());
        std::fs::write(dir.path().join(FILE), "{not json").unwrap();
        assert!(Failed::load(dir.path()).files.is_empty(), "damaged = none");
    }
}

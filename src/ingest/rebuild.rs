//! `rag ingest --rebuild` builds the new index in `<index>/next/` and swaps it in only when
//! the build succeeded, so a failed rebuild (a mistyped model path, a full disk, Ctrl-C)
//! leaves the old index as it was. The swap is a few renames under the ingest lock; the
//! new `index.json` moves last, and a swap cut short by a crash is finished by the next
//! ingest (see [`recover`]).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The parts a rebuild writes, moved in before `index.json` (whose presence says the rest is
/// complete). `failed.json` is always written by a rebuild, so the old records never survive it.
const PARTS: &[&str] = &["chunks.lance", "files.lance", "failed.json"];
const META: &str = "index.json";
/// Written in `next/` once the rebuild succeeded: from then on the swap may go ahead.
const DONE: &str = "rebuild-complete";

/// The folder a rebuild writes to.
pub fn next_dir(dir: &Path) -> PathBuf {
    dir.join("next")
}

fn remove(p: &Path) -> Result<()> {
    if p.is_dir() {
        std::fs::remove_dir_all(p).with_context(|| format!("removing {}", p.display()))
    } else if p.exists() {
        std::fs::remove_file(p).with_context(|| format!("removing {}", p.display()))
    } else {
        Ok(())
    }
}

/// Before an ingest (lock held): finishes a swap a crash cut short, or drops what a rebuild
/// that did not succeed left in `next/` (the old index was never touched).
pub fn recover(dir: &Path) -> Result<()> {
    let next = next_dir(dir);
    if next.join(DONE).exists() {
        return swap(dir);
    }
    remove(&next)
}

/// Marks the rebuild in `next/` as complete and swaps it in.
pub fn finish(dir: &Path) -> Result<()> {
    let done = next_dir(dir).join(DONE);
    std::fs::write(&done, b"").with_context(|| format!("writing {}", done.display()))?;
    swap(dir)
}

/// Replaces the index in `dir` with the complete one in `next/`. Every step can run again
/// after a crash: a part still in `next/` has not been moved, so the one in `dir` is old.
fn swap(dir: &Path) -> Result<()> {
    let next = next_dir(dir);
    if next.join(META).exists() {
        // From here until the new index.json is in, the folder holds no complete index.
        remove(&dir.join(META))?;
        // Cached prompts were built from the old index's text.
        remove(&dir.join("prompt-cache"))?;
        for part in PARTS {
            let p = next.join(part);
            if p.exists() {
                remove(&dir.join(part))?;
                std::fs::rename(&p, dir.join(part))
                    .with_context(|| format!("moving {} into place", p.display()))?;
            }
        }
        std::fs::rename(next.join(META), dir.join(META))
            .with_context(|| format!("moving the new {META} into {}", dir.display()))?;
    }
    remove(&next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(p: &Path, text: &str) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn a_finished_rebuild_replaces_every_part_and_a_cut_short_swap_is_completed() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        let next = next_dir(dir);
        let read = |p: &str| std::fs::read_to_string(dir.join(p)).unwrap();
        write(&dir.join("index.json"), "old");
        write(&dir.join("chunks.lance/data"), "old");
        write(&dir.join("failed.json"), "old");
        write(&dir.join("prompt-cache/x"), "old");
        write(&next.join("chunks.lance/data"), "new");
        write(&next.join("failed.json"), "{}");
        write(&next.join("index.json"), "new");

        // A rebuild that did not succeed is dropped; the old index stays.
        recover(dir).unwrap();
        assert!(!next.exists());
        assert_eq!(read("chunks.lance/data"), "old");

        write(&next.join("chunks.lance/data"), "new");
        write(&next.join("failed.json"), "{}");
        write(&next.join("index.json"), "new");
        finish(dir).unwrap();
        assert_eq!(
            (read("index.json"), read("chunks.lance/data")),
            ("new".into(), "new".into())
        );
        assert_eq!(read("failed.json"), "{}");
        assert!(
            !dir.join("prompt-cache").exists(),
            "the old cache goes with the old index"
        );
        assert!(!next.exists());

        // A crash in the middle of a swap: chunks moved, index.json not yet.
        write(&next.join("chunks.lance/data"), "newer");
        write(&next.join("files.lance/data"), "newer");
        write(&next.join("index.json"), "newer");
        write(&next.join(DONE), "");
        std::fs::remove_file(dir.join("index.json")).unwrap();
        std::fs::remove_dir_all(dir.join("chunks.lance")).unwrap();
        std::fs::rename(next.join("chunks.lance"), dir.join("chunks.lance")).unwrap();
        recover(dir).unwrap();
        assert_eq!(read("index.json"), "newer");
        assert_eq!(read("chunks.lance/data"), "newer");
        assert_eq!(read("files.lance/data"), "newer");
        assert!(!next.exists());
    }
}

//! Replacing a small file so that a kill or a power cut leaves the old or the new content,
//! never half of it: the bytes go to a temporary file in the same folder, are fsynced, and
//! the rename that publishes them is fsynced too (through the folder).

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

/// Writes `bytes` to `path` atomically and durably.
pub fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        // The rename lives in the folder's entries: sync them too (not possible on every
        // platform or filesystem; the data is already safe, only the name could roll back).
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn replaces_the_content_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.json");
        super::write(&p, b"old").unwrap();
        super::write(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn a_failed_write_names_the_file_and_keeps_the_old_content() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.json");
        super::write(&p, b"old").unwrap();
        // A folder where the file's name should be: the rename fails.
        let q = dir.path().join("sub");
        std::fs::create_dir_all(q.join("inner")).unwrap();
        let err = super::write(&q, b"new").unwrap_err();
        assert!(format!("{err:#}").contains("sub"), "{err:#}");
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert!(q.join("inner").is_dir());
    }
}

//! Replacing a small file so that a kill or a power cut leaves the old or the new content,
//! never half of it: the bytes go to a temporary file in the same folder, are fsynced, and
//! the rename that publishes them is fsynced too (through the folder). And reading one back
//! safely: only a regular file, of a bounded size, never blocking on a FIFO or a device.

use std::io::{Read, Write};
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

/// Opens `path` for reading only if it is a regular file (a link is followed only to one):
/// a FIFO, socket or device is an error naming the file, never a wait. It is opened without
/// blocking and checked again once open, so a swap between the two checks is caught too.
pub fn open_regular(path: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let not_regular = || {
        anyhow::anyhow!(
            "{} is not a regular file: move it aside (rag rebuilds a cache, or fetches a model again)",
            path.display()
        )
    };
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .with_context(|| format!("reading {}", path.display()))?;
    let meta = f
        .metadata()
        .with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    Ok(f)
}

/// Reads the state file at `path` ([`open_regular`]) of at most `max` bytes.
pub fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>> {
    let f = open_regular(path)?;
    let len = f.metadata().map_or(0, |m| m.len());
    if len > max {
        anyhow::bail!(
            "{} is {len} bytes, more than the {max} such a file can hold: move it aside, and rag writes a new one",
            path.display()
        );
    }
    let mut bytes = Vec::new();
    f.take(max + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", path.display()))?;
    if bytes.len() as u64 > max {
        anyhow::bail!("{} grew past {max} bytes while read", path.display());
    }
    Ok(bytes)
}

/// Makes a FIFO at `path`: what a hostile file system puts where a file should be.
#[cfg(test)]
pub(crate) fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path we own.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
        0,
        "{}",
        path.display()
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_fifo_a_folder_or_a_large_file_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("speeds.json");
        super::mkfifo(&fifo);
        let e = super::read_bounded(&fifo, 100).unwrap_err();
        assert!(format!("{e:#}").contains("not a regular file"), "{e:#}");
        // A link to the FIFO is no better.
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        assert!(super::read_bounded(&link, 100).is_err());
        assert!(super::read_bounded(dir.path(), 100).is_err());
        let big = dir.path().join("big.json");
        std::fs::write(&big, vec![b' '; 101]).unwrap();
        let e = super::read_bounded(&big, 100).unwrap_err();
        assert!(format!("{e:#}").contains("101 bytes"), "{e:#}");
        std::fs::write(&big, b"{}").unwrap();
        assert_eq!(super::read_bounded(&big, 100).unwrap(), b"{}");
    }

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

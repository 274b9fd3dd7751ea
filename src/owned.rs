//! The one rule for every file rag deletes in a folder it owns (the model folder, the index's
//! state): only a regular file or an empty folder, reached from the owned root without
//! passing through a symbolic link, and named by rag's own records (a relative path with
//! no `..`). A link is removed as a link, never followed: a user who links `minilm/` or a
//! GGUF to another disk loses the link, never the files behind it. Anything else in the
//! way (a FIFO, a device, a folder where a file was) is left alone and reported.

use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context, Result};

/// What [`remove_file`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Removed {
    /// A regular file of this many bytes.
    File(u64),
    /// A symbolic link (what it pointed to is untouched).
    Link,
    /// Nothing there.
    Absent,
    /// Left alone, and why: behind a link, or not a regular file.
    Kept(String),
}

/// `root/rel` for a record's `rel`: refused when `rel` could leave `root` (absolute, `..`,
/// empty).
pub fn inside(root: &Path, rel: &Path) -> Result<PathBuf> {
    let plain = rel.components().all(|c| matches!(c, Component::Normal(_)));
    if !plain || rel.as_os_str().is_empty() {
        bail!(
            "'{}' names a path outside {}: rag deletes and writes only inside the folder it owns",
            rel.display(),
            root.display()
        );
    }
    Ok(root.join(rel))
}

/// The first folder between `root` and `root/rel` (exclusive of both) that is a symbolic
/// link, if any.
pub fn link_on_the_way(root: &Path, rel: &Path) -> Option<PathBuf> {
    let mut p = root.to_path_buf();
    let parts: Vec<_> = rel.components().collect();
    for c in &parts[..parts.len().saturating_sub(1)] {
        p.push(c);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
            return Some(p);
        }
    }
    None
}

/// Removes `root/rel` under the rule above.
pub fn remove_file(root: &Path, rel: &Path) -> Result<Removed> {
    let path = inside(root, rel)?;
    if let Some(link) = link_on_the_way(root, rel) {
        return Ok(Removed::Kept(format!(
            "{} is reached through the link {}, which rag does not follow",
            path.display(),
            link.display()
        )));
    }
    let Ok(meta) = std::fs::symlink_metadata(&path) else {
        return Ok(Removed::Absent);
    };
    let kind = meta.file_type();
    if !(kind.is_file() || kind.is_symlink()) {
        return Ok(Removed::Kept(format!(
            "{} is not a regular file rag wrote",
            path.display()
        )));
    }
    std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    Ok(if kind.is_symlink() {
        Removed::Link
    } else {
        Removed::File(meta.len())
    })
}

/// Removes the folder `root/rel` when it is empty (or is a link: the link alone goes);
/// whether it went.
pub fn remove_empty_dir(root: &Path, rel: &Path) -> bool {
    let Ok(path) = inside(root, rel) else {
        return false;
    };
    if link_on_the_way(root, rel).is_some() {
        return false;
    }
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => std::fs::remove_file(&path).is_ok(),
        Ok(m) if m.is_dir() => std::fs::remove_dir(&path).is_ok(),
        _ => false,
    }
}

/// Removes the whole scratch folder `root/name` that rag made (a link in its place goes as a
/// link; std's `remove_dir_all` follows no link inside it).
pub fn remove_scratch(root: &Path, name: &str) -> Result<()> {
    let path = inside(root, Path::new(name))?;
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path),
        Ok(_) => std::fs::remove_file(&path),
        Err(_) => Ok(()),
    }
    .with_context(|| format!("removing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_link_is_removed_as_a_link_and_never_followed() {
        let outside = tempfile::tempdir().unwrap();
        let theirs = outside.path().join("model.gguf");
        std::fs::write(&theirs, b"GGUF their file").unwrap();
        std::fs::create_dir(outside.path().join("minilm")).unwrap();
        std::fs::write(outside.path().join("minilm/tokenizer.json"), b"{}").unwrap();
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        symlink(&theirs, r.join("model.gguf")).unwrap();
        symlink(outside.path().join("minilm"), r.join("minilm")).unwrap();
        std::fs::write(r.join("mine.gguf"), b"GGUF").unwrap();
        assert_eq!(
            remove_file(r, Path::new("model.gguf")).unwrap(),
            Removed::Link
        );
        assert!(theirs.is_file(), "the file behind the link stays");
        let kept = remove_file(r, Path::new("minilm/tokenizer.json")).unwrap();
        assert!(
            matches!(kept, Removed::Kept(ref why) if why.contains("link")),
            "{kept:?}"
        );
        assert!(outside.path().join("minilm/tokenizer.json").is_file());
        assert!(remove_empty_dir(r, Path::new("minilm")), "the link goes");
        assert!(outside.path().join("minilm/tokenizer.json").is_file());
        assert_eq!(
            remove_file(r, Path::new("mine.gguf")).unwrap(),
            Removed::File(4)
        );
        assert_eq!(
            remove_file(r, Path::new("mine.gguf")).unwrap(),
            Removed::Absent
        );
    }

    #[test]
    fn records_naming_outside_paths_and_special_files_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        for bad in ["/etc/passwd", "../x", "a/../../x", ""] {
            let e = remove_file(r, Path::new(bad)).unwrap_err();
            assert!(format!("{e:#}").contains("outside"), "{bad}: {e:#}");
        }
        crate::atomic::mkfifo(&r.join("speeds.json"));
        let kept = remove_file(r, Path::new("speeds.json")).unwrap();
        assert!(matches!(kept, Removed::Kept(_)), "{kept:?}");
        std::fs::create_dir(r.join("full")).unwrap();
        std::fs::write(r.join("full/x"), b"x").unwrap();
        assert!(!remove_empty_dir(r, Path::new("full")));
        assert!(r.join("full/x").is_file());
    }
}

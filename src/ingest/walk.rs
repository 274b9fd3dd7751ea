//! Which files to index: a gitignore-aware walk (the `ignore` crate, as in ripgrep) that also
//! reads `.ragignore`, skips hidden files, never follows symlinks, and reports files that are
//! too large. Never reads file contents.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::parse::Format;
use crate::exit::ExitError;

#[derive(Debug, Clone)]
pub struct SourceFile {
    pub abs: PathBuf,
    /// Path relative to the project root with `/` separators (absolute when outside it), so
    /// the index survives moving the project folder.
    pub rel: String,
    pub size: u64,
    pub mtime_ns: i64,
}

#[derive(Debug, Default)]
pub struct Walked {
    pub files: Vec<SourceFile>,
    /// (path, reason) of files left out by policy: symlinks, too large, unsupported.
    pub skipped: Vec<(String, String)>,
    /// (path, reason) of files and folders that could not be read: failures.
    pub failed: Vec<(String, String)>,
    /// Relative prefixes the walk covered: only stored files under these can be pruned.
    pub scopes: Vec<String>,
    /// Relative paths the walk could not read (folders it could not list): stored files
    /// under them are never pruned, since their absence proves nothing.
    pub unreadable: Vec<String>,
}

/// The path an `ignore` error is about, if it names one.
fn error_path(e: &ignore::Error) -> Option<&Path> {
    match e {
        ignore::Error::WithPath { path, .. } => Some(path),
        ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => {
            error_path(err)
        }
        ignore::Error::Partial(errs) => errs.iter().find_map(error_path),
        _ => None,
    }
}

pub fn relative(root: &Path, abs: &Path) -> String {
    match abs.strip_prefix(root) {
        Ok(rel) => rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/"),
        Err(_) => abs.to_string_lossy().into_owned(),
    }
}

/// Which files to take beyond the ignore files: `include` globs (none = all) and `exclude`
/// globs, matched against the path relative to the project root.
#[derive(Debug, Default)]
pub struct Filter {
    include: Option<globset::GlobSet>,
    exclude: globset::GlobSet,
}

impl Filter {
    pub fn new(include: &[String], exclude: &[String]) -> Result<Filter> {
        let set = |globs: &[String], key: &str| -> Result<globset::GlobSet> {
            let mut b = globset::GlobSetBuilder::new();
            for g in globs {
                let glob = globset::Glob::new(g).map_err(|e| {
                    ExitError::usage(format!("chunk.{key}: {g:?} is not a valid glob ({e})"))
                })?;
                b.add(glob);
            }
            b.build()
                .map_err(|e| ExitError::usage(format!("chunk.{key}: {e}")))
        };
        let include = if include.is_empty() {
            None
        } else {
            Some(set(include, "include")?)
        };
        Ok(Filter {
            include,
            exclude: set(exclude, "exclude")?,
        })
    }

    fn takes(&self, rel: &str) -> bool {
        self.include.as_ref().is_none_or(|s| s.is_match(rel)) && !self.exclude.is_match(rel)
    }
}

/// The walk's rules, shared by ingest and `--watch`: .gitignore (even outside a git
/// checkout), .ragignore, no hidden files, no symlinks followed.
pub fn builder(path: &Path) -> ignore::WalkBuilder {
    let mut b = ignore::WalkBuilder::new(path);
    b.hidden(true)
        .follow_links(false)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .require_git(false)
        .add_custom_ignore_filename(".ragignore");
    b
}

/// Walks `inputs` (files or folders). `root` must be absolute and canonical.
pub fn walk(root: &Path, inputs: &[PathBuf], max_bytes: u64, filter: &Filter) -> Result<Walked> {
    let mut found: BTreeMap<String, SourceFile> = BTreeMap::new();
    let mut out = Walked::default();
    for input in inputs {
        let abs = std::fs::canonicalize(input).map_err(|e| {
            ExitError::usage(format!(
                "cannot read {} ({e}); give an existing file or folder",
                input.display()
            ))
        })?;
        out.scopes.push(relative(root, &abs));
        let explicit_file = abs.is_file();
        let walker = builder(&abs).sort_by_file_path(|a, b| a.cmp(b)).build();
        for entry in walker {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    let path = error_path(&e).map(|p| relative(root, p));
                    if let Some(p) = &path {
                        out.unreadable.push(p.clone());
                    }
                    out.failed.push((
                        path.unwrap_or_else(|| e.to_string()),
                        format!("unreadable: {e}"),
                    ));
                    continue;
                }
            };
            let take = Take {
                root,
                max_bytes,
                filter,
                explicit_file,
            };
            if let Some(f) = take.entry(&entry, &mut out) {
                found.insert(f.rel.clone(), f);
            }
        }
    }
    out.files = found.into_values().collect();
    Ok(out)
}

/// What decides whether one walked entry is a file to ingest.
struct Take<'a> {
    root: &'a Path,
    max_bytes: u64,
    filter: &'a Filter,
    /// The entry was named on the command line: an unsupported type is reported, not
    /// passed over in silence.
    explicit_file: bool,
}

impl Take<'_> {
    /// The file to ingest, or `None` (recording in `out` why, where a user would ask).
    fn entry(&self, entry: &ignore::DirEntry, out: &mut Walked) -> Option<SourceFile> {
        let ft = entry.file_type()?;
        if !ft.is_file() {
            if ft.is_symlink() {
                out.skipped.push((
                    relative(self.root, entry.path()),
                    "symbolic link (not followed)".into(),
                ));
            }
            return None;
        }
        let rel = relative(self.root, entry.path());
        if !self.filter.takes(&rel) {
            return None;
        }
        if Format::of(&rel).is_none() {
            if self.explicit_file {
                out.skipped.push((rel, "unsupported file type".into()));
            }
            return None;
        }
        let meta = match entry.metadata() {
            Ok(m) => m,
            Err(e) => {
                out.unreadable.push(rel.clone());
                out.failed.push((rel, format!("unreadable: {e}")));
                return None;
            }
        };
        if meta.len() > self.max_bytes {
            let why = format!(
                "{} bytes is over chunk.max_file_bytes = {}",
                meta.len(),
                self.max_bytes
            );
            out.skipped.push((rel, why));
            return None;
        }
        Some(SourceFile {
            abs: entry.path().to_path_buf(),
            rel,
            size: meta.len(),
            mtime_ns: crate::hashcache::mtime_ns(&meta),
        })
    }
}

/// Reads a file found by the walk, as the walk saw it: a regular file (not a symlink put in
/// its place since, which could point at `/dev/zero` or a FIFO), at most `max` bytes (a file
/// that grew past `chunk.max_file_bytes` since is refused, not read into memory).
pub fn read_file(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => {
                std::io::Error::other("replaced by a symbolic link since the walk")
            }
            _ => e,
        })?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut out = Vec::with_capacity(meta.len().min(max) as usize);
    file.take(max.saturating_add(1)).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(std::io::Error::other(format!(
            "grew past chunk.max_file_bytes = {max} since the walk"
        )));
    }
    Ok(out)
}

/// Whether a stored path lies under one of the walked scopes.
pub fn in_scope(path: &str, scopes: &[String]) -> bool {
    scopes.iter().any(|s| {
        s.is_empty()
            || path == s
            || path
                .strip_prefix(s.as_str())
                .is_some_and(|r| r.starts_with('/'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn respects_ignore_files_and_hidden() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let w = |p: &str, s: &str| {
            let p = root.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, s).unwrap();
        };
        w("docs/a.md", "# A");
        w("docs/skip.md", "# no");
        w("docs/.hidden.md", "# no");
        w("docs/img.png", "x");
        w("docs/.gitignore", "skip.md\n");
        w("docs/sub/b.txt", "b");
        w("docs/sub/.ragignore", "*.txt\n");
        w("docs/big.md", &"x".repeat(100));
        let out = walk(&root, &[root.join("docs")], 50, &Filter::default()).unwrap();
        let rels: Vec<&str> = out.files.iter().map(|f| f.rel.as_str()).collect();
        assert_eq!(rels, vec!["docs/a.md"]);
        assert!(out
            .skipped
            .iter()
            .any(|(p, why)| p == "docs/big.md" && why.contains("max_file_bytes")));
        assert_eq!(out.scopes, vec!["docs"]);
        assert!(in_scope("docs/x.md", &out.scopes));
        assert!(!in_scope("docsx/x.md", &out.scopes));

        w("docs/notes/c.md", "# C");
        let only = Filter::new(&["docs/notes/**".into()], &[]).unwrap();
        let rels: Vec<String> = walk(&root, &[root.join("docs")], 50, &only)
            .unwrap()
            .files
            .into_iter()
            .map(|f| f.rel)
            .collect();
        assert_eq!(rels, vec!["docs/notes/c.md"]);
        let not = Filter::new(&[], &["**/a.md".into()]).unwrap();
        let rels: Vec<String> = walk(&root, &[root.join("docs")], 50, &not)
            .unwrap()
            .files
            .into_iter()
            .map(|f| f.rel)
            .collect();
        assert_eq!(rels, vec!["docs/notes/c.md"]);
        assert!(Filter::new(&["a[".into()], &[]).is_err());
    }

    #[test]
    fn reads_refuse_symlinks_devices_and_growth() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.txt");
        std::fs::write(&f, "12345").unwrap();
        assert_eq!(read_file(&f, 5).unwrap(), b"12345");
        let e = read_file(&f, 4).unwrap_err();
        assert!(e.to_string().contains("max_file_bytes"), "{e}");
        let link = dir.path().join("zero.txt");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let e = read_file(&link, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(
            read_file(Path::new("/dev/zero"), 1 << 20).is_err(),
            "a device is not a file"
        );
    }
}

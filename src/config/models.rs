//! Where the models are found: the project's `models/`, else the user's model folder.

use std::path::{Path, PathBuf};

use toml::{Table, Value};

/// The user's model folder, where `scripts/setup.sh --user` (and `make install`) put the
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
    format!("run `rag models fetch` (it puts the models in {user}, where rag finds them from any folder), or `scripts/setup.sh` in rag's checkout")
}

/// Keys whose built-in default is a file under `models/` (what `scripts/setup.sh` fetches).
pub const MODEL_KEYS: &[&str] = &[
    "embed.model",
    "embed.tokenizer_dir",
    "embed.ort_lib",
    "llm.model",
    "llm.medium_model",
    "llm.large_model",
    "llm.draft_model",
];

/// In the defaults layer (already resolved against `base`): a model the project's
/// `models/` folder lacks is taken from the user's model folder when it is there.
pub(super) fn prefer_user_models(defaults: &mut Table, base: &Path, user: Option<&Path>) {
    let Some(user) = user else { return };
    for key in MODEL_KEYS {
        let (section, name) = key.split_once('.').expect("section.key");
        let Some(Value::String(s)) = defaults.get_mut(section).and_then(|t| t.get_mut(name)) else {
            continue;
        };
        let Ok(rel) = Path::new(s.as_str()).strip_prefix(base.join("models")) else {
            continue;
        };
        let there = user.join(rel);
        if !Path::new(s.as_str()).exists() && there.exists() {
            *s = there.to_string_lossy().into_owned();
        }
    }
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

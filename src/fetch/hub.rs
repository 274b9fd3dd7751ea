//! `rag models fetch hf:ORG/REPO/FILE.gguf`: one GGUF from a Hugging Face hub, or a mirror
//! that serves its URL layout (`models.hub`, `--hub`), where the user's network reaches one.
//!
//! The file's SHA-256 and size come from the hub's own answer to a HEAD request on
//! `HUB/ORG/REPO/resolve/main/FILE` (`X-Linked-Etag` and `X-Linked-Size`, as the hub answers for
//! files it keeps in LFS, before its redirect to a CDN), or from `--sha256`. The download goes
//! to a partial file beside its place and resumes where it stopped (an HTTP range request),
//! after a dropped connection within this run or in a later run; the whole file is checked
//! against the SHA-256 before it is renamed into place. It lands in `DIR/hf/ORG/REPO/FILE`,
//! where `--model hf:ORG/REPO/FILE.gguf` finds it.

use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use reqwest::blocking::{Client, Response};
use reqwest::header::{CONTENT_LENGTH, CONTENT_RANGE, RANGE};
use reqwest::StatusCode;

use crate::exit::ExitError;

/// The public hub; `models.hub` or `--hub` names a mirror.
pub const DEFAULT_HUB: &str = "https://huggingface.co";
/// Tries of one download (each resumes where the last stopped).
const TRIES: u32 = 5;

/// `ORG/REPO/FILE.gguf` of an `hf:` name, each part checked.
#[derive(Debug, Clone, PartialEq)]
pub struct HubFile {
    pub org: String,
    pub repo: String,
    /// The file's path inside the repository (may hold folders).
    pub file: String,
}

impl HubFile {
    /// Parses `hf:ORG/REPO/FILE.gguf`; an error says what a name looks like.
    pub fn parse(name: &str) -> Result<HubFile> {
        let bad = || {
            ExitError::usage(format!(
                "{name:?} is not a hub file: give hf:ORG/REPO/FILE.gguf (as the hub's page names them, e.g. hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf)"
            ))
        };
        let rest = name.strip_prefix("hf:").ok_or_else(bad)?;
        let mut parts = rest.splitn(3, '/');
        let (org, repo, file) = match (parts.next(), parts.next(), parts.next()) {
            (Some(o), Some(r), Some(f)) => (o, r, f),
            _ => return Err(bad()),
        };
        let word = |s: &str| {
            !s.is_empty()
                && !s.starts_with('.')
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        };
        let file_ok = Path::new(file)
            .components()
            .all(|c| matches!(c, Component::Normal(n) if !n.to_string_lossy().starts_with('.')))
            && file.ends_with(".gguf");
        if !(word(org) && word(repo) && file_ok) {
            return Err(bad());
        }
        Ok(HubFile {
            org: org.into(),
            repo: repo.into(),
            file: file.into(),
        })
    }

    /// `HUB/ORG/REPO/resolve/main/FILE`, each part escaped.
    pub fn url(&self, hub: &str) -> Result<reqwest::Url> {
        let mut url = reqwest::Url::parse(hub.trim_end_matches('/')).map_err(|e| {
            ExitError::usage(format!(
                "models.hub {hub:?} is not a URL ({e}); give one like {DEFAULT_HUB}"
            ))
        })?;
        url.path_segments_mut()
            .map_err(|()| ExitError::usage(format!("models.hub {hub:?} cannot take a path")))?
            .pop_if_empty()
            .extend([self.org.as_str(), self.repo.as_str(), "resolve", "main"])
            .extend(self.file.split('/'));
        Ok(url)
    }

    /// Where it goes under a model folder: `DIR/hf/ORG/REPO/FILE`.
    pub fn target(&self, dir: &Path) -> PathBuf {
        dir.join("hf")
            .join(&self.org)
            .join(&self.repo)
            .join(&self.file)
    }
}

/// What the hub says of a file before it is fetched.
#[derive(Debug, PartialEq)]
struct Published {
    sha256: Option<String>,
    size: Option<u64>,
}

/// How a hub fetch ended.
#[derive(Debug, PartialEq)]
pub enum Fetched {
    /// Already in place with the expected checksum.
    Present(PathBuf),
    /// Downloaded (`resumed`: bytes a partial file already held) and checked.
    Downloaded {
        path: PathBuf,
        bytes: u64,
        resumed: u64,
    },
}

pub struct Hub<'a> {
    pub base: &'a str,
    /// Called with (bytes so far, bytes in all) as the download goes.
    pub progress: &'a dyn Fn(u64, u64),
    pub say: &'a dyn Fn(&str),
}

impl Hub<'_> {
    /// Fetches `f` into `dir`, checked against `sha256` (else the hub's published one).
    pub fn fetch(&self, f: &HubFile, dir: &Path, sha256: Option<&str>) -> Result<Fetched> {
        let url = f.url(self.base)?;
        let published = self.published(&url)?;
        let want = match (sha256, &published.sha256) {
            (Some(given), _) => given.to_ascii_lowercase(),
            (None, Some(p)) => p.clone(),
            (None, None) => {
                return Err(ExitError::usage(format!(
                    "{url} publishes no SHA-256 for this file (no X-Linked-Etag): give the one on the hub's page with --sha256 HEX"
                )))
            }
        };
        let rel = f.target(Path::new(""));
        let target = crate::owned::inside(dir, &rel)?;
        // Written only inside the model folder: never through a link someone put on the way.
        if let Some(link) = crate::owned::link_on_the_way(dir, &rel) {
            return Err(ExitError::usage(format!(
                "{} is a symbolic link: rag writes hub files only into folders of its own; remove the link or fetch with --dir DIR",
                link.display()
            )));
        }
        if target.is_file() && crate::hashcache::sha256_file(&target)? == want {
            return Ok(Fetched::Present(target));
        }
        let parent = target.parent().expect("a file under the model folder");
        std::fs::create_dir_all(parent).with_context(|| {
            format!(
                "creating {} (name a folder you can write with --dir DIR)",
                parent.display()
            )
        })?;
        let part = super::partial_name(&target);
        let resumed = std::fs::metadata(&part).map_or(0, |m| m.len());
        let bytes = self.download(&url, &part, published.size)?;
        let got = crate::hashcache::sha256_file(&part)?;
        if got != want {
            let _ = std::fs::remove_file(&part);
            return Err(ExitError::model(format!(
                "{url}: the download's SHA-256 is {got}, not the {want} expected; it was deleted: fetch again (a mirror serving another file? check models.hub)"
            )));
        }
        std::fs::rename(&part, &target)
            .with_context(|| format!("renaming {} into place", part.display()))?;
        if let Ok(d) = std::fs::File::open(parent) {
            let _ = d.sync_all();
        }
        Ok(Fetched::Downloaded {
            path: target,
            bytes,
            resumed,
        })
    }

    /// The hub's SHA-256 and size of the file, read before any redirect (a CDN's answer
    /// carries neither).
    fn published(&self, url: &reqwest::Url) -> Result<Published> {
        let head = client(reqwest::redirect::Policy::none())?
            .head(url.clone())
            .send()
            .map_err(|e| unreachable_hub(url, &e))?;
        let status = head.status();
        if !(status.is_success() || status.is_redirection()) {
            return Err(not_served(url, status));
        }
        let header = |k: &str| {
            head.headers()
                .get(k)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.trim_matches('"').to_string())
        };
        let sha256 = header("x-linked-etag")
            .or_else(|| header("etag"))
            .filter(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(|s| s.to_ascii_lowercase());
        let size = header("x-linked-size")
            .or_else(|| {
                status
                    .is_success()
                    .then(|| header("content-length"))
                    .flatten()
            })
            .and_then(|s| s.parse().ok());
        Ok(Published { sha256, size })
    }

    /// Downloads `url` into `part`, resuming what it holds; the bytes in all.
    fn download(&self, url: &reqwest::Url, part: &Path, size: Option<u64>) -> Result<u64> {
        let http = client(reqwest::redirect::Policy::limited(10))?;
        let mut last = None;
        for attempt in 0..TRIES {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(500 << attempt.min(4)));
            }
            let have = std::fs::metadata(part).map_or(0, |m| m.len());
            if size == Some(have) {
                return Ok(have);
            }
            if attempt > 0 || have > 0 {
                (self.say)(&format!("resuming at {} MB", have >> 20));
            }
            match self.one_try(&http, url, part, have, size) {
                Ok(n) => return Ok(n),
                Err(Try::Fatal(e)) => return Err(e),
                Err(Try::Again(e)) => last = Some(e),
            }
        }
        Err(last.expect("a try failed").context(format!(
            "{url}: the download stopped {TRIES} times; run the same command again to resume it"
        )))
    }

    /// One GET from byte `have` on: appends to `part` (or starts over when the server sends
    /// the whole file).
    fn one_try(
        &self,
        http: &Client,
        url: &reqwest::Url,
        part: &Path,
        have: u64,
        size: Option<u64>,
    ) -> Result<u64, Try> {
        let mut req = http.get(url.clone());
        if have > 0 {
            req = req.header(RANGE, format!("bytes={have}-"));
        }
        let mut resp = req
            .send()
            .map_err(|e| Try::Again(unreachable_hub(url, &e)))?;
        let status = resp.status();
        let from = match status {
            StatusCode::PARTIAL_CONTENT if range_start(&resp) == Some(have) => have,
            StatusCode::OK => 0,
            StatusCode::RANGE_NOT_SATISFIABLE if have > 0 => {
                // What is there is longer than the file: start over.
                let _ = std::fs::remove_file(part);
                return Err(Try::Again(anyhow::anyhow!(
                    "{url}: the partial file was longer than the file"
                )));
            }
            s if s.is_server_error() => return Err(Try::Again(not_served(url, s))),
            s => return Err(Try::Fatal(not_served(url, s))),
        };
        let total = size
            .or_else(|| length(&resp).map(|n| n + from))
            .unwrap_or(0);
        let written = |e: std::io::Error| {
            Try::Fatal(anyhow::Error::new(e).context(format!("writing {}", part.display())))
        };
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(from > 0)
            .truncate(from == 0)
            .open(part)
            .map_err(written)?;
        let done = self.copy(&mut resp, &mut out, (from, total), url)?;
        out.sync_all().map_err(written)?;
        if total > 0 && done < total {
            return Err(Try::Again(anyhow::anyhow!(
                "{url}: the server stopped at {done} of {total} bytes"
            )));
        }
        Ok(done)
    }

    /// The body into `out`, from byte `from` of `total`; the bytes the file then holds.
    fn copy(
        &self,
        resp: &mut Response,
        out: &mut std::fs::File,
        (from, total): (u64, u64),
        url: &reqwest::Url,
    ) -> Result<u64, Try> {
        let mut done = from;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = match resp.read(&mut buf) {
                Ok(0) => return Ok(done),
                Ok(n) => n,
                Err(e) => {
                    let _ = out.sync_all();
                    return Err(Try::Again(anyhow::anyhow!(
                        "{url}: the connection dropped at {done} bytes ({e})"
                    )));
                }
            };
            out.write_all(&buf[..n])
                .map_err(|e| Try::Fatal(anyhow::Error::new(e).context("writing the download")))?;
            done += n as u64;
            (self.progress)(done, total);
        }
    }
}

/// Removes what hub fetches left under `dir/hf/` (GGUF files, partial downloads), then the
/// folders left empty; links are removed as links, never followed ([`crate::owned`]), and
/// any other file stays. The removed files, as `hf/ORG/REPO/FILE`, with their sizes.
pub fn remove_all(dir: &Path) -> Vec<(String, u64)> {
    let mut gone = Vec::new();
    let mut folders = Vec::new();
    let mut stack = vec![PathBuf::from("hf")];
    while let Some(rel) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(dir.join(&rel)) else {
            continue;
        };
        if std::fs::symlink_metadata(dir.join(&rel)).is_ok_and(|m| m.file_type().is_symlink()) {
            continue;
        }
        folders.push(rel.clone());
        for e in entries.flatten() {
            let child = rel.join(e.file_name());
            let name = e.file_name().to_string_lossy().into_owned();
            let kind = e.file_type().ok();
            if kind.is_some_and(|k| k.is_dir()) {
                stack.push(child);
            } else if name.ends_with(".gguf")
                || (name.starts_with('.') && name.ends_with(".gguf.part"))
            {
                match crate::owned::remove_file(dir, &child) {
                    Ok(crate::owned::Removed::File(n)) => {
                        gone.push((child.display().to_string(), n))
                    }
                    Ok(crate::owned::Removed::Link) => gone.push((child.display().to_string(), 0)),
                    Ok(crate::owned::Removed::Kept(why)) => tracing::warn!("{why}: left in place"),
                    _ => {}
                }
            }
        }
    }
    // Deepest first, so a folder's children go before it.
    folders.sort_by_key(|f| std::cmp::Reverse(f.components().count()));
    for f in &folders {
        crate::owned::remove_empty_dir(dir, f);
    }
    gone
}

/// A failed try: worth another (a dropped connection, a 5xx), or not (a 404).
enum Try {
    Again(anyhow::Error),
    Fatal(anyhow::Error),
}

fn client(redirects: reqwest::redirect::Policy) -> Result<Client> {
    Client::builder()
        .connect_timeout(Duration::from_secs(15))
        // The blocking client applies this to the request and to each read of the body, not
        // to the whole download: a large file on a slow link takes as long as it takes, and
        // a read that stalls for a minute is a dropped connection (resumed).
        .timeout(Duration::from_secs(60))
        .redirect(redirects)
        .build()
        .context("starting the HTTP client")
}

/// The first byte of a 206's `Content-Range: bytes FIRST-LAST/SIZE`.
fn range_start(r: &Response) -> Option<u64> {
    let v = r.headers().get(CONTENT_RANGE)?.to_str().ok()?;
    v.strip_prefix("bytes ")?
        .split('-')
        .next()?
        .trim()
        .parse()
        .ok()
}

fn length(r: &Response) -> Option<u64> {
    r.headers().get(CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

fn unreachable_hub(url: &reqwest::Url, e: &reqwest::Error) -> anyhow::Error {
    ExitError::model(format!(
        "cannot reach {url} ({e}); where this machine reaches no hub, set models.hub (RAG_MODELS_HUB, --hub) to a mirror that serves the hub's layout, or copy the GGUF here and pass --model PATH"
    ))
}

fn not_served(url: &reqwest::Url, status: StatusCode) -> anyhow::Error {
    let why = match status.as_u16() {
        401 | 403 => "the repository is private or gated: accept its terms on the hub's page, or fetch it with huggingface-cli and use --model hf:…",
        404 => "no such repository or file: check the name on the hub's page (ORG/REPO/FILE.gguf)",
        _ => "the hub or mirror refused it",
    };
    ExitError::model(format!("{url} answered {status}: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_part_by_part() {
        let f = HubFile::parse("hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/q4/m.gguf").unwrap();
        assert_eq!(
            (f.org.as_str(), f.repo.as_str(), f.file.as_str()),
            ("Qwen", "Qwen2.5-0.5B-Instruct-GGUF", "q4/m.gguf")
        );
        assert_eq!(
            f.url("http://127.0.0.1:9/mirror/").unwrap().as_str(),
            "http://127.0.0.1:9/mirror/Qwen/Qwen2.5-0.5B-Instruct-GGUF/resolve/main/q4/m.gguf"
        );
        assert_eq!(
            f.target(Path::new("/m")),
            Path::new("/m/hf/Qwen/Qwen2.5-0.5B-Instruct-GGUF/q4/m.gguf")
        );
        for bad in [
            "hf:a/b",
            "hf:a/b/c.bin",
            "hf:../b/c.gguf",
            "hf:a/b/../../c.gguf",
            "hf:a/b/.c.gguf",
            "ollama:x",
            "hf:a b/c/d.gguf",
            "hf:a/b//c.gguf",
        ] {
            assert!(HubFile::parse(bad).is_err(), "{bad}");
        }
    }
}

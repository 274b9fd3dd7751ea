//! Where an index lives: a local folder, or a prefix on object storage (`s3://`, `gs://`,
//! `az://`). LanceDB reads and writes the tables either way; this module owns the rest: the
//! connection's storage options, `index.json` (read and written through `object_store`
//! beside the tables), and the stamp that tells a long-lived reader a new version exists.
//!
//! Credentials and endpoints come from the standard environment variables (`AWS_*`,
//! `GOOGLE_*`, `AZURE_*`) with `[index.storage]` over them, the same options for LanceDB
//! and for the objects handled here.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, Result};
use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use super::runtime::block_on;
use crate::exit::ExitError;

/// What to check after a failed request to the object store at `uri`: the error says what
/// the store answered; this says which settings decide it.
pub fn storage_error(e: impl Into<anyhow::Error>, uri: &str, what: &str) -> anyhow::Error {
    let e = e.into();
    let text = format!("{e:#}");
    let fix = if text.contains("169.254.169.254") || text.to_lowercase().contains("credential") {
        "no credentials were found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE; GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY for gs:// and az://) or put them in [index.storage]"
    } else {
        "check the endpoint, bucket and credentials: [index.storage] in rag.toml (aws_endpoint, aws_region, allow_http) and the AWS_*/GOOGLE_*/AZURE_* variables"
    };
    anyhow!("{what} {uri}: {text}; {fix}")
}

/// An index on object storage.
#[derive(Clone)]
pub struct Remote {
    pub uri: String,
    pub options: HashMap<String, String>,
    pub(super) store: Arc<dyn ObjectStore>,
    pub(super) prefix: ObjectPath,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The options may hold credentials.
        write!(f, "Remote({})", self.uri)
    }
}

#[derive(Debug, Clone)]
pub enum Location {
    Local(PathBuf),
    Remote(Remote),
}

/// Environment variables that configure object stores, as `object_store` reads them.
const ENV_PREFIXES: &[&str] = &["AWS_", "GOOGLE_", "AZURE_"];

impl Location {
    /// `dir` is `index.dir`: a folder, or a URI with `storage` (`[index.storage]`) as options.
    pub fn new(dir: &Path, storage: &BTreeMap<String, String>) -> Result<Location> {
        let Some(uri) = dir.to_str().filter(|s| s.contains("://")) else {
            return Ok(Location::Local(dir.to_path_buf()));
        };
        let uri = uri.trim_end_matches('/').to_string();
        let url = url::Url::parse(&uri).map_err(|e| {
            ExitError::usage(format!(
                "index.dir = {uri:?} is not a valid URI ({e}); use s3://bucket/prefix, gs://bucket/prefix, az://container/prefix or a folder"
            ))
        })?;
        if !matches!(url.scheme(), "s3" | "gs" | "az" | "abfss") {
            return Err(ExitError::usage(format!(
                "index.dir = {uri:?}: rag keeps an index in a folder or on s3://, gs:// or az:// object storage, not {}://",
                url.scheme()
            )));
        }
        let mut options: HashMap<String, String> = std::env::vars()
            .filter(|(k, _)| ENV_PREFIXES.iter().any(|p| k.starts_with(p)))
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect();
        options.extend(storage.iter().map(|(k, v)| (k.clone(), v.clone())));
        let (store, prefix) = object_store::parse_url_opts(&url, options.iter()).map_err(|e| {
            ExitError::usage(format!(
                "cannot use the object store at {uri}: {e}; check [index.storage] in rag.toml and the AWS_*/GOOGLE_*/AZURE_* variables"
            ))
        })?;
        Ok(Location::Remote(Remote {
            uri,
            options,
            store: Arc::from(store),
            prefix,
        }))
    }

    /// The index of `index.dir` and `[index.storage]`.
    pub fn of(s: &crate::config::IndexSettings) -> Result<Location> {
        Location::new(&s.dir, &s.storage.0)
    }

    /// The local folder of an index in a folder.
    pub fn local(&self) -> Option<&Path> {
        match self {
            Location::Local(p) => Some(p),
            Location::Remote(_) => None,
        }
    }

    pub fn is_remote(&self) -> bool {
        matches!(self, Location::Remote(_))
    }

    /// The index's location for messages.
    pub fn display(&self) -> String {
        match self {
            Location::Local(p) => p.display().to_string(),
            Location::Remote(r) => r.uri.clone(),
        }
    }

    /// What LanceDB connects to.
    pub(super) fn uri(&self) -> Result<String> {
        match self {
            Location::Local(p) => p
                .to_str()
                .map(String::from)
                .ok_or_else(|| anyhow!("index folder {} is not valid UTF-8", p.display())),
            Location::Remote(r) => Ok(r.uri.clone()),
        }
    }

    /// The text of the file `name` beside the tables, or `None` when there is none.
    pub(super) async fn read(&self, name: &str) -> Result<Option<String>> {
        match self {
            Location::Local(dir) => {
                let path = dir.join(name);
                match std::fs::metadata(&path) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    _ => {}
                }
                // A regular file of bounded size only: a FIFO in its place is an error, no wait.
                let bytes = crate::atomic::read_bounded(&path, 256 << 20)?;
                String::from_utf8(bytes)
                    .map(Some)
                    .map_err(|e| anyhow!(e).context(format!("reading {}", path.display())))
            }
            Location::Remote(r) => match r.store.get(&r.prefix.clone().join(name)).await {
                Ok(got) => {
                    let bytes = got.bytes().await?;
                    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
                }
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(storage_error(e, &format!("{}/{name}", r.uri), "reading")),
            },
        }
    }

    /// Replaces the file `name` beside the tables: atomically and durably in a folder; on
    /// object storage one PUT, which readers see whole or not at all.
    pub(super) async fn write(&self, name: &str, bytes: &[u8]) -> Result<()> {
        match self {
            Location::Local(dir) => crate::atomic::write(&dir.join(name), bytes),
            Location::Remote(r) => {
                let opts = PutOptions {
                    mode: PutMode::Overwrite,
                    ..PutOptions::default()
                };
                r.store
                    .put_opts(
                        &r.prefix.clone().join(name),
                        PutPayload::from(bytes.to_vec()),
                        opts,
                    )
                    .await
                    .map_err(|e| storage_error(e, &format!("{}/{name}", r.uri), "writing"))?;
                Ok(())
            }
        }
    }

    /// Deletes every object of a remote index but the ingest lock (for `--rebuild`, which
    /// holds it); a folder is left alone.
    pub fn clear_remote(&self) -> Result<()> {
        let Location::Remote(r) = self else {
            return Ok(());
        };
        block_on(async {
            let paths: Vec<ObjectPath> = r
                .store
                .list(Some(&r.prefix))
                .map_ok(|m| m.location)
                .try_filter(|p| futures::future::ready(p.filename() != Some("ingest.lock")))
                .try_collect()
                .await
                .map_err(|e| storage_error(e, &r.uri, "listing"))?;
            for p in paths {
                r.store.delete(&p).await?;
            }
            Ok(())
        })
    }

    /// For a remote index: the names and sizes under each table's `_versions/` and the
    /// ETag of `index.json`. A commit adds a manifest, a rebuild replaces `index.json`.
    pub(super) async fn remote_stamp(r: &Remote, tables: &[&str]) -> Vec<String> {
        let mut out = Vec::new();
        if let Ok(m) = r.store.head(&r.prefix.clone().join(super::META)).await {
            out.push(m.e_tag.unwrap_or_default());
        }
        for t in tables {
            let dir = r
                .prefix
                .clone()
                .join(format!("{t}.lance").as_str())
                .join("_versions");
            let mut names: Vec<String> = r
                .store
                .list(Some(&dir))
                .map_ok(|m| format!("{}:{}", m.location, m.size))
                .try_collect()
                .await
                .unwrap_or_default();
            names.sort();
            out.extend(names);
        }
        out
    }
}

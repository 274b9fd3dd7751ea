//! The ingest lock of an index on object storage, shared by every machine that writes it.
//!
//! A folder's index is locked with an flock, which the OS drops with the process. Object
//! stores have no such thing, so the lock is an object, `ingest.lock`, written with the same
//! conditional PUT LanceDB commits with (`If-None-Match: *`): of two machines that start
//! an ingest at once, exactly one creates it; the other is refused with the holder's name.
//! The holder rewrites it six times per stale period (a heartbeat) and deletes it at the end. A lock
//! whose heartbeat is older than [`stale`] was left by a killed ingest: the next one takes
//! it over with a PUT conditional on the stale copy's ETag (`If-Match`), so of two machines
//! that find it stale, one wins. LanceDB's own commit conflict checks stay underneath:
//! chunk ids are content hashes and records are keyed by path, so nothing duplicates even
//! then.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};

use super::location::Remote;
use super::runtime::{block_on, runtime};
use crate::exit::ExitError;

/// A lock not refreshed for this long belongs to an ingest that died (90 s; the object-store
/// tests shorten it with `RAG_TEST_LEASE_STALE_S` rather than wait).
fn stale() -> Duration {
    let test = std::env::var("RAG_TEST_LEASE_STALE_S").ok();
    Duration::from_secs(test.and_then(|s| s.parse().ok()).unwrap_or(90))
}

#[derive(Debug, Serialize, Deserialize)]
struct Holder {
    host: String,
    pid: u32,
    started: u64,
    beat: u64,
}

/// Holds the lock until dropped (or released).
pub struct Lease {
    remote: Remote,
    path: ObjectPath,
    version: Arc<Mutex<UpdateVersion>>,
    stop: Arc<AtomicBool>,
    beat: Option<tokio::task::JoinHandle<()>>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown host".into())
}

fn payload(h: &Holder) -> PutPayload {
    PutPayload::from(serde_json::to_vec(h).unwrap_or_default())
}

fn version(r: &object_store::PutResult) -> UpdateVersion {
    UpdateVersion {
        e_tag: r.e_tag.clone(),
        version: r.version.clone(),
    }
}

impl Lease {
    /// Takes the lock of the index at `remote`, or refuses (exit 2) naming its holder.
    pub fn acquire(remote: &Remote) -> Result<Lease> {
        let path = remote.prefix.clone().join("ingest.lock");
        let started = now();
        let me = Holder {
            host: host(),
            pid: std::process::id(),
            started,
            beat: started,
        };
        let store = remote.store.clone();
        let create = store.put_opts(&path, payload(&me), PutMode::Create.into());
        let created = block_on(async { Ok(create.await) })?;
        let put = match created {
            Ok(put) => put,
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => {
                block_on(take_over_stale(remote, &path, &me))?
            }
            Err(e) => {
                let lock = format!("{}/ingest.lock", remote.uri);
                return Err(super::location::storage_error(
                    e,
                    &lock,
                    "creating the ingest lock",
                ));
            }
        };
        let mut lease = Lease {
            remote: remote.clone(),
            path,
            version: Arc::new(Mutex::new(version(&put))),
            stop: Arc::new(AtomicBool::new(false)),
            beat: None,
        };
        // The heartbeat runs on the runtime: it awaits object_store itself, never block_on.
        lease.beat = Some(runtime()?.spawn(heartbeat(
            remote.clone(),
            lease.path.clone(),
            me,
            lease.version.clone(),
            lease.stop.clone(),
        )));
        Ok(lease)
    }
}

/// The lock exists: refuse if its holder is alive, else replace it if nobody else did first.
async fn take_over_stale(
    remote: &Remote,
    path: &ObjectPath,
    me: &Holder,
) -> Result<object_store::PutResult> {
    let got = remote.store.get(path).await;
    let (holder, version) = match got {
        Ok(g) => {
            let v = UpdateVersion {
                e_tag: g.meta.e_tag.clone(),
                version: g.meta.version.clone(),
            };
            let bytes = g.bytes().await?;
            (serde_json::from_slice::<Holder>(&bytes).ok(), v)
        }
        // Released between our create and this read: try once more from the start.
        Err(object_store::Error::NotFound { .. }) => {
            return remote
                .store
                .put_opts(path, payload(me), PutMode::Create.into())
                .await
                .map_err(|_| busy(remote, None));
        }
        Err(e) => return Err(e).context(format!("reading {}/ingest.lock", remote.uri)),
    };
    let age = holder
        .as_ref()
        .map_or(u64::MAX, |h| now().saturating_sub(h.beat));
    if age < stale().as_secs() {
        return Err(busy(remote, holder.as_ref()));
    }
    let put = remote
        .store
        .put_opts(path, payload(me), PutMode::Update(version).into())
        .await
        .map_err(|_| busy(remote, None))?;
    tracing::warn!(
        index = %remote.uri,
        holder = ?holder,
        "took over an ingest lock left by an ingest that stopped (no heartbeat for {age} s)"
    );
    Ok(put)
}

fn busy(remote: &Remote, holder: Option<&Holder>) -> anyhow::Error {
    let who = match holder {
        Some(h) => format!(
            " (host {}, pid {}, started {} s ago)",
            h.host,
            h.pid,
            now().saturating_sub(h.started)
        ),
        None => String::new(),
    };
    ExitError::usage(format!(
        "another `rag ingest`{who} is writing the index at {}; wait for it to finish (a lock left by a killed ingest expires {} s after its last heartbeat)",
        remote.uri,
        stale().as_secs()
    ))
}

async fn heartbeat(
    remote: Remote,
    path: ObjectPath,
    mut me: Holder,
    version: Arc<Mutex<UpdateVersion>>,
    stop: Arc<AtomicBool>,
) {
    loop {
        // Six beats per stale period: a lock never looks stale for one slow request.
        tokio::time::sleep(stale() / 6).await;
        if stop.load(Ordering::SeqCst) {
            return;
        }
        me.beat = now();
        let v = version.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let opts = PutOptions::from(PutMode::Update(v));
        match remote.store.put_opts(&path, payload(&me), opts).await {
            Ok(put) => *version.lock().unwrap_or_else(|p| p.into_inner()) = self::version(&put),
            Err(object_store::Error::Precondition { .. }) => {
                tracing::error!(index = %remote.uri, "the ingest lock was taken over by another machine (this ingest stalled past {} s); LanceDB's commit checks still keep the tables consistent", stale().as_secs());
                return;
            }
            // A network blip: the next beat tries again, well before the lock goes stale.
            Err(e) => tracing::warn!(index = %remote.uri, "refreshing the ingest lock: {e}"),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(b) = self.beat.take() {
            b.abort();
        }
        let store = self.remote.store.clone();
        let path = self.path.clone();
        // Dropped on the command's own thread, outside the runtime.
        let released = if tokio::runtime::Handle::try_current().is_ok() {
            Err(anyhow::anyhow!("inside the runtime"))
        } else {
            block_on(async { Ok(store.delete(&path).await?) })
        };
        if let Err(e) = released {
            tracing::warn!(index = %self.remote.uri, "releasing the ingest lock: {e}; it expires by itself in {} s", stale().as_secs());
        }
    }
}

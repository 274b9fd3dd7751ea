//! The ingest lock of an index on object storage, shared by every machine that writes it.
//!
//! A folder's index is locked with an flock, which the OS drops with the process. Object
//! stores have no such thing, so the lock is an object, `ingest.lock`, written with the same
//! conditional PUT LanceDB commits with (`If-None-Match: *`): of two machines that start
//! an ingest at once, exactly one creates it. The holder rewrites it six times per stale
//! period (a heartbeat, each write conditional on its own last ETag), checks before every
//! commit that the lock is still the version it wrote ([`Lease::check`]), and at the end
//! marks it released with a PUT conditional on that version, so it never frees a lock
//! another machine took over.
//!
//! Whether a holder is alive is judged on the observer's own clock, never by comparing the
//! holder's timestamps with it: a machine that finds the lock held watches its ETag, and a
//! lock whose ETag did not change for [`stale`] (the holder missed six heartbeats) is taken
//! over with a PUT conditional on that ETag (`If-Match`), so of two machines that find it
//! stale, one wins. A live holder rewrites it within a sixth of that, and the observer is
//! refused with the holder's name. LanceDB's own commit conflict checks stay underneath.

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

/// What the lock object says. The timestamps are the holder's clock, shown to people and
/// never compared with another machine's.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Holder {
    host: String,
    pid: u32,
    started: u64,
    beat: u64,
    /// Set by the holder's last, conditional write: the lock is free to take.
    #[serde(default)]
    released: bool,
}

/// Holds the lock until dropped (or released).
pub struct Lease {
    remote: Remote,
    path: ObjectPath,
    version: Arc<Mutex<UpdateVersion>>,
    /// Set when a heartbeat or a check found the lock rewritten by another machine.
    lost: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    beat: Option<tokio::task::JoinHandle<()>>,
    me: Holder,
}

/// This machine's clock in seconds, as it writes it into the lock; `RAG_TEST_CLOCK_SKEW_S`
/// offsets it, as a machine with a wrong clock would.
fn now() -> u64 {
    let skew: i64 = std::env::var("RAG_TEST_CLOCK_SKEW_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    secs.saturating_add_signed(skew)
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
    /// `say` tells the user about a wait and a takeover (they take time, and matter).
    pub fn acquire(remote: &Remote, say: &dyn Fn(&str)) -> Result<Lease> {
        let path = remote.prefix.clone().join("ingest.lock");
        let started = now();
        let me = Holder {
            host: host(),
            pid: std::process::id(),
            started,
            beat: started,
            released: false,
        };
        let store = remote.store.clone();
        let create = store.put_opts(&path, payload(&me), PutMode::Create.into());
        let created = block_on(async { Ok(create.await) })?;
        let put = match created {
            Ok(put) => put,
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => {
                block_on(take_over_stale(remote, &path, &me, say))?
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
            lost: Arc::new(AtomicBool::new(false)),
            stop: Arc::new(AtomicBool::new(false)),
            beat: None,
            me,
        };
        // The heartbeat runs on the runtime: it awaits object_store itself, never block_on.
        lease.beat = Some(runtime()?.spawn(heartbeat(
            remote.clone(),
            lease.path.clone(),
            lease.me.clone(),
            lease.version.clone(),
            Arc::clone(&lease.lost),
            lease.stop.clone(),
        )));
        Ok(lease)
    }

    /// Fails (exit 2) when the lock is no longer the version this ingest wrote: another
    /// machine took it over while this one stalled, so nothing more may be written. Called
    /// before every commit; one HEAD request.
    pub fn check(&self) -> Result<()> {
        if let Some(ms) = std::env::var("RAG_TEST_COMMIT_DELAY_MS")
            .ok()
            .and_then(|s| s.parse().ok())
        {
            std::thread::sleep(Duration::from_millis(ms));
        }
        if !self.lost.load(Ordering::SeqCst) {
            let ours = self
                .version
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let head = block_on(async { Ok(self.remote.store.head(&self.path).await) })?;
            let same = match head {
                Ok(meta) => meta.e_tag == ours.e_tag && meta.version == ours.version,
                Err(object_store::Error::NotFound { .. }) => false,
                // Not knowing is not losing: the next check, or the heartbeat, asks again.
                Err(e) => {
                    tracing::warn!(index = %self.remote.uri, "checking the ingest lock: {e}");
                    true
                }
            };
            if same || self.still_mine()? {
                return Ok(());
            }
            self.lost.store(true, Ordering::SeqCst);
        }
        Err(ExitError::usage(format!(
            "this ingest lost the lock of the index at {} to another machine (it went {} s without refreshing it), so it stopped before its next commit; the files it committed are complete. Run `rag ingest` again once the other one is done",
            self.remote.uri,
            stale().as_secs()
        )))
    }

    /// Whether the lock object still names this ingest. The ETag a check compares can be
    /// newer than the one it holds without anyone else writing: a heartbeat's PUT may land
    /// between the check reading our version and its HEAD (the heartbeat stores the new
    /// version only once the PUT returns). Under load that window lasted long enough for a
    /// healthy ingest to stop as if it had lost the lock. A takeover writes another holder, so
    /// the lock's own content tells the two apart.
    fn still_mine(&self) -> Result<bool> {
        let lock = block_on(read(&self.remote, &self.path))?;
        Ok(match lock {
            Some((Some(h), _)) => {
                !h.released
                    && h.host == self.me.host
                    && h.pid == self.me.pid
                    && h.started == self.me.started
            }
            _ => false,
        })
    }
}

/// The lock exists: take it if it was released, refuse if its holder is alive (its ETag
/// changes within a heartbeat), take it over if its ETag stayed the same for [`stale`] on
/// this machine's own clock.
async fn take_over_stale(
    remote: &Remote,
    path: &ObjectPath,
    me: &Holder,
    say: &dyn Fn(&str),
) -> Result<object_store::PutResult> {
    let first = match read(remote, path).await? {
        Some(l) => l,
        // Released and deleted between our create and this read: once more from the start.
        None => {
            return remote
                .store
                .put_opts(path, payload(me), PutMode::Create.into())
                .await
                .map_err(|_| busy(remote, None));
        }
    };
    if !first.0.as_ref().is_some_and(|h| h.released) {
        let since = std::time::Instant::now();
        let poll = (stale() / 12).max(Duration::from_millis(100));
        say(&format!(
            "the index at {} is locked by another `rag ingest`{}; watching the lock for up to {} s to see whether that ingest is alive",
            remote.uri,
            who(first.0.as_ref()),
            stale().as_secs()
        ));
        while since.elapsed() < stale() {
            tokio::time::sleep(poll.min(stale().saturating_sub(since.elapsed()))).await;
            match read(remote, path).await? {
                Some((h, v)) if v == first.1 => {
                    if h.is_some_and(|h| h.released) {
                        break;
                    }
                }
                Some((h, v)) if h.as_ref().is_some_and(|h| h.released) => {
                    return take(remote, path, me, v, None, say).await;
                }
                // Rewritten: a heartbeat, or another machine took it. Alive either way.
                Some((h, _)) => return Err(busy(remote, h.as_ref())),
                None => return Box::pin(take_over_stale(remote, path, me, say)).await,
            }
        }
    }
    let (holder, version) = first;
    let idle = (!holder.as_ref().is_some_and(|h| h.released)).then(stale);
    take(remote, path, me, version, idle.map(|d| (holder, d)), say).await
}

/// Replaces the lock at `version` with ours; `stale` says whose lock it was and how long it
/// stood still, for the log.
async fn take(
    remote: &Remote,
    path: &ObjectPath,
    me: &Holder,
    version: UpdateVersion,
    stale: Option<(Option<Holder>, Duration)>,
    say: &dyn Fn(&str),
) -> Result<object_store::PutResult> {
    let put = remote
        .store
        .put_opts(path, payload(me), PutMode::Update(version).into())
        .await
        .map_err(|_| busy(remote, None))?;
    if let Some((holder, idle)) = stale {
        say(&format!(
            "took over an ingest lock left by an ingest that stopped{} (the lock stood unchanged for {} s); this ingest finishes its work",
            who(holder.as_ref()),
            idle.as_secs()
        ));
    }
    Ok(put)
}

/// The lock's holder (when it parses) and version, or `None` when there is none.
async fn read(
    remote: &Remote,
    path: &ObjectPath,
) -> Result<Option<(Option<Holder>, UpdateVersion)>> {
    match remote.store.get(path).await {
        Ok(g) => {
            let v = UpdateVersion {
                e_tag: g.meta.e_tag.clone(),
                version: g.meta.version.clone(),
            };
            let bytes = g.bytes().await?;
            Ok(Some((serde_json::from_slice::<Holder>(&bytes).ok(), v)))
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(e).context(format!("reading {}/ingest.lock", remote.uri)),
    }
}

/// " (host H, pid P, …)" for a message; how long it ran is by the holder's own clock.
fn who(holder: Option<&Holder>) -> String {
    match holder {
        Some(h) => format!(
            " (host {}, pid {}, running for {} s at its last heartbeat)",
            h.host,
            h.pid,
            h.beat.saturating_sub(h.started)
        ),
        None => String::new(),
    }
}

fn busy(remote: &Remote, holder: Option<&Holder>) -> anyhow::Error {
    let who = who(holder);
    ExitError::usage(format!(
        "another `rag ingest`{who} is writing the index at {}; wait for it to finish (a lock left by a killed ingest is taken over once it stood unchanged for {} s)",
        remote.uri,
        stale().as_secs()
    ))
}

async fn heartbeat(
    remote: Remote,
    path: ObjectPath,
    mut me: Holder,
    version: Arc<Mutex<UpdateVersion>>,
    lost: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) {
    loop {
        // Six beats per stale period: a lock never looks stale for one slow request.
        tokio::time::sleep((stale() / 6).max(Duration::from_millis(100))).await;
        if stop.load(Ordering::SeqCst) {
            return;
        }
        me.beat = now();
        let v = version.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let opts = PutOptions::from(PutMode::Update(v));
        match remote.store.put_opts(&path, payload(&me), opts).await {
            Ok(put) => *version.lock().unwrap_or_else(|p| p.into_inner()) = self::version(&put),
            Err(object_store::Error::Precondition { .. }) => {
                // The next commit's check stops the ingest.
                lost.store(true, Ordering::SeqCst);
                tracing::error!(index = %remote.uri, "the ingest lock was taken over by another machine (this ingest stalled past {} s); stopping before the next commit", stale().as_secs());
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
        if self.lost.load(Ordering::SeqCst) {
            return; // another machine's lock now: not ours to release
        }
        let store = self.remote.store.clone();
        let path = self.path.clone();
        let v = self
            .version
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let done = Holder {
            beat: now(),
            released: true,
            ..self.me.clone()
        };
        // Released by a write conditional on our own last version: a lock another machine
        // took over in the meantime stays theirs. (An unconditional DELETE would free it.)
        // Dropped on the command's own thread, outside the runtime.
        let released = if tokio::runtime::Handle::try_current().is_ok() {
            Err(anyhow::anyhow!("inside the runtime"))
        } else {
            block_on(async {
                Ok(store
                    .put_opts(&path, payload(&done), PutMode::Update(v).into())
                    .await?)
            })
        };
        if let Err(e) = released {
            tracing::warn!(index = %self.remote.uri, "releasing the ingest lock: {e}; it is taken over {} s after its last heartbeat", stale().as_secs());
        }
    }
}

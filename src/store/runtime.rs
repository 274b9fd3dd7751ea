//! The process's one tokio runtime, and the only way into it: LanceDB and object_store are
//! async, everything above the store is synchronous. Public store functions wrap their async
//! bodies in [`block_on`]; code that already runs on the runtime (the lease heartbeat,
//! LanceDB's own tasks) must await the async internals instead, because `block_on` inside
//! the runtime panics.

use std::future::Future;
use std::sync::OnceLock;

use anyhow::Result;
use tokio::runtime::{Builder, Runtime};

/// Built on first use and kept for the life of the process. One per process rather than
/// per `Store`: `Store::exists`, `Store::stamp`, `Store::open`, the lease and the remote
/// location's objects all run before or without a `Store`, and a long-running server
/// re-opens its `Store` after every ingest. Two workers serve LanceDB's I/O; the CPU work
/// (embedding, generation) runs on the caller's own thread.
pub(super) fn runtime() -> Result<&'static Runtime> {
    static RT: OnceLock<std::io::Result<Runtime>> = OnceLock::new();
    let built = RT.get_or_init(|| {
        Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
    });
    // io::Error is not Clone: the same kind and message, as each caller saw it before.
    built
        .as_ref()
        .map_err(|e| std::io::Error::new(e.kind(), e.to_string()).into())
}

/// Runs `f` to completion on the store's runtime, from synchronous code. Safe to call from
/// several threads at once (`rag serve`'s workers).
pub(super) fn block_on<T>(f: impl Future<Output = Result<T>>) -> Result<T> {
    runtime()?.block_on(f)
}

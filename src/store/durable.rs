//! Power-loss durability for LanceDB's own files.
//!
//! Lance writes a local index without fsync: data, index and transaction files go through
//! its own local writer (a temporary file renamed into place) and the version manifest that
//! publishes them through `object_store`'s `LocalFileSystem`, built without fsync. After a
//! power cut, a version that an ingest reported as committed could name files whose bytes
//! never reached the disk. Lance exposes neither switch, so the index is opened with a store
//! registry whose `file` provider is lance's own with its inner store wrapped:
//!
//! - the inner store is `LocalFileSystem` with `with_fsync(true)` (the manifest file and its
//!   folder are synced when written and renamed);
//! - before a create-only write, rename or copy (how lance publishes a manifest: a put to
//!   `_versions/N.manifest` only if absent), `syncfs` flushes the filesystem, so every data
//!   file the manifest names is on disk before the manifest is visible.
//!
//! Reads keep lance's direct local paths. Linux only (`syncfs`); elsewhere the manifest alone
//! is synced.

use std::fmt;
use std::sync::Arc;

use futures::stream::BoxStream;
use lance_io::object_store::providers::local::FileStoreProvider;
use lance_io::object_store::providers::ObjectStoreProvider;
use lance_io::object_store::{ObjectStore, ObjectStoreParams, ObjectStoreRegistry};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyMode, CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, PutMode,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, RenameTargetMode,
};
use url::Url;

#[derive(Debug, Default)]
struct DurableFiles;

#[async_trait::async_trait]
impl ObjectStoreProvider for DurableFiles {
    async fn new_store(&self, base: Url, params: &ObjectStoreParams) -> lance::Result<ObjectStore> {
        let mut store = FileStoreProvider.new_store(base, params).await?;
        // The provider builds `LocalFileSystem::new()` (no prefix, absolute paths) on Unix;
        // this is the same store with fsync on and a flush before each publish.
        store.inner = Arc::new(SyncBeforePublish {
            inner: LocalFileSystem::new().with_fsync(true),
        });
        Ok(store)
    }
}

/// A lance session whose local stores are durable as above; LanceDB's default cache sizes.
pub fn session() -> Arc<lance::session::Session> {
    let registry = ObjectStoreRegistry::default();
    registry.insert("file", Arc::new(DurableFiles));
    Arc::new(lance::session::Session::new(
        lance::dataset::DEFAULT_INDEX_CACHE_SIZE,
        lance::dataset::DEFAULT_METADATA_CACHE_SIZE,
        Arc::new(registry),
    ))
}

#[derive(Debug)]
struct SyncBeforePublish {
    inner: LocalFileSystem,
}

impl fmt::Display for SyncBeforePublish {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SyncBeforePublish({})", self.inner)
    }
}

impl SyncBeforePublish {
    /// Flushes the filesystem that holds `to`, so what lance wrote without fsync is on disk.
    async fn flush(&self, to: &Path) -> object_store::Result<()> {
        let path = self.inner.path_to_filesystem(to)?;
        let shown = path.display().to_string();
        tokio::task::spawn_blocking(move || syncfs(&path))
            .await
            .map_err(|e| generic(e.to_string()))?
            .map_err(|e| generic(format!("syncing the filesystem of {shown}: {e}")))
    }
}

fn generic(message: String) -> object_store::Error {
    object_store::Error::Generic {
        store: "SyncBeforePublish",
        source: message.into(),
    }
}

#[cfg(target_os = "linux")]
fn syncfs(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // The target does not exist yet, and on a table's first version neither does its folder:
    // the nearest existing ancestor is on the same filesystem.
    let dir = path
        .ancestors()
        .skip(1)
        .find(|d| d.is_dir())
        .unwrap_or(std::path::Path::new("/"));
    let dir = std::fs::File::open(dir)?;
    // SAFETY: a valid open descriptor, borrowed for the call.
    if unsafe { libc::syncfs(dir.as_raw_fd()) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn syncfs(_path: &std::path::Path) -> std::io::Result<()> {
    Ok(())
}

#[async_trait::async_trait]
impl object_store::ObjectStore for SyncBeforePublish {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        if matches!(opts.mode, PutMode::Create) {
            self.flush(location).await?;
        }
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        if matches!(options.mode, CopyMode::Create) {
            self.flush(to).await?;
        }
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        if matches!(options.target_mode, RenameTargetMode::Create) {
            self.flush(to).await?;
        }
        self.inner.rename_opts(from, to, options).await
    }
}

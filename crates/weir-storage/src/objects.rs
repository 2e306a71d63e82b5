//! Storage in an object store, through DataFusion's `object_store`.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutPayload};
use tokio::io::AsyncWriteExt;
use weir_core::{Result, WeirError};

use crate::{options, redacted, Entry, Listing, Storage};

/// Requests in flight at once for one upload, download or delete.
const CONCURRENCY: usize = 8;

/// Parts of a multipart upload (large SST files), and the size below which a file is one put.
const PART_BYTES: usize = 8 << 20;

/// Files under a prefix of a bucket (container).
#[derive(Debug, Clone)]
pub struct Objects {
    store: Arc<dyn ObjectStore>,
    /// `scheme://bucket`, for messages.
    bucket: String,
    /// The root within the bucket: `a/b`, or empty.
    prefix: String,
    /// Option values that must never appear in a message (secret keys, tokens).
    secrets: Arc<Vec<String>>,
}

/// The runtime object store requests run on: one for the process, never dropped (a runtime
/// dropped on an async thread panics), independent of whichever runtime, if any, a caller
/// is on.
fn runtime() -> Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<std::result::Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("weir-storage")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| WeirError::external(format!("checkpoint storage: cannot start its I/O threads: {e}")))
}

/// Run `work` on the storage runtime and wait for it, from any thread.
fn block<T: Send + 'static>(work: impl Future<Output = Result<T>> + Send + 'static) -> Result<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime()?.spawn(async move {
        let _ = tx.send(work.await);
    });
    rx.recv().map_err(|_| WeirError::internal("checkpoint storage: a request's task ended without an answer"))?
}

impl Objects {
    /// The store at `url`, configured from `settings` ([`options`]) and the environment.
    pub fn open(url: &str, settings: &BTreeMap<String, String>) -> Result<Self> {
        let shown = redacted(url);
        let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        // `user:password@` is never sent nor shown; in `abfs[s]://container@account…` the part
        // before `@` is the container.
        let bucket = match scheme {
            "abfs" | "abfss" => bucket,
            _ => bucket.rsplit_once('@').map_or(bucket, |(_, b)| b),
        };
        if bucket.is_empty() {
            return Err(WeirError::user(format!("checkpoint storage '{shown}': the URL names no bucket")));
        }
        let configured = options::object_store_config(scheme, settings)
            .map_err(|why| WeirError::user(format!("checkpoint storage '{shown}': {why}")))?;
        let store = options::build(scheme, &format!("{scheme}://{bucket}"), &configured)
            .map_err(|why| WeirError::user(format!("checkpoint storage '{shown}': {why}")))?;
        Ok(Self {
            store,
            bucket: format!("{scheme}://{bucket}"),
            prefix: prefix.trim_matches('/').to_string(),
            secrets: Arc::new(configured.secrets),
        })
    }

    fn path(&self, name: &str) -> Path {
        match (self.prefix.is_empty(), name.is_empty()) {
            (true, _) => Path::from(name),
            (false, true) => Path::from(self.prefix.as_str()),
            (false, false) => Path::from(format!("{}/{name}", self.prefix)),
        }
    }

    /// A failed request, said once, with no secret in it.
    fn fail(&self, what: &str, name: &str, e: impl std::fmt::Display) -> WeirError {
        let mut why = e.to_string().replace('\n', " ");
        for secret in self.secrets.iter().filter(|s| !s.is_empty()) {
            why = why.replace(secret.as_str(), "******");
        }
        WeirError::external(format!("checkpoint storage: cannot {what} '{}/{}': {why}", self.describe(), name))
    }

    fn relative(&self, path: &Path, dir: &Path) -> String {
        let full = path.as_ref();
        full.strip_prefix(dir.as_ref()).unwrap_or(full).trim_start_matches('/').to_string()
    }
}

impl Objects {
    /// `op` on every item, [`CONCURRENCY`] at a time, on the storage runtime; the first error
    /// ends it.
    fn each<I, F, Fut>(&self, items: Vec<I>, op: F) -> Result<()>
    where
        I: Send + 'static,
        F: Fn(Objects, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<()>> + Send + 'static,
    {
        let this = self.clone();
        block(async move {
            futures::stream::iter(items)
                .map(|item| op(this.clone(), item))
                .buffer_unordered(CONCURRENCY)
                .try_collect::<Vec<()>>()
                .await?;
            Ok(())
        })
    }
}

impl Storage for Objects {
    fn describe(&self) -> String {
        match self.prefix.is_empty() {
            true => self.bucket.clone(),
            false => format!("{}/{}", self.bucket, self.prefix),
        }
    }

    fn put(&self, name: &str, bytes: Vec<u8>) -> Result<()> {
        let (store, path, this) = (self.store.clone(), self.path(name), self.clone());
        let name = name.to_string();
        block(async move {
            store.put(&path, PutPayload::from(bytes)).await.map_err(|e| this.fail("write", &name, e))?;
            Ok(())
        })
    }

    fn put_all(&self, files: Vec<(String, Vec<u8>)>) -> Result<()> {
        self.each(files, |this, (name, bytes)| async move {
            this.store
                .put(&this.path(&name), PutPayload::from(bytes))
                .await
                .map_err(|e| this.fail("write", &name, e))?;
            Ok(())
        })
    }

    fn put_new(&self, name: &str, bytes: Vec<u8>) -> Result<bool> {
        let (this, name) = (self.clone(), name.to_string());
        block(async move {
            let path = this.path(&name);
            let payload = PutPayload::from(bytes);
            match this.store.put_opts(&path, payload.clone(), PutMode::Create.into()).await {
                Ok(_) => Ok(true),
                Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => Ok(false),
                Err(object_store::Error::NotImplemented { .. }) => {
                    // A store without conditional writes: the name is written once per
                    // checkpoint, so only a racing instance of the job could overwrite it,
                    // and the owner check before this write has fenced that one.
                    log::warn!(
                        "checkpoint storage '{}' has no conditional writes: checked, then written",
                        this.describe()
                    );
                    match this.store.head(&path).await {
                        Ok(_) => Ok(false),
                        Err(object_store::Error::NotFound { .. }) => {
                            this.store.put(&path, payload).await.map_err(|e| this.fail("write", &name, e))?;
                            Ok(true)
                        }
                        Err(e) => Err(this.fail("check", &name, e)),
                    }
                }
                Err(e) => Err(this.fail("write", &name, e)),
            }
        })
    }

    fn upload(&self, files: &[(PathBuf, String)]) -> Result<()> {
        self.each(files.to_vec(), |this, (from, name)| async move {
            let mut file = tokio::fs::File::open(&from).await.map_err(|e| this.fail("upload", &name, e))?;
            // Multipart above one part's size, one put below.
            let mut writer =
                object_store::buffered::BufWriter::with_capacity(this.store.clone(), this.path(&name), PART_BYTES);
            match tokio::io::copy(&mut file, &mut writer).await {
                Ok(_) => writer.shutdown().await.map_err(|e| this.fail("upload", &name, e)),
                Err(e) => {
                    let _ = writer.abort().await;
                    Err(this.fail("upload", &name, e))
                }
            }
        })
    }

    fn get(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let (this, name) = (self.clone(), name.to_string());
        block(async move {
            match this.store.get(&this.path(&name)).await {
                Ok(r) => Ok(Some(r.bytes().await.map_err(|e| this.fail("read", &name, e))?.to_vec())),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(this.fail("read", &name, e)),
            }
        })
    }

    fn download(&self, files: &[(String, PathBuf)]) -> Result<()> {
        self.each(files.to_vec(), |this, (name, to)| async move {
            let fail = |e: &dyn std::fmt::Display| this.fail("download", &name, e);
            let got = this.store.get(&this.path(&name)).await.map_err(|e| fail(&e))?;
            let mut stream = got.into_stream();
            let mut file = tokio::fs::File::create(&to).await.map_err(|e| fail(&e))?;
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| fail(&e))?;
                file.write_all(&chunk).await.map_err(|e| fail(&e))?;
            }
            file.sync_all().await.map_err(|e| fail(&e))
        })
    }

    fn list(&self, dir: &str) -> Result<Listing> {
        let (this, dir) = (self.clone(), dir.to_string());
        block(async move {
            let at = this.path(&dir);
            let prefix = (!at.as_ref().is_empty()).then_some(&at);
            let found = this.store.list_with_delimiter(prefix).await.map_err(|e| this.fail("list", &dir, e))?;
            Ok(Listing {
                files: found
                    .objects
                    .iter()
                    .map(|o| Entry {
                        name: this.relative(&o.location, &at),
                        size: o.size,
                        modified: std::time::SystemTime::from(o.last_modified),
                    })
                    .collect(),
                dirs: found.common_prefixes.iter().map(|p| this.relative(p, &at)).collect(),
            })
        })
    }

    fn delete(&self, names: &[String]) -> Result<()> {
        self.each(names.to_vec(), |this, name| async move {
            match this.store.delete(&this.path(&name)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(this.fail("delete", &name, e)),
            }
        })
    }

    fn delete_dir(&self, dir: &str) -> Result<()> {
        let (this, dir_name) = (self.clone(), dir.to_string());
        let names: Vec<String> = block(async move {
            let at = this.path(&dir_name);
            let prefix = (!at.as_ref().is_empty()).then_some(&at);
            let objects: Vec<_> =
                this.store.list(prefix).try_collect().await.map_err(|e| this.fail("list", &dir_name, e))?;
            let base = this.path("");
            Ok(objects.iter().map(|o| this.relative(&o.location, &base)).collect())
        })?;
        self.delete(&names)
    }

    fn scoped(&self, dir: &str) -> Arc<dyn Storage> {
        let mut scoped = self.clone();
        scoped.prefix = match self.prefix.is_empty() {
            true => dir.trim_matches('/').to_string(),
            false => format!("{}/{}", self.prefix, dir.trim_matches('/')),
        };
        Arc::new(scoped)
    }
}

/// How long a request may take before it is retried, and how long retries may go on: an
/// unreachable store fails a checkpoint (or a job's start) within about half a minute.
pub(crate) fn client_limits() -> (object_store::ClientOptions, object_store::RetryConfig) {
    let client = object_store::ClientOptions::new()
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(60));
    let retry =
        object_store::RetryConfig { max_retries: 3, retry_timeout: Duration::from_secs(30), ..Default::default() };
    (client, retry)
}

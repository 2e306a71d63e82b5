//! Where checkpoints are kept: a local directory, or an object store (`s3://` and
//! S3-compatible stores, `gs://`, `az://`), behind one small interface, [`Storage`].
//!
//! Everything a checkpoint writes goes through it: the manifests and state parts
//! (`weir-runtime`'s checkpoint store) and RocksDB's SST files (`weir-state`), so that a job
//! restores on any machine that can reach the storage, from the storage alone.
//!
//! The calls are blocking: checkpoints are written off the processing path already (on
//! blocking threads, or a state upload's own thread). Object stores run their requests on
//! one small runtime of their own ([`objects`]), so that a call never needs the caller's.

mod local;
mod objects;
pub mod options;
mod recovery;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use weir_core::{Result, WeirError};

pub use local::LocalDir;
pub use objects::Objects;
pub use recovery::LocalRecovery;

/// A file in storage, directly under the listed directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub size: u64,
    /// When it was written, by the storage's clock: compared only with other entries' times.
    pub modified: SystemTime,
}

/// What is directly under a directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    pub files: Vec<Entry>,
    pub dirs: Vec<String>,
}

/// Named files under a root. Names are relative, `/`-separated paths of plain ASCII.
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// Where this is, for messages and logs: a path or a URL, never with credentials.
    fn describe(&self) -> String;

    /// `name` written with `bytes`, durably and atomically: a reader sees the old contents
    /// or the new, never part of them.
    fn put(&self, name: &str, bytes: Vec<u8>) -> Result<()>;

    /// Several files written as by [`Storage::put`], in parallel where the storage allows.
    fn put_all(&self, files: Vec<(String, Vec<u8>)>) -> Result<()> {
        files.into_iter().try_for_each(|(name, bytes)| self.put(&name, bytes))
    }

    /// `name` created with `bytes` unless it exists (`false`): the write that makes a
    /// checkpoint exist, which only one instance of a job may make.
    fn put_new(&self, name: &str, bytes: Vec<u8>) -> Result<bool>;

    /// Local files stored under names (`(local path, name)`), in parallel where the storage
    /// allows; each is durable when this returns.
    fn upload(&self, files: &[(PathBuf, String)]) -> Result<()>;

    /// `name`'s contents; `None` if there is no such file.
    fn get(&self, name: &str) -> Result<Option<Vec<u8>>>;

    /// Files fetched into local paths (`(name, local path)`), in parallel where the storage
    /// allows.
    fn download(&self, files: &[(String, PathBuf)]) -> Result<()>;

    /// What is directly under `dir` (`""`: the root); an absent directory is empty.
    fn list(&self, dir: &str) -> Result<Listing>;

    /// These files deleted; one already gone is no error.
    fn delete(&self, names: &[String]) -> Result<()>;

    /// Everything under `dir` deleted.
    fn delete_dir(&self, dir: &str) -> Result<()>;

    /// The same storage with `dir` as its root.
    fn scoped(&self, dir: &str) -> Arc<dyn Storage>;
}

/// Whether `location` names an object store rather than a local directory.
pub fn is_remote(location: &str) -> bool {
    scheme(location).is_some_and(|s| s != "file")
}

fn scheme(location: &str) -> Option<&str> {
    let (scheme, _) = location.split_once("://")?;
    Some(scheme)
}

/// The storage at `location`: a local path or `file://` URL, or an object store's URL
/// (`s3://bucket/path`, `s3a://…`, `gs://…`, `az://container/path`, `abfs[s]://…`).
/// `options` are the session's settings: the object store takes its own ([`options`]), and
/// otherwise what the usual environment variables say (`AWS_*`, `GOOGLE_*`, `AZURE_*`).
pub fn open(location: &str, options: &BTreeMap<String, String>) -> Result<Arc<dyn Storage>> {
    match scheme(location) {
        None => Ok(Arc::new(LocalDir::new(location))),
        Some("file") => Ok(Arc::new(LocalDir::new(location.trim_start_matches("file://")))),
        Some(_) => Ok(Arc::new(Objects::open(location, options)?)),
    }
}

/// Whether `location`'s scheme names a storage Weir knows (a path, `file://`, or an object
/// store's), without reaching it.
pub fn check_scheme(location: &str) -> std::result::Result<(), String> {
    match scheme(location) {
        None | Some("file") => Ok(()),
        Some(s) => options::family(s).map(|_| ()),
    }
}

/// `location` with `child` appended: a path joined, or a URL extended.
pub fn join(location: &str, child: &str) -> String {
    match scheme(location) {
        None => Path::new(location).join(child).to_string_lossy().into_owned(),
        Some(_) => format!("{}/{child}", location.trim_end_matches('/')),
    }
}

/// `location` as it may be shown: a URL without its user and password.
pub fn redacted(location: &str) -> String {
    let Some((scheme, rest)) = location.split_once("://") else { return location.to_string() };
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let host = match scheme {
        "abfs" | "abfss" => authority,
        _ => authority.rsplit_once('@').map_or(authority, |(_, host)| host),
    };
    if path.is_empty() {
        format!("{scheme}://{host}")
    } else {
        format!("{scheme}://{host}/{path}")
    }
}

fn io(storage: &str, what: &str, path: &Path, e: std::io::Error) -> WeirError {
    WeirError::external(format!("checkpoint storage '{storage}': cannot {what} '{}': {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_are_shown_without_credentials() {
        assert_eq!(redacted("s3://key:secret@bucket/jobs"), "s3://bucket/jobs");
        assert_eq!(redacted("s3://bucket"), "s3://bucket");
        assert_eq!(redacted("/tmp/x"), "/tmp/x");
        assert_eq!(join("s3://bucket/jobs/", "q1"), "s3://bucket/jobs/q1");
        assert_eq!(join("/tmp/ck", "q1"), "/tmp/ck/q1");
        assert!(is_remote("gs://b/p") && !is_remote("file:///tmp") && !is_remote("/tmp"));
    }
}

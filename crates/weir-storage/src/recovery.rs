//! Local recovery (Flink's `state.backend.local-recovery`): a local copy of the files a
//! process uploaded or downloaded, so that a restore on the same machine reads them from
//! disk and fetches from the object store only what the copy lacks.
//!
//! The copy is a directory of hard links: the files uploaded and downloaded are RocksDB's
//! SST files, which never change once written, under names unique to the store that wrote
//! them, so a link costs no space until RocksDB deletes its own, and a file in the copy is
//! always whole (links are made of finished files only).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use weir_core::Result;

use crate::{Listing, Storage};

#[derive(Debug)]
pub struct LocalRecovery {
    inner: Arc<dyn Storage>,
    dir: PathBuf,
}

impl LocalRecovery {
    /// `inner`, with its uploads and downloads kept in `dir`.
    pub fn new(inner: Arc<dyn Storage>, dir: impl Into<PathBuf>) -> Self {
        Self { inner, dir: dir.into() }
    }

    fn keep(&self, file: &Path, name: &str) {
        let at = self.dir.join(name);
        if let Some(parent) = at.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let _ = std::fs::remove_file(&at);
        if let Err(e) = std::fs::hard_link(file, &at) {
            log::debug!("local recovery: cannot keep '{}': {e}", file.display());
        }
    }
}

impl Storage for LocalRecovery {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn put(&self, name: &str, bytes: Vec<u8>) -> Result<()> {
        self.inner.put(name, bytes)
    }

    fn put_all(&self, files: Vec<(String, Vec<u8>)>) -> Result<()> {
        self.inner.put_all(files)
    }

    fn put_new(&self, name: &str, bytes: Vec<u8>) -> Result<bool> {
        self.inner.put_new(name, bytes)
    }

    fn upload(&self, files: &[(PathBuf, String)]) -> Result<()> {
        self.inner.upload(files)?;
        for (file, name) in files {
            self.keep(file, name);
        }
        Ok(())
    }

    fn get(&self, name: &str) -> Result<Option<Vec<u8>>> {
        self.inner.get(name)
    }

    fn download(&self, files: &[(String, PathBuf)]) -> Result<()> {
        let mut missing = Vec::new();
        for (name, to) in files {
            let kept = self.dir.join(name);
            let _ = std::fs::remove_file(to);
            if std::fs::hard_link(&kept, to).is_err() && std::fs::copy(&kept, to).is_err() {
                missing.push((name.clone(), to.clone()));
            }
        }
        if !missing.is_empty() {
            self.inner.download(&missing)?;
            for (name, to) in &missing {
                self.keep(to, name);
            }
        }
        log::info!(
            "restored {} of {} files from the local copy; {} downloaded from '{}'",
            files.len() - missing.len(),
            files.len(),
            missing.len(),
            self.inner.describe()
        );
        Ok(())
    }

    fn list(&self, dir: &str) -> Result<Listing> {
        self.inner.list(dir)
    }

    fn delete(&self, names: &[String]) -> Result<()> {
        self.inner.delete(names)?;
        for name in names {
            let _ = std::fs::remove_file(self.dir.join(name));
        }
        Ok(())
    }

    fn delete_dir(&self, dir: &str) -> Result<()> {
        self.inner.delete_dir(dir)?;
        let _ = std::fs::remove_dir_all(self.dir.join(dir));
        Ok(())
    }

    fn scoped(&self, dir: &str) -> Arc<dyn Storage> {
        Arc::new(LocalRecovery { inner: self.inner.scoped(dir), dir: self.dir.join(dir) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LocalDir;

    #[test]
    fn a_restore_reads_what_the_copy_has_and_fetches_the_rest() {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let root = std::env::temp_dir().join(format!("weir-recovery-{nanos}-{}", std::process::id()));
        let remote: Arc<dyn Storage> = Arc::new(LocalDir::new(root.join("remote")));
        let cached = LocalRecovery::new(remote.clone(), root.join("copy")).scoped("shared");
        std::fs::create_dir_all(root.join("work")).expect("work dir");
        std::fs::write(root.join("work/1.sst"), b"one").expect("sst");
        cached.upload(&[(root.join("work/1.sst"), "a-1.sst".into())]).expect("upload");
        assert!(root.join("copy/shared/a-1.sst").exists(), "kept locally");
        // A file only the remote has (uploaded by another machine).
        remote.put("shared/b-2.sst", b"two".to_vec()).expect("put");
        // The remote copy of the first changed behind our back: the local one is read.
        remote.put("shared/a-1.sst", b"remote".to_vec()).expect("put");
        std::fs::create_dir_all(root.join("restore")).expect("restore dir");
        let wanted =
            [("a-1.sst".to_string(), root.join("restore/1.sst")), ("b-2.sst".to_string(), root.join("restore/2.sst"))];
        cached.download(&wanted).expect("download");
        assert_eq!(std::fs::read(root.join("restore/1.sst")).expect("1"), b"one");
        assert_eq!(std::fs::read(root.join("restore/2.sst")).expect("2"), b"two");
        assert!(root.join("copy/shared/b-2.sst").exists(), "a download is kept too");
        cached.delete(&["a-1.sst".into()]).expect("delete");
        assert!(!root.join("copy/shared/a-1.sst").exists() && remote.get("shared/a-1.sst").expect("get").is_none());
        let _ = std::fs::remove_dir_all(&root);
    }
}

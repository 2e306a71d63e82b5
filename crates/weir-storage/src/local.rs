//! Storage in a local directory (or one every worker mounts).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use weir_core::Result;

use crate::{io, Entry, Listing, Storage};

/// Files under a directory. Writes are synced, and a file replaced or created is written
/// under a temporary name first, so that no reader sees half of it after a crash.
#[derive(Debug, Clone)]
pub struct LocalDir {
    root: PathBuf,
}

/// Temporary names unique within the process (several threads write at once).
static TEMPORARY: AtomicU64 = AtomicU64::new(0);

impl LocalDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    fn err(&self, what: &str, path: &Path, e: std::io::Error) -> weir_core::WeirError {
        io(&self.describe(), what, path, e)
    }

    /// `bytes` in a synced temporary file beside `path`.
    fn temporary(&self, path: &Path, bytes: &[u8]) -> Result<PathBuf> {
        let dir = path.parent().unwrap_or(&self.root);
        std::fs::create_dir_all(dir).map_err(|e| self.err("create", dir, e))?;
        self.temporary_in(dir, path, bytes)
    }

    /// [`Self::temporary`] in `dir`, which exists.
    fn temporary_in(&self, dir: &Path, path: &Path, bytes: &[u8]) -> Result<PathBuf> {
        let n = TEMPORARY.fetch_add(1, Ordering::Relaxed);
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = dir.join(format!(".{name}.{}-{n}.tmp", std::process::id()));
        let mut f = std::fs::File::create(&tmp).map_err(|e| self.err("create", &tmp, e))?;
        f.write_all(bytes).and_then(|_| f.sync_all()).map_err(|e| self.err("write", &tmp, e))?;
        Ok(tmp)
    }
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

fn copy_synced(from: &Path, to: &Path) -> std::io::Result<()> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::copy(from, to)?;
    std::fs::File::open(to)?.sync_all()
}

impl Storage for LocalDir {
    fn describe(&self) -> String {
        self.root.display().to_string()
    }

    fn put(&self, name: &str, bytes: Vec<u8>) -> Result<()> {
        let path = self.path(name);
        let tmp = self.temporary(&path, &bytes)?;
        std::fs::rename(&tmp, &path).map_err(|e| self.err("publish", &path, e))?;
        sync_dir(path.parent().unwrap_or(&self.root));
        Ok(())
    }

    /// Each file written and synced under a temporary name, then all renamed, then each
    /// directory synced once: a checkpoint writes a part per task and operator into one
    /// directory, and a directory sync per part cost as much again as the parts' own.
    fn put_all(&self, files: Vec<(String, Vec<u8>)>) -> Result<()> {
        let paths: Vec<PathBuf> = files.iter().map(|(name, _)| self.path(name)).collect();
        let dirs: std::collections::BTreeSet<&Path> = paths.iter().map(|p| p.parent().unwrap_or(&self.root)).collect();
        for dir in &dirs {
            std::fs::create_dir_all(dir).map_err(|e| self.err("create", dir, e))?;
        }
        let mut written = Vec::with_capacity(files.len());
        for (path, (_, bytes)) in paths.iter().zip(&files) {
            written.push(self.temporary_in(path.parent().unwrap_or(&self.root), path, bytes)?);
        }
        for (tmp, path) in written.iter().zip(&paths) {
            std::fs::rename(tmp, path).map_err(|e| self.err("publish", path, e))?;
        }
        for dir in dirs {
            sync_dir(dir);
        }
        Ok(())
    }

    fn put_new(&self, name: &str, bytes: Vec<u8>) -> Result<bool> {
        let path = self.path(name);
        let tmp = self.temporary(&path, &bytes)?;
        // A hard link is created whole or not at all, and never over an existing file.
        let linked = std::fs::hard_link(&tmp, &path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => {
                sync_dir(path.parent().unwrap_or(&self.root));
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(self.err("publish", &path, e)),
        }
    }

    fn upload(&self, files: &[(PathBuf, String)]) -> Result<()> {
        for (from, name) in files {
            copy_synced(from, &self.path(name)).map_err(|e| self.err("copy", from, e))?;
        }
        if let Some((_, name)) = files.first() {
            sync_dir(self.path(name).parent().unwrap_or(&self.root));
        }
        Ok(())
    }

    fn get(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let path = self.path(name);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.err("read", &path, e)),
        }
    }

    fn download(&self, files: &[(String, PathBuf)]) -> Result<()> {
        for (name, to) in files {
            let from = self.path(name);
            std::fs::copy(&from, to).map_err(|e| self.err("copy", &from, e))?;
        }
        Ok(())
    }

    fn list(&self, dir: &str) -> Result<Listing> {
        let path = self.path(dir);
        let entries = match std::fs::read_dir(&path) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Listing::default()),
            Err(e) => return Err(self.err("list", &path, e)),
        };
        let mut listing = Listing::default();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                listing.dirs.push(name);
            } else if !name.ends_with(".tmp") {
                let modified = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
                listing.files.push(Entry { name, size: meta.len(), modified });
            }
        }
        Ok(listing)
    }

    fn delete(&self, names: &[String]) -> Result<()> {
        for name in names {
            let path = self.path(name);
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(self.err("delete", &path, e)),
                _ => {}
            }
        }
        Ok(())
    }

    fn delete_dir(&self, dir: &str) -> Result<()> {
        let path = self.path(dir);
        match std::fs::remove_dir_all(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(self.err("delete", &path, e)),
            _ => Ok(()),
        }
    }

    fn scoped(&self, dir: &str) -> Arc<dyn Storage> {
        Arc::new(LocalDir::new(self.path(dir)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> PathBuf {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        std::env::temp_dir().join(format!("weir-storage-{nanos}-{}", std::process::id()))
    }

    #[test]
    fn a_file_is_created_once_replaced_atomically_and_listed() {
        let dir = scratch();
        let s = LocalDir::new(&dir);
        assert_eq!(s.list("").expect("absent dir"), Listing::default());
        assert!(s.put_new("chk-1/manifest.json", b"first".to_vec()).expect("create"));
        assert!(!s.put_new("chk-1/manifest.json", b"second".to_vec()).expect("exists"));
        assert_eq!(s.get("chk-1/manifest.json").expect("get"), Some(b"first".to_vec()));
        s.put("owner", b"a".to_vec()).expect("put");
        s.put("owner", b"b".to_vec()).expect("replace");
        assert_eq!(s.get("owner").expect("get"), Some(b"b".to_vec()));
        assert_eq!(s.get("missing").expect("get"), None);
        let top = s.list("").expect("list");
        assert_eq!(top.dirs, vec!["chk-1".to_string()]);
        assert_eq!(top.files.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), vec!["owner"]);
        let chk = s.scoped("chk-1");
        assert_eq!(chk.list("").expect("list").files.len(), 1, "no temporary file left");
        s.delete(&["owner".into(), "owner".into()]).expect("delete twice");
        s.delete_dir("chk-1").expect("delete dir");
        assert_eq!(s.list("").expect("list"), Listing::default());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn several_files_are_written_at_once_into_new_and_existing_directories() {
        let dir = scratch();
        let s = LocalDir::new(&dir);
        s.put("chk-1/a", b"old".to_vec()).expect("put");
        let files = vec![
            ("chk-1/a".to_string(), b"new".to_vec()),
            ("chk-1/b".to_string(), b"b".to_vec()),
            ("chk-2/c".to_string(), Vec::new()),
        ];
        s.put_all(files).expect("put all");
        assert_eq!(s.get("chk-1/a").expect("get"), Some(b"new".to_vec()));
        assert_eq!(s.get("chk-1/b").expect("get"), Some(b"b".to_vec()));
        assert_eq!(s.get("chk-2/c").expect("get"), Some(Vec::new()));
        for chk in ["chk-1", "chk-2"] {
            let names: Vec<String> = std::fs::read_dir(dir.join(chk))
                .expect("list")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect();
            assert!(names.iter().all(|n| !n.ends_with(".tmp")), "temporary files left in {chk}: {names:?}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

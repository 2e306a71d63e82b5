//! Log checkpoints: a checkpoint that carries the store's write batches since the last full
//! checkpoint instead of taking a new one.
//!
//! Why: a full checkpoint is a fixed amount of work however little changed: a memtable flush
//! into a new SST file, RocksDB's checkpoint (a directory of hard links, the MANIFEST and
//! CURRENT copied, each synced), the new SST uploaded and synced. About a dozen synced file
//! operations, which at a 100 ms interval were most of a small job's CPU. A store that wrote
//! a few kilobytes since the last full checkpoint instead puts those writes, exactly as
//! RocksDB received them (its write batches, the format of its write-ahead log), into the
//! checkpoint's own part: no file of its own, no flush. Restoring rebuilds the last full
//! checkpoint and replays the logs in order. This is Flink's changelog state backend in
//! small: the logs live in the checkpoint, and a full checkpoint is taken again once they
//! pass [`LOG_BYTES`] in all (every log checkpoint carries all of them since the full one,
//! so that one checkpoint is enough to restore from, whichever older ones were pruned), or
//! [`MAX_LOGS`] of them.
//!
//! Which checkpoints are full depends only on the bytes written, never on time; either kind
//! restores the same state.

use std::sync::Mutex;

use rocksdb::WriteBatch;
use weir_core::{Result, WeirError};

use crate::{OwnFiles, StoreSnapshot};

/// What the logs since a full checkpoint may hold in all before the next checkpoint is full
/// again: each log checkpoint writes them all, so this bounds what one writes.
pub(crate) const LOG_BYTES: usize = 256 << 10;

/// How many log checkpoints may follow a full one: a restore replays them all.
const MAX_LOGS: usize = 64;

#[derive(Default)]
pub(crate) struct WriteLog {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// The batches since the last checkpoint, each as its length (`u32`, little-endian) and
    /// RocksDB's representation of it. `None` when not recording: there is no full
    /// checkpoint to build on, or this interval's writes were too many for a log.
    recording: Option<Vec<u8>>,
    base: Option<Base>,
}

/// The last full checkpoint and the logs taken since.
struct Base {
    snapshot: StoreSnapshot,
    own: OwnFiles,
    logs: Vec<Vec<u8>>,
    bytes: usize,
}

impl WriteLog {
    /// A batch about to be written to the store.
    pub(crate) fn record(&self, batch: &WriteBatch) {
        let Ok(mut inner) = self.inner.lock() else { return };
        let held = inner.base.as_ref().map_or(0, |b| b.bytes);
        let Some(log) = inner.recording.as_mut() else { return };
        let data = batch.data();
        match u32::try_from(data.len()) {
            Ok(len) if held + log.len() + 4 + data.len() <= LOG_BYTES => {
                log.extend_from_slice(&len.to_le_bytes());
                log.extend_from_slice(data);
            }
            // Too much for a log: this checkpoint is a full one.
            _ => inner.recording = None,
        }
    }

    /// This checkpoint as a log checkpoint (the snapshot, and its own files: the full
    /// checkpoint's and the logs), or `None` if it must be a full one. `uploaded`: whether
    /// the full checkpoint's SST files are in the shared storage (an upload that failed
    /// leaves nothing to build on).
    pub(crate) fn checkpoint(
        &self,
        uploaded: impl FnOnce(&StoreSnapshot) -> bool,
    ) -> Option<(StoreSnapshot, OwnFiles)> {
        let mut inner = self.inner.lock().ok()?;
        let log = inner.recording.take()?;
        let base = inner.base.as_mut()?;
        let fits = base.bytes + log.len() <= LOG_BYTES && (log.is_empty() || base.logs.len() < MAX_LOGS);
        if !fits || !uploaded(&base.snapshot) {
            return None;
        }
        if !log.is_empty() {
            base.bytes += log.len();
            base.logs.push(log);
        }
        let mut snapshot = base.snapshot.clone();
        let mut own = base.own.clone();
        for (i, log) in base.logs.iter().enumerate() {
            let name = format!("weir-write-log-{:03}", i + 1);
            snapshot.own.push(name.clone());
            snapshot.logs.push(name.clone());
            own.push((name, log.clone()));
        }
        snapshot.bytes_copied = own.iter().map(|(_, bytes)| bytes.len() as u64).sum();
        snapshot.bytes_referenced = base.snapshot.bytes_referenced + base.bytes as u64;
        inner.recording = Some(Vec::new());
        Some((snapshot, own))
    }

    /// A full checkpoint was taken: the next ones may build on it.
    pub(crate) fn full_checkpoint(&self, snapshot: &StoreSnapshot, own: &OwnFiles) {
        let Ok(mut inner) = self.inner.lock() else { return };
        inner.base = Some(Base { snapshot: snapshot.clone(), own: own.clone(), logs: Vec::new(), bytes: 0 });
        inner.recording = Some(Vec::new());
    }
}

/// Each batch of a log, in order.
pub(crate) fn replay(log: &[u8], mut write: impl FnMut(WriteBatch) -> Result<()>) -> Result<()> {
    let damaged = || WeirError::internal("state snapshot: a write log is damaged");
    let mut at = 0;
    while at < log.len() {
        let len = log.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes).ok_or_else(damaged)?;
        let data = log.get(at + 4..at + 4 + len as usize).ok_or_else(damaged)?;
        write(WriteBatch::from_data(data))?;
        at += 4 + len as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use weir_storage::{LocalDir, Storage};

    use super::LOG_BYTES;
    use crate::{StateStore, StoreSnapshot};

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("weir-state-log-{name}-{}", crate::new_lineage()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    /// A checkpoint taken whole: uploaded, its own files written into `dir`; the snapshot
    /// goes through its JSON as a restore reads it.
    fn checkpoint(store: &mut StateStore, shared: &Arc<dyn Storage>, dir: &Path) -> StoreSnapshot {
        let (snapshot, own, upload) = store.begin_checkpoint(shared).expect("begin checkpoint");
        upload.run().expect("upload");
        std::fs::create_dir_all(dir).expect("checkpoint dir");
        for (name, bytes) in own {
            std::fs::write(dir.join(name), bytes).expect("own file");
        }
        StoreSnapshot::from_json(&snapshot.to_json()).expect("round trip")
    }

    fn contents(store: &StateStore) -> BTreeMap<Vec<u8>, Vec<u8>> {
        store.table(3).scan(&[], &[0xFF; 9]).expect("scan").into_iter().collect()
    }

    /// Puts, rewrites, deletes and range deletes between checkpoints: the first checkpoint is
    /// full, the small ones after it are logs, a large write makes the next one full again,
    /// and every one of them restores exactly what the store held.
    #[test]
    fn log_checkpoints_restore_exactly_what_the_store_held() {
        let dir = scratch("exact");
        let shared: Arc<dyn Storage> = Arc::new(LocalDir::new(dir.join("shared")));
        let mut store = StateStore::open(dir.join("db")).expect("open");
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut kinds = Vec::new();
        for round in 0u64..12 {
            let table = store.table(3);
            // Round 6 writes more than a log may hold; round 9 nothing (an idle interval: the
            // checkpoint still carries the logs since the full one).
            let n = match round {
                6 => LOG_BYTES as u64 / 16,
                9 => 0,
                _ => 50,
            };
            let mut changes: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
            for i in 0..n {
                let key = ((i * 7 + round) % 400).to_be_bytes().to_vec();
                let value = (i % 3 != 0).then(|| format!("{round}-{i}").into_bytes());
                changes.push((key, value));
            }
            let refs: Vec<(&[u8], Option<&[u8]>)> = changes.iter().map(|(k, v)| (k.as_slice(), v.as_deref())).collect();
            table.write(&refs).expect("write");
            for (k, v) in changes {
                match v {
                    Some(v) => model.insert(k, v),
                    None => model.remove(&k),
                };
            }
            if round % 4 == 3 {
                let (from, to) = (100u64.to_be_bytes(), (100 + round * 10).to_be_bytes());
                table.delete_range(&from, &to).expect("range delete");
                model.retain(|k, _| k.as_slice() < &from[..] || k.as_slice() >= &to[..]);
            }
            let chk = dir.join(format!("chk-{round}"));
            let snapshot = checkpoint(&mut store, &shared, &chk);
            kinds.push(if snapshot.logs.is_empty() { "full" } else { "log" });
            assert_eq!(contents(&store), model, "the store itself after round {round}");
            let restored = StateStore::restore(dir.join(format!("db-{round}")), &snapshot, shared.as_ref(), &chk)
                .expect("restore");
            assert_eq!(contents(&restored), model, "restored from the checkpoint of round {round}");
        }
        let expected = ["full", "log", "log", "log", "log", "log", "full", "log", "log", "log", "log", "log"];
        assert_eq!(kinds, expected);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Past [`super::MAX_LOGS`] log checkpoints the next one is full, however small its
    /// writes: a restore replays at most that many.
    #[test]
    fn after_the_most_logs_the_next_checkpoint_is_full() {
        let dir = scratch("most-logs");
        let shared: Arc<dyn Storage> = Arc::new(LocalDir::new(dir.join("shared")));
        let mut store = StateStore::open(dir.join("db")).expect("open");
        let mut logs = Vec::new();
        for i in 0..=super::MAX_LOGS as u64 + 1 {
            let key = (i % 7).to_be_bytes();
            let value = i.to_be_bytes();
            store.table(3).write(&[(&key[..], Some(&value[..]))]).expect("write");
            let (snapshot, _, upload) = store.begin_checkpoint(&shared).expect("begin");
            upload.run().expect("upload");
            logs.push(snapshot.logs.len());
        }
        let mut expected: Vec<usize> = (0..=super::MAX_LOGS).collect();
        expected.push(0);
        assert_eq!(logs, expected);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A store restored from a log checkpoint takes a full one next (the replayed writes are
    /// in no file), and that one restores too.
    #[test]
    fn the_checkpoint_after_a_restore_is_full() {
        let dir = scratch("after-restore");
        let shared: Arc<dyn Storage> = Arc::new(LocalDir::new(dir.join("shared")));
        let mut store = StateStore::open(dir.join("db")).expect("open");
        let table = store.table(3);
        table.write(&[(b"a".as_slice(), Some(b"1".as_slice()))]).expect("write");
        checkpoint(&mut store, &shared, &dir.join("chk-1"));
        store.table(3).write(&[(b"b".as_slice(), Some(b"2".as_slice()))]).expect("write");
        let log = checkpoint(&mut store, &shared, &dir.join("chk-2"));
        assert_eq!(log.logs.len(), 1);
        let mut restored =
            StateStore::restore(dir.join("db2"), &log, shared.as_ref(), &dir.join("chk-2")).expect("restore");
        restored.table(3).write(&[(b"c".as_slice(), Some(b"3".as_slice()))]).expect("write");
        let full = checkpoint(&mut restored, &shared, &dir.join("chk-3"));
        assert!(full.logs.is_empty(), "a log checkpoint after a restore");
        let again = StateStore::restore(dir.join("db3"), &full, shared.as_ref(), &dir.join("chk-3")).expect("restore");
        let expected: BTreeMap<Vec<u8>, Vec<u8>> = [("a", "1"), ("b", "2"), ("c", "3")]
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect();
        assert_eq!(contents(&again), expected);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A damaged log is an error, never a partial replay passed off as the state: a length
    /// past the end, a length cut short, and a snapshot naming a log it does not carry.
    #[test]
    fn a_damaged_log_is_refused() {
        let mut batches = 0;
        let mut count = |_| {
            batches += 1;
            Ok(())
        };
        assert!(super::replay(&[9, 0, 0, 0, 1, 2], &mut count).is_err(), "a length past the end");
        assert!(super::replay(&[9, 0], &mut count).is_err(), "a length cut short");
        assert!(super::replay(&[], &mut count).is_ok(), "an empty log replays nothing");
        assert_eq!(batches, 0);
        let text = r#"{"shared":{},"own":["MANIFEST-000005"],"logs":["weir-write-log-001"]}"#;
        assert!(StoreSnapshot::from_json(text).is_err(), "a log the snapshot does not carry");
    }

    /// A full checkpoint whose upload failed is nothing to build on: the next checkpoint is
    /// full and uploads every file it refers to.
    #[test]
    fn a_failed_upload_makes_the_next_checkpoint_full() {
        let dir = scratch("failed-upload");
        std::fs::write(dir.join("shared"), b"not a directory").expect("blocker");
        let shared: Arc<dyn Storage> = Arc::new(LocalDir::new(dir.join("shared")));
        let mut store = StateStore::open(dir.join("db")).expect("open");
        store.table(3).write(&[(b"a".as_slice(), Some(b"1".as_slice()))]).expect("write");
        let (_, _, upload) = store.begin_checkpoint(&shared).expect("begin");
        assert!(upload.run().is_err(), "the upload should have failed");
        std::fs::remove_file(dir.join("shared")).expect("unblock");
        store.table(3).write(&[(b"b".as_slice(), Some(b"2".as_slice()))]).expect("write");
        let next = checkpoint(&mut store, &shared, &dir.join("chk-2"));
        assert!(next.logs.is_empty(), "a log checkpoint on a failed upload");
        for name in next.shared.values() {
            assert!(dir.join("shared").join(name).exists(), "{name} is referenced but was never uploaded");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

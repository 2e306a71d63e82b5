//! Operator state in RocksDB, checkpointed incrementally.
//!
//! One [`StateStore`] (one RocksDB instance) per stateful operator task, as in Flink: each
//! task checkpoints when the barrier has passed it, independently of the others, which a
//! store shared by tasks at different points of the stream could not do with RocksDB's
//! whole-database checkpoints. The stores of a process share one block cache and one
//! write-buffer budget, so memory stays bounded however many tasks there are. Tables
//! within a store ([`StateTable`]) are key prefixes, so that a range of keys (a fired
//! window) is deleted with one range delete. Operators read and write state
//! a batch at a time: `multi_get` for the distinct keys of a batch, one write batch back.
//!
//! A checkpoint ([`StateStore::begin_checkpoint`]) asks RocksDB for a checkpoint (hard links
//! of the live SST files plus the small MANIFEST, CURRENT and OPTIONS files); its
//! [`Upload`], which may run on another thread, copies into the checkpoint storage only the
//! SST files that no earlier checkpoint holds: SST files never
//! change once written, so each is copied once, under a name unique to this store's lineage,
//! and then only referenced. [`prune_shared`] deletes shared files no retained checkpoint
//! references.
//!
//! A checkpoint whose store changed little since the last full one is a *log checkpoint*
//! ([`log`]): the write batches since then, carried in the checkpoint itself, on top of the
//! last full checkpoint's files. Restoring one rebuilds that full checkpoint and replays the
//! batches.

mod log;
mod pending;
pub mod tables;

pub use tables::{Backend, KeyGroups, RestoredMeta, StateTables, Table, TableDecl, TableKind, DEFAULT_MAX_PARALLELISM};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::{Options, WriteBatch, DB};
use weir_core::{Result, WeirError};
use weir_storage::Storage;

fn db_error(what: &str, e: rocksdb::Error) -> WeirError {
    WeirError::external(format!("state store: {what}: {e}"))
}

fn io(what: &str, path: &Path, e: std::io::Error) -> WeirError {
    WeirError::external(format!("state store: cannot {what} '{}': {e}", path.display()))
}

/// What a checkpoint of the store needs: files copied for it (`own`), and shared SST files
/// (copied by this or an earlier checkpoint) it refers to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreSnapshot {
    /// RocksDB file name -> name in the shared directory.
    pub shared: BTreeMap<String, String>,
    /// Small per-checkpoint files (MANIFEST, CURRENT, OPTIONS), copied into the checkpoint.
    pub own: Vec<String>,
    /// Those of `own` that are write logs ([`log`]), oldest first: replayed, in this order,
    /// onto the store the other files make.
    pub logs: Vec<String>,
    pub bytes_copied: u64,
    pub bytes_referenced: u64,
}

impl StoreSnapshot {
    pub fn to_json(&self) -> String {
        if self.logs.is_empty() {
            serde_json::json!({ "shared": self.shared, "own": self.own }).to_string()
        } else {
            serde_json::json!({ "shared": self.shared, "own": self.own, "logs": self.logs }).to_string()
        }
    }

    pub fn from_json(text: &str) -> Result<Self> {
        let damaged = || WeirError::internal("state snapshot description is damaged");
        let v: serde_json::Value = serde_json::from_str(text).map_err(|_| damaged())?;
        let shared = v["shared"]
            .as_object()
            .ok_or_else(damaged)?
            .iter()
            .map(|(k, v)| Ok((k.clone(), v.as_str().ok_or_else(damaged)?.to_string())))
            .collect::<Result<_>>()?;
        let own: Vec<String> =
            v["own"].as_array().ok_or_else(damaged)?.iter().filter_map(|f| f.as_str().map(String::from)).collect();
        // Absent before log checkpoints existed.
        let logs: Vec<String> =
            v["logs"].as_array().into_iter().flatten().filter_map(|f| f.as_str().map(String::from)).collect();
        if logs.iter().any(|l| !own.contains(l)) {
            return Err(damaged());
        }
        Ok(Self { shared, own, logs, bytes_copied: 0, bytes_referenced: 0 })
    }
}

pub struct StateStore {
    db: DB,
    path: PathBuf,
    /// Names this lineage gives its SST files in the shared directory: another process's
    /// files may carry the same RocksDB numbers with other contents.
    lineage: String,
    /// SST files in the shared storage, or on their way there: RocksDB name -> shared name.
    /// An upload that fails takes its files out again, so that the next checkpoint uploads
    /// them.
    uploaded: Uploaded,
    checkpoints: u64,
    /// The write batches since the last checkpoint, and what later checkpoints build on.
    log: log::WriteLog,
}

/// Memory every store of the process shares: the block cache, and the budget of write
/// buffers (memtables), charged to the cache, so that many stores do not mean many times the
/// memory. State beyond this lives on disk.
const BLOCK_CACHE_BYTES: usize = 256 << 20;
const WRITE_BUFFER_BYTES: usize = 128 << 20;

struct ProcessMemory {
    cache: rocksdb::Cache,
    write_buffers: rocksdb::WriteBufferManager,
}

fn process_memory() -> &'static ProcessMemory {
    static MEMORY: std::sync::OnceLock<ProcessMemory> = std::sync::OnceLock::new();
    MEMORY.get_or_init(|| {
        let cache = rocksdb::Cache::new_lru_cache(BLOCK_CACHE_BYTES);
        let write_buffers =
            rocksdb::WriteBufferManager::new_write_buffer_manager_with_cache(WRITE_BUFFER_BYTES, false, cache.clone());
        ProcessMemory { cache, write_buffers }
    })
}

/// The size a write's batch is cut at ([`StateTable::write`]).
const BATCH_BYTES: usize = 4 << 20;

/// When RocksDB starts a new MANIFEST, which holds only the live files: past this size, and
/// past [`MANIFEST_GROWTH_PCT`] more than the last new one. Every checkpoint copies the
/// MANIFEST whole, and each flush appends an edit to it, so with RocksDB's defaults (1 GiB)
/// a job checkpointing every 100 ms copied a file that grew by about 30 bytes a checkpoint
/// without end: about 1 MB a checkpoint after an hour, 28 MB after a day. Now it is at most
/// about twice the live files' description; rewriting that when it doubles costs little.
const MANIFEST_BYTES: usize = 64 << 10;
const MANIFEST_GROWTH_PCT: u32 = 100;

/// Bytes of a stored key that name its operator, table and key group: see [`insert_hints`].
const HINT_PREFIX: usize = 8;

fn options() -> Options {
    let mut o = insert_hints();
    o.create_if_missing(true);
    o.set_compression_type(rocksdb::DBCompressionType::Lz4);
    o.set_max_manifest_file_size(MANIFEST_BYTES);
    let memory = process_memory();
    let mut table = rocksdb::BlockBasedOptions::default();
    table.set_block_cache(&memory.cache);
    // Operators look up many keys that are not there yet (a group's first row): Bloom filters
    // answer those without reading a block, in each file and in the memtable.
    table.set_bloom_filter(10.0, false);
    table.set_whole_key_filtering(true);
    o.set_memtable_prefix_bloom_ratio(0.1);
    o.set_memtable_whole_key_filtering(true);
    o.set_block_based_table_factory(&table);
    o.set_write_buffer_manager(&memory.write_buffers);
    o
}

/// Options whose memtable remembers, per operator, table and key group, where it last
/// inserted, so that an insert next to the previous one does not search the skip list from
/// its top. Writes reach the memtable in key order (`pending.rs`), so nearly every insert is
/// one. Hints need writes that are not concurrent within one memtable, which a store's single
/// writer gives anyway. The C API has no setter for this option, hence the options string; if
/// it were refused, plain options do the same work, only slower.
fn insert_hints() -> Options {
    let spec = format!("memtable_insert_with_hint_prefix_extractor=rocksdb.FixedPrefix.{HINT_PREFIX}");
    let mut base = Options::default();
    let mut o = base.get_options_from_string(spec).unwrap_or_default();
    o.set_allow_concurrent_memtable_write(false);
    // No setter either; refused, the MANIFEST grows to 6 times the live files' description
    // (RocksDB's default) instead of twice.
    let spec = format!("max_manifest_space_amp_pct={MANIFEST_GROWTH_PCT}");
    match o.get_options_from_string(spec) {
        Ok(with_growth) => with_growth,
        Err(_) => o,
    }
}

fn new_lineage() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{:x}-{:x}", nanos, std::process::id())
}

impl StateStore {
    /// A new, empty store in `path` (deleted first: a worker's local state is scratch, the
    /// checkpoints are the truth).
    pub fn open(path: impl Into<PathBuf>) -> Result<Self> {
        let path = path.into();
        let _ = std::fs::remove_dir_all(&path);
        let db = DB::open(&options(), &path).map_err(|e| db_error("open", e))?;
        Ok(Self {
            db,
            path,
            lineage: new_lineage(),
            uploaded: Uploaded::default(),
            checkpoints: 0,
            log: log::WriteLog::default(),
        })
    }

    /// A store rebuilt from a checkpoint: its SST files fetched from `shared`, its small
    /// files copied from `checkpoint`, then its write logs replayed.
    pub fn restore(
        path: impl Into<PathBuf>,
        snapshot: &StoreSnapshot,
        shared: &dyn Storage,
        checkpoint: &Path,
    ) -> Result<Self> {
        let path = path.into();
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).map_err(|e| io("create", &path, e))?;
        let fetch: Vec<(String, PathBuf)> =
            snapshot.shared.iter().map(|(name, shared_name)| (shared_name.clone(), path.join(name))).collect();
        shared.download(&fetch)?;
        for name in snapshot.own.iter().filter(|name| !snapshot.logs.contains(name)) {
            let from = checkpoint.join(name);
            std::fs::copy(&from, path.join(name)).map_err(|e| io("copy", &from, e))?;
        }
        let db = DB::open(&options(), &path).map_err(|e| db_error("open restored state", e))?;
        for name in &snapshot.logs {
            let from = checkpoint.join(name);
            let bytes = std::fs::read(&from).map_err(|e| io("read", &from, e))?;
            log::replay(&bytes, |batch| db.write_opt(batch, &no_log()).map_err(|e| db_error("replay", e)))?;
        }
        let uploaded = Arc::new(std::sync::Mutex::new(snapshot.shared.clone()));
        // The next checkpoint is a full one: the replayed writes are in no file yet.
        Ok(Self { db, path, lineage: new_lineage(), uploaded, checkpoints: 0, log: log::WriteLog::default() })
    }

    /// The keys of operator `operator`.
    pub fn table(&self, operator: u32) -> StateTable<'_> {
        StateTable { db: &self.db, log: &self.log, prefix: operator.to_be_bytes() }
    }

    /// Begin a consistent checkpoint of the store. Done here, on the caller's thread:
    /// flush, a RocksDB checkpoint of hard links (cheap, and it keeps the files alive
    /// whatever compaction does next), and reading the small per-checkpoint files (returned
    /// by name). Left to [`Upload::run`], which may run on another thread while the store
    /// goes on: uploading the SST files no earlier checkpoint holds to `shared`.
    pub fn begin_checkpoint(&mut self, shared: &Arc<dyn Storage>) -> Result<(StoreSnapshot, OwnFiles, Upload)> {
        let base_uploaded = |snapshot: &StoreSnapshot| {
            self.uploaded.lock().is_ok_and(|up| snapshot.shared.iter().all(|(name, s)| up.get(name) == Some(s)))
        };
        if let Some((snapshot, own)) = self.log.checkpoint(base_uploaded) {
            let upload =
                Upload { local: None, shared: shared.clone(), copies: Vec::new(), uploaded: self.uploaded.clone() };
            return Ok((snapshot, own, upload));
        }
        self.db.flush().map_err(|e| db_error("flush", e))?;
        self.checkpoints += 1;
        let local = self.path.with_extension(format!("chk-{}", self.checkpoints));
        let _ = std::fs::remove_dir_all(&local);
        rocksdb::checkpoint::Checkpoint::new(&self.db)
            .and_then(|c| c.create_checkpoint(&local))
            .map_err(|e| db_error("checkpoint", e))?;
        let mut snapshot = StoreSnapshot::default();
        let mut own = Vec::new();
        let mut upload = Upload {
            local: Some(local.clone()),
            shared: shared.clone(),
            copies: Vec::new(),
            uploaded: self.uploaded.clone(),
        };
        let mut uploaded =
            self.uploaded.lock().map_err(|_| WeirError::internal("state store: upload list poisoned"))?;
        let entries = std::fs::read_dir(&local).map_err(|e| io("list", &local, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io("list", &local, e))?;
            let name = entry.file_name().to_string_lossy().to_string();
            let size = entry.metadata().map_err(|e| io("stat", &entry.path(), e))?.len();
            if name.ends_with(".sst") {
                let shared_name = match uploaded.get(&name) {
                    Some(existing) => existing.clone(),
                    None => {
                        let shared_name = format!("{}-{name}", self.lineage);
                        upload.copies.push((name.clone(), shared_name.clone()));
                        snapshot.bytes_copied += size;
                        uploaded.insert(name.clone(), shared_name.clone());
                        shared_name
                    }
                };
                snapshot.bytes_referenced += size;
                snapshot.shared.insert(name, shared_name);
            } else {
                let bytes = std::fs::read(entry.path()).map_err(|e| io("read", &entry.path(), e))?;
                snapshot.bytes_copied += size;
                snapshot.bytes_referenced += size;
                snapshot.own.push(name.clone());
                own.push((name, bytes));
            }
        }
        // Forget uploads of files RocksDB has compacted away.
        let live: BTreeSet<&String> = snapshot.shared.keys().collect();
        uploaded.retain(|name, _| live.contains(name));
        drop(uploaded);
        self.log.full_checkpoint(&snapshot, &own);
        Ok((snapshot, own, upload))
    }
}

/// A store's SST files in the shared storage, shared with its uploads.
type Uploaded = Arc<std::sync::Mutex<BTreeMap<String, String>>>;

/// A checkpoint's small per-checkpoint files (MANIFEST, CURRENT, OPTIONS): name and bytes.
pub type OwnFiles = Vec<(String, Vec<u8>)>;

/// Keys with their values, in key order.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// The second half of a checkpoint: new SST files uploaded (durably) to the shared storage,
/// in parallel where it allows. A checkpoint that uses them counts only once this has
/// succeeded.
#[derive(Debug)]
#[must_use = "a checkpoint's SST files are only in the shared storage once its upload has run"]
pub struct Upload {
    /// The RocksDB checkpoint (hard links), deleted when done; none for a log checkpoint.
    local: Option<PathBuf>,
    shared: Arc<dyn Storage>,
    /// RocksDB file name -> shared name.
    copies: Vec<(String, String)>,
    uploaded: Uploaded,
}

impl Upload {
    pub fn run(self) -> Result<()> {
        // Fault injection: a slow upload, so that a test can kill the process while the job
        // goes on and the checkpoint's files are not copied yet.
        weir_core::fault::pause("upload");
        let Some(local) = self.local else { return Ok(()) };
        let files: Vec<(PathBuf, String)> =
            self.copies.iter().map(|(name, shared_name)| (local.join(name), shared_name.clone())).collect();
        let result = self.shared.upload(&files);
        if result.is_err() {
            // Not there after all: the next checkpoint uploads them again.
            if let Ok(mut uploaded) = self.uploaded.lock() {
                for (name, shared_name) in &self.copies {
                    if uploaded.get(name) == Some(shared_name) {
                        uploaded.remove(name);
                    }
                }
            }
        }
        let _ = std::fs::remove_dir_all(&local);
        result
    }
}

/// Delete the shared files that none of `retained` refers to.
pub fn prune_shared(shared: &dyn Storage, retained: &[StoreSnapshot]) -> Result<u64> {
    let keep: BTreeSet<&String> = retained.iter().flat_map(|s| s.shared.values()).collect();
    let doomed: Vec<String> =
        shared.list("")?.files.into_iter().map(|f| f.name).filter(|name| !keep.contains(name)).collect();
    shared.delete(&doomed)?;
    Ok(doomed.len() as u64)
}

/// One operator's keys in the store.
pub struct StateTable<'a> {
    db: &'a DB,
    log: &'a log::WriteLog,
    prefix: [u8; 4],
}

impl StateTable<'_> {
    fn key(&self, key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(4 + key.len());
        k.extend_from_slice(&self.prefix);
        k.extend_from_slice(key);
        k
    }

    /// The values of many keys in one call. The prefixed keys share one buffer: a lookup is
    /// per distinct key and value of a chunk, so an allocation each would be a good part of it.
    pub fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut joined = Vec::with_capacity(keys.iter().map(|k| self.prefix.len() + k.len()).sum());
        let mut ends = Vec::with_capacity(keys.len());
        for k in keys {
            joined.extend_from_slice(&self.prefix);
            joined.extend_from_slice(k);
            ends.push(joined.len());
        }
        self.db.multi_get(pieces(&joined, &ends)).into_iter().map(|r| r.map_err(|e| db_error("read", e))).collect()
    }

    /// Write puts (`Some`) and deletes (`None`), in order. A large write goes in batches of
    /// about [`BATCH_BYTES`]: one batch of a checkpoint interval's writes would grow (and
    /// copy) its buffer many times over, which cost more than the writes. Not atomic, and
    /// need not be: nothing reads the store between the batches, and a failed write fails
    /// the task, whose store is then rebuilt from a checkpoint.
    pub fn write(&self, changes: &[(&[u8], Option<&[u8]>)]) -> Result<()> {
        let total: usize =
            changes.iter().map(|(k, v)| self.prefix.len() + k.len() + v.map_or(0, |v| v.len()) + 16).sum();
        let mut batch = WriteBatch::with_capacity_bytes(total.min(BATCH_BYTES + (1 << 16)));
        // The batch copies each key, so one buffer serves them all.
        let mut key = Vec::new();
        for (k, v) in changes {
            key.clear();
            key.extend_from_slice(&self.prefix);
            key.extend_from_slice(k);
            match v {
                Some(v) => batch.put(&key, v),
                None => batch.delete(&key),
            }
            if batch.size_in_bytes() >= BATCH_BYTES {
                let full = std::mem::replace(&mut batch, WriteBatch::with_capacity_bytes(BATCH_BYTES + (1 << 16)));
                self.apply(full)?;
            }
        }
        if batch.is_empty() {
            return Ok(());
        }
        self.apply(batch)
    }

    /// A batch into the store, and into the write log of the next checkpoint.
    fn apply(&self, batch: WriteBatch) -> Result<()> {
        self.log.record(&batch);
        self.db.write_opt(batch, &no_log()).map_err(|e| db_error("write", e))
    }

    /// Every key in `[from, to)` with its value, in key order (keys without the prefix).
    pub fn scan(&self, from: &[u8], to: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let start = self.key(from);
        let end = self.key(to);
        let mut out = Vec::new();
        let iter = self.db.iterator(rocksdb::IteratorMode::From(&start, rocksdb::Direction::Forward));
        for item in iter {
            let (k, v) = item.map_err(|e| db_error("scan", e))?;
            if k.as_ref() >= end.as_slice() {
                break;
            }
            out.push((k[4..].to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    /// The keys of each range `[from, to)`, with one iterator that seeks from range to range
    /// (cheaper than an iterator per range: a join looks up every key of a batch).
    pub fn scan_many(&self, ranges: &[(Vec<u8>, Vec<u8>)]) -> Result<Vec<Entries>> {
        let mut iter = self.db.raw_iterator();
        let mut out = Vec::with_capacity(ranges.len());
        for (from, to) in ranges {
            let end = self.key(to);
            let mut found = Vec::new();
            iter.seek(self.key(from));
            while let (Some(k), Some(v)) = (iter.key(), iter.value()) {
                if k >= end.as_slice() {
                    break;
                }
                found.push((k[4..].to_vec(), v.to_vec()));
                iter.next();
            }
            iter.status().map_err(|e| db_error("scan", e))?;
            out.push(found);
        }
        Ok(out)
    }

    /// Delete every key in `[from, to)` (a fired window: keys start with its end).
    pub fn delete_range(&self, from: &[u8], to: &[u8]) -> Result<()> {
        let mut batch = WriteBatch::default();
        batch.delete_range(self.key(from), self.key(to));
        self.apply(batch)
    }
}

/// The pieces of `joined` that end at `ends` (many keys kept in one buffer, so that a batch
/// of them costs one allocation, not one each).
pub fn pieces<'a>(joined: &'a [u8], ends: &[usize]) -> Vec<&'a [u8]> {
    let mut start = 0;
    ends.iter()
        .map(|&end| {
            let piece = joined.get(start..end).unwrap_or_default();
            start = end;
            piece
        })
        .collect()
}

/// Writes without RocksDB's write-ahead log: the local store is scratch, rebuilt from
/// checkpoints after a crash, and a checkpoint flushes the memtable first, so the log would
/// only cost a copy and a checksum of every write.
fn no_log() -> rocksdb::WriteOptions {
    let mut options = rocksdb::WriteOptions::default();
    options.disable_wal(true);
    options
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("weir-state-{name}-{}", new_lineage()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    fn value(i: u64, version: u64) -> Vec<u8> {
        let mut v = format!("{i:012}-{version:04}-").into_bytes();
        v.resize(100, b'x');
        v
    }

    /// A whole checkpoint: begun, uploaded, its small files written into `checkpoint`.
    fn checkpoint(store: &mut StateStore, shared: &Arc<dyn Storage>, checkpoint: &Path) -> StoreSnapshot {
        let (snapshot, own, upload) = store.begin_checkpoint(shared).expect("begin checkpoint");
        upload.run().expect("upload");
        std::fs::create_dir_all(checkpoint).expect("checkpoint dir");
        for (name, bytes) in own {
            std::fs::write(checkpoint.join(name), bytes).expect("write own file");
        }
        snapshot
    }

    fn load(table: &StateTable<'_>, keys: impl Iterator<Item = u64>, version: u64) {
        let keys: Vec<u64> = keys.collect();
        for chunk in keys.chunks(10_000) {
            let ks: Vec<[u8; 8]> = chunk.iter().map(|i| i.to_be_bytes()).collect();
            let vs: Vec<Vec<u8>> = chunk.iter().map(|i| value(*i, version)).collect();
            let changes: Vec<(&[u8], Option<&[u8]>)> =
                ks.iter().zip(&vs).map(|(k, v)| (&k[..], Some(&v[..]))).collect();
            table.write(&changes).expect("write");
        }
    }

    /// An upload that fails leaves no file counted as uploaded: the next checkpoint uploads
    /// every file its state needs, and none is missing from the shared storage.
    #[test]
    fn files_of_a_failed_upload_are_uploaded_by_the_next_checkpoint() {
        let dir = scratch("failed-upload");
        // A file where the shared directory should be: the first upload fails.
        std::fs::write(dir.join("shared"), b"not a directory").expect("blocker");
        let shared: Arc<dyn Storage> = Arc::new(weir_storage::LocalDir::new(dir.join("shared")));
        let mut store = StateStore::open(dir.join("db")).expect("open");
        load(&store.table(1), 0..10_000, 0);
        let (first, _, upload) = store.begin_checkpoint(&shared).expect("begin");
        assert!(first.bytes_copied > 0 && !first.shared.is_empty());
        assert!(upload.run().is_err(), "the upload should have failed");
        std::fs::remove_file(dir.join("shared")).expect("unblock");
        let (second, _, upload) = store.begin_checkpoint(&shared).expect("begin");
        upload.run().expect("upload");
        for name in second.shared.values() {
            assert!(dir.join("shared").join(name).exists(), "{name} is referenced but was never uploaded");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// 1M keys of 100 bytes; 1% of them updated between checkpoints: each later checkpoint
    /// copies a few percent of the state, and a restored store reads the latest values.
    /// The insert hints are set through an options string, which RocksDB could refuse
    /// without a word (`insert_hints`): the store's own OPTIONS file says they are on.
    #[test]
    fn the_memtable_keeps_insert_hints() {
        let dir = scratch("hints");
        let store = StateStore::open(dir.join("db")).expect("open");
        let options: String = std::fs::read_dir(dir.join("db"))
            .expect("list")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("OPTIONS-"))
            .map(|e| std::fs::read_to_string(e.path()).expect("read options"))
            .collect();
        assert!(
            options.contains(&format!("memtable_insert_with_hint_prefix_extractor=rocksdb.FixedPrefix.{HINT_PREFIX}"))
        );
        assert!(options.contains("allow_concurrent_memtable_write=false"));
        assert!(options.contains(&format!("max_manifest_space_amp_pct={MANIFEST_GROWTH_PCT}")));
        assert!(options.contains(&format!("max_manifest_file_size={MANIFEST_BYTES}")));
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Each checkpoint flushes, which adds an edit (with the new file's first and last keys)
    /// to the MANIFEST that every checkpoint copies. Keys of 4 KB make each edit about 8 KB:
    /// 256 checkpoints would make it 2 MB. The same two keys are rewritten each time, so
    /// compactions keep few files live, and the MANIFEST started anew stays small: at most
    /// about twice the live files' description, and under 1 MB even if compaction lagged
    /// until RocksDB stops writes (36 files in level 0). Values of half a write log's limit
    /// make every checkpoint a full one (a log checkpoint flushes nothing).
    #[test]
    fn the_manifest_a_checkpoint_copies_stays_bounded() {
        let dir = scratch("manifest");
        let shared: Arc<dyn Storage> = Arc::new(weir_storage::LocalDir::new(dir.join("shared")));
        let mut store = StateStore::open(dir.join("db")).expect("open");
        let key = |end: u8| vec![end; 4096];
        let (first, last_key) = (key(0), key(0xFF));
        let (mut largest, mut rolled) = (0, 0);
        let mut last = None;
        let value = |i: u64| {
            let mut v = vec![0u8; log::LOG_BYTES / 2];
            v[..8].copy_from_slice(&i.to_be_bytes());
            v
        };
        for i in 0..256u64 {
            let value = value(i);
            let changes: Vec<(&[u8], Option<&[u8]>)> = vec![(&first, Some(&value)), (&last_key, Some(&value))];
            store.table(1).write(&changes).expect("write");
            let chk = dir.join(format!("chk-{i}"));
            let snapshot = checkpoint(&mut store, &shared, &chk);
            assert!(snapshot.logs.is_empty(), "checkpoint {i} is not a full one");
            let manifest: u64 = std::fs::read_dir(&chk)
                .expect("list")
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("MANIFEST-"))
                .map(|e| e.metadata().expect("stat").len())
                .sum();
            if manifest < largest {
                rolled += 1;
            }
            largest = largest.max(manifest);
            if let Some((_, old)) = last.replace((snapshot, chk)) {
                let _ = std::fs::remove_dir_all(old);
            }
        }
        println!("largest MANIFEST copied: {largest} bytes, started anew {rolled} times");
        assert!(largest < 1 << 20, "a checkpoint copied a MANIFEST of {largest} bytes");
        assert!(rolled > 0, "the MANIFEST was never started anew");
        let (snapshot, chk) = last.expect("a checkpoint");
        let restored = StateStore::restore(dir.join("db2"), &snapshot, shared.as_ref(), &chk).expect("restore");
        let got = restored.table(1).multi_get(&[&first[..], &last_key[..]]).expect("read");
        assert_eq!(got, vec![Some(value(255)); 2]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn checkpoints_copy_only_new_files_and_restore_exactly() {
        let dir = scratch("incremental");
        let shared_dir = dir.join("shared");
        let shared: Arc<dyn Storage> = Arc::new(weir_storage::LocalDir::new(&shared_dir));
        let mut store = StateStore::open(dir.join("db")).expect("open");
        load(&store.table(7), 0..1_000_000, 0);
        let first = checkpoint(&mut store, &shared, &dir.join("chk-1"));
        assert!(first.bytes_referenced > 50_000_000 / 4, "state is {} bytes", first.bytes_referenced);

        let mut snapshots = vec![first.clone()];
        for round in 1..=3u64 {
            // 1% of the keys, spread over the whole key space.
            load(&store.table(7), (0..1_000_000).filter(|i| (i + round) % 100 == 0), round);
            let s = checkpoint(&mut store, &shared, &dir.join(format!("chk-{}", round + 1)));
            let share = s.bytes_copied as f64 / s.bytes_referenced as f64;
            println!(
                "checkpoint {}: copied {} of {} bytes ({:.1}%)",
                round + 1,
                s.bytes_copied,
                s.bytes_referenced,
                share * 100.0
            );
            assert!(share < 0.10, "checkpoint {} copied {:.1}% of the state", round + 1, share * 100.0);
            snapshots.push(s);
        }

        // Keep the last two: files only the first two referenced go.
        let before = std::fs::read_dir(&shared_dir).expect("shared").count();
        let deleted = prune_shared(shared.as_ref(), &snapshots[2..]).expect("prune");
        let after = std::fs::read_dir(&shared_dir).expect("shared").count();
        assert_eq!(before - deleted as usize, after);
        for s in &snapshots[2..] {
            for name in s.shared.values() {
                assert!(shared_dir.join(name).exists(), "{name} deleted while referenced");
            }
        }

        // Restore the last checkpoint elsewhere and read it back.
        let last = snapshots.last().expect("snapshot").clone();
        let description = StoreSnapshot::from_json(&last.to_json()).expect("round trip");
        let restored =
            StateStore::restore(dir.join("db2"), &description, shared.as_ref(), &dir.join("chk-4")).expect("restore");
        let keys: Vec<[u8; 8]> = [0u64, 97, 98, 99, 500_000, 999_999].iter().map(|i| i.to_be_bytes()).collect();
        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        let got = restored.table(7).multi_get(&refs).expect("read");
        let expected: Vec<Option<Vec<u8>>> = [0u64, 97, 98, 99, 500_000, 999_999]
            .iter()
            .map(|&i| {
                let version = (1..=3u64).rev().find(|r| (i + r) % 100 == 0).unwrap_or(0);
                Some(value(i, version))
            })
            .collect();
        assert_eq!(got, expected);
        assert_eq!(
            restored.table(8).multi_get(&refs).expect("read").iter().flatten().count(),
            0,
            "operators share keys"
        );

        // A fired window's keys go with one range delete.
        restored.table(7).delete_range(&0u64.to_be_bytes(), &500_000u64.to_be_bytes()).expect("range delete");
        let got = restored.table(7).multi_get(&refs).expect("read");
        assert_eq!(got.iter().filter(|v| v.is_some()).count(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

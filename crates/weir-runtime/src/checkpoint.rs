//! Checkpoints: the coordinator that injects barriers and gathers every task's state, and
//! the store that keeps completed checkpoints on disk.
//!
//! Protocol, for checkpoint `n`:
//! 1. The coordinator asks every source task for barrier `n` (a watch channel).
//! 2. A source task, between two batches, records its position, snapshots the operators of
//!    its chain, acknowledges with that state, and sends `Barrier(n)` downstream.
//! 3. A task with several inputs aligns barrier `n` (exactly-once: an input that delivered it
//!    is not read until all have), snapshots its operators, acknowledges and forwards it.
//! 4. A sink task pre-commits (flushes what it wrote before the barrier) and acknowledges
//!    with what it needs to publish that.
//! 5. When every task has acknowledged, the coordinator writes the checkpoint (state files,
//!    then the manifest, atomically) and tells the sinks that `n` is complete: they publish.
//!
//! A task that has finished (its input ended) acknowledges once with its final state, which
//! stands for every later checkpoint.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use weir_core::{Result, WeirError};

/// `checkpoint.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointMode {
    /// Barriers are aligned at every task with several inputs.
    ExactlyOnce,
    /// No alignment: rows after a barrier may be counted in its checkpoint and replayed.
    AtLeastOnce,
}

/// The version of the checkpoint layout: the manifest, the state files it lists and how a
/// task's parts are named. Bumped with any change to them; a checkpoint of another version
/// is refused with both versions named. (Each part carries its own version too: operator
/// state, state tables, sink pre-commits.)
pub const MANIFEST_VERSION: u64 = 1;

#[derive(Debug, Clone)]
pub struct CheckpointConfig {
    pub interval: Duration,
    pub dir: PathBuf,
    pub mode: CheckpointMode,
    pub timeout: Duration,
    pub retained: usize,
    /// Identifies the job's plan: a checkpoint of another plan is not restored.
    pub fingerprint: String,
}

/// One operator's part of a task's checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorState {
    /// What the operator's `restore` takes back.
    pub state: Vec<u8>,
    /// Files in the checkpoints' shared directory that the state needs.
    pub shared_files: Vec<String>,
    pub bytes_copied: u64,
    pub bytes_referenced: u64,
}

/// One task's state in a checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskState {
    /// A source task's position.
    pub source: Option<Vec<u8>>,
    /// Stateful operators, by their place in the task's chain.
    pub operators: BTreeMap<usize, OperatorState>,
    /// What a sink task pre-committed.
    pub sink: Option<Vec<u8>>,
}

impl TaskState {
    /// Every shared file the task's state needs.
    pub fn shared_files(&self) -> impl Iterator<Item = &String> {
        self.operators.values().flat_map(|o| o.shared_files.iter())
    }
}

/// A task's acknowledgement of a barrier.
#[derive(Debug)]
pub struct Ack {
    /// `None`: the task has finished; its state stands for every later checkpoint.
    pub epoch: Option<u64>,
    pub task: String,
    pub state: TaskState,
}

/// A checkpoint read back for a restart.
#[derive(Debug, Clone)]
pub struct Restored {
    pub epoch: u64,
    pub tasks: BTreeMap<String, TaskState>,
}

/// Figures of one completed checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointStats {
    pub id: u64,
    pub duration_ms: u64,
    pub bytes_written: u64,
    pub bytes_referenced: u64,
}

/// Where checkpoints are kept. Local directories today; object storage can implement the
/// same calls.
pub trait CheckpointStore: Send + Sync {
    /// Write checkpoint `epoch` durably; it counts only once this returns.
    fn write(&self, epoch: u64, fingerprint: &str, tasks: &BTreeMap<String, TaskState>) -> Result<CheckpointStats>;
    /// The newest complete checkpoint whose files are intact (older ones are tried when the
    /// newest is damaged, with a warning).
    fn latest(&self, fingerprint: &str) -> Result<Option<Restored>>;
    /// Keep the newest `retained` checkpoints, delete the rest, and the shared files none of
    /// them nor `keep` refers to (`keep`: the final states of tasks that have ended, which may
    /// be in no manifest yet).
    fn prune(&self, retained: usize, keep: &[String]) -> Result<()>;
    /// Delete every checkpoint (`--from-scratch`).
    fn clear(&self) -> Result<()>;
    /// Take the checkpoints over: from now on only this store completes checkpoints there,
    /// and a store of an earlier instance of the job gets a `Fenced` error when it tries.
    fn claim(&self) -> Result<()> {
        Ok(())
    }
}

/// FNV-1a, 64 bits: a stable checksum to detect damaged state files.
fn checksum(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn io(what: &str, path: &Path, e: std::io::Error) -> WeirError {
    WeirError::external(format!("checkpoint: cannot {what} '{}': {e}", path.display()))
}

/// Checkpoints in a local directory: `chk-<n>/` holds one file per task state part and a
/// `manifest.json` listing them with sizes and checksums. The manifest is written last, to a
/// temporary name, synced and renamed: a checkpoint without it does not exist.
pub struct LocalStore {
    dir: PathBuf,
    /// This instance, as written to the `owner` file by `claim`.
    instance: String,
}

impl LocalStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        Self { dir: dir.into(), instance: format!("{}-{nanos}", std::process::id()) }
    }

    fn owner_file(&self) -> PathBuf {
        self.dir.join("owner")
    }

    /// Refuse to complete a checkpoint if another instance has claimed the directory since.
    fn check_owner(&self) -> Result<()> {
        match std::fs::read_to_string(self.owner_file()) {
            Ok(owner) if owner.trim() != self.instance => Err(WeirError::fenced(format!(
                "checkpoint directory '{}' was taken over by another instance of this job ({}); this one stops",
                self.dir.display(),
                owner.trim()
            ))),
            _ => Ok(()),
        }
    }

    fn chk(&self, epoch: u64) -> PathBuf {
        self.dir.join(format!("chk-{epoch:010}"))
    }

    /// Checkpoint directories, newest first.
    fn epochs(&self) -> Result<Vec<u64>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(io("list", &self.dir, e)),
        };
        let mut epochs: Vec<u64> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_prefix("chk-")).and_then(|n| n.parse().ok()))
            .collect();
        epochs.sort_unstable_by(|a, b| b.cmp(a));
        Ok(epochs)
    }

    /// Checkpoint `epoch`, which something outside the store (a task's Kafka commit) names
    /// as the one to restore.
    pub fn load(&self, epoch: u64, fingerprint: &str) -> Result<Restored> {
        self.read(epoch, fingerprint).map_err(|why| {
            WeirError::user(format!(
                "checkpoint {epoch} in '{}' cannot be restored ({why}): is the checkpoint store shared by every \
                 worker?",
                self.dir.display()
            ))
        })
    }

    fn read(&self, epoch: u64, fingerprint: &str) -> std::result::Result<Restored, String> {
        let dir = self.chk(epoch);
        let text = std::fs::read_to_string(dir.join("manifest.json")).map_err(|e| format!("no manifest ({e})"))?;
        let manifest: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("manifest unreadable: {e}"))?;
        // A layout this Weir does not know is refused by its version, before anything in it
        // is read the wrong way.
        let version = manifest["version"].as_u64().unwrap_or(0);
        if version != MANIFEST_VERSION {
            return Err(format!(
                "its manifest has format version {version}, and this Weir reads version {MANIFEST_VERSION}"
            ));
        }
        // Keys in another hash's groups would not meet their state: said by name.
        let hash = manifest["key_hash"].as_str().unwrap_or("DataFusion's ahash (Weir before weir-xxh64-v1)");
        if hash != crate::KEY_HASH {
            return Err(format!(
                "its keys were put in key groups by {hash}, and this Weir puts them by {}: a key's state would \
                 be in another group",
                crate::KEY_HASH
            ));
        }
        if manifest["fingerprint"].as_str() != Some(fingerprint) {
            return Err(
                "taken by a plan that keeps other state (another query, state backend or max-parallelism)".into()
            );
        }
        let mut tasks: BTreeMap<String, TaskState> = BTreeMap::new();
        let files = manifest["files"].as_array().ok_or("manifest lists no files")?;
        for f in files {
            let (Some(task), Some(part)) = (f["task"].as_str(), f["part"].as_str()) else {
                return Err("manifest entry incomplete".into());
            };
            let state = tasks.entry(task.to_string()).or_default();
            if part == "none" {
                continue;
            }
            let (Some(name), Some(sum)) = (f["file"].as_str(), f["checksum"].as_str()) else {
                return Err("manifest entry incomplete".into());
            };
            let bytes = std::fs::read(dir.join(name)).map_err(|e| format!("{name}: {e}"))?;
            if format!("{:016x}", checksum(&bytes)) != sum {
                return Err(format!("{name}: checksum mismatch"));
            }
            match part {
                "source" => state.source = Some(bytes),
                "sink" => state.sink = Some(bytes),
                "operator" => {
                    let op = f["operator"].as_u64().ok_or("manifest entry without its operator")? as usize;
                    let shared_files = f["shared"]
                        .as_array()
                        .ok_or("manifest entry without its shared files")?
                        .iter()
                        .map(|s| s.as_str().map(String::from).ok_or("a shared file name is not text"))
                        .collect::<std::result::Result<Vec<_>, _>>()?;
                    let o = OperatorState {
                        state: bytes,
                        shared_files,
                        bytes_copied: f["bytes_copied"].as_u64().unwrap_or(0),
                        bytes_referenced: f["bytes_referenced"].as_u64().unwrap_or(0),
                    };
                    state.operators.insert(op, o);
                }
                other => return Err(format!("manifest names an unknown part '{other}'")),
            }
        }
        Ok(Restored { epoch, tasks })
    }
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

impl CheckpointStore for LocalStore {
    fn claim(&self) -> Result<()> {
        std::fs::create_dir_all(&self.dir).map_err(|e| io("create", &self.dir, e))?;
        let tmp = self.dir.join(format!("owner.{}.tmp", self.instance));
        let mut f = std::fs::File::create(&tmp).map_err(|e| io("create", &tmp, e))?;
        f.write_all(self.instance.as_bytes()).and_then(|_| f.sync_all()).map_err(|e| io("write", &tmp, e))?;
        std::fs::rename(&tmp, self.owner_file()).map_err(|e| io("rename", &tmp, e))?;
        sync_dir(&self.dir);
        Ok(())
    }

    fn write(&self, epoch: u64, fingerprint: &str, tasks: &BTreeMap<String, TaskState>) -> Result<CheckpointStats> {
        let started = Instant::now();
        let dir = self.chk(epoch);
        // A directory left by an attempt that died before its manifest is garbage.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| io("create", &dir, e))?;
        let mut files = Vec::new();
        let mut bytes_written = 0u64;
        let mut bytes_referenced = 0u64;
        let mut shared = std::collections::BTreeSet::new();
        // RocksDB files copied for (and referenced by) the operators' states.
        let (mut files_copied, mut files_referenced) = (0u64, 0u64);
        let mut stateless = Vec::new();
        let mut write_part = |name: String, bytes: &[u8], entry: serde_json::Value| -> Result<()> {
            let path = dir.join(&name);
            let mut f = std::fs::File::create(&path).map_err(|e| io("create", &path, e))?;
            f.write_all(bytes).and_then(|_| f.sync_all()).map_err(|e| io("write", &path, e))?;
            bytes_written += bytes.len() as u64;
            bytes_referenced += bytes.len() as u64;
            let mut entry = entry;
            entry["file"] = name.into();
            entry["bytes"] = bytes.len().into();
            entry["checksum"] = format!("{:016x}", checksum(bytes)).into();
            files.push(entry);
            Ok(())
        };
        for (i, (task, state)) in tasks.iter().enumerate() {
            if let Some(bytes) = &state.source {
                write_part(
                    format!("state-{i}-source.bin"),
                    bytes,
                    serde_json::json!({ "task": task, "part": "source" }),
                )?;
            }
            for (op, o) in &state.operators {
                files_copied += o.bytes_copied;
                files_referenced += o.bytes_referenced;
                shared.extend(o.shared_files.iter().cloned());
                let entry = serde_json::json!({
                    "task": task, "part": "operator", "operator": op, "shared": o.shared_files,
                    "bytes_copied": o.bytes_copied, "bytes_referenced": o.bytes_referenced,
                });
                write_part(format!("state-{i}-op{op}.bin"), &o.state, entry)?;
            }
            if let Some(bytes) = &state.sink {
                write_part(format!("state-{i}-sink.bin"), bytes, serde_json::json!({ "task": task, "part": "sink" }))?;
            }
            if state.source.is_none() && state.operators.is_empty() && state.sink.is_none() {
                // A stateless task is listed all the same: its acknowledgement is part of
                // the checkpoint.
                stateless.push(serde_json::json!({ "task": task, "part": "none" }));
            }
        }
        files.extend(stateless);
        let shared: Vec<String> = shared.into_iter().collect();
        bytes_written += files_copied;
        bytes_referenced += files_referenced;
        // Fault injection: the checkpoint held open (state written, no manifest), so that a
        // test (or `weir verify`) kills the process in the middle of the asynchronous write.
        weir_core::fault::pause("manifest");
        self.check_owner()?;
        let manifest = serde_json::json!({ "version": MANIFEST_VERSION, "epoch": epoch, "fingerprint": fingerprint, "key_hash": crate::KEY_HASH, "files": files, "shared": shared });
        let tmp = dir.join("manifest.json.tmp");
        let mut f = std::fs::File::create(&tmp).map_err(|e| io("create", &tmp, e))?;
        f.write_all(manifest.to_string().as_bytes()).and_then(|_| f.sync_all()).map_err(|e| io("write", &tmp, e))?;
        sync_dir(&dir);
        std::fs::rename(&tmp, dir.join("manifest.json")).map_err(|e| io("publish", &tmp, e))?;
        sync_dir(&dir);
        sync_dir(&self.dir);
        Ok(CheckpointStats {
            id: epoch,
            duration_ms: started.elapsed().as_millis() as u64,
            bytes_written,
            bytes_referenced,
        })
    }

    fn latest(&self, fingerprint: &str) -> Result<Option<Restored>> {
        let mut refused = Vec::new();
        for epoch in self.epochs()? {
            if !self.chk(epoch).join("manifest.json").exists() {
                // Never completed: it does not exist.
                continue;
            }
            match self.read(epoch, fingerprint) {
                Ok(r) => return Ok(Some(r)),
                Err(why) => {
                    log::warn!(
                        "checkpoint {epoch} in '{}' is not usable ({why}); trying the one before",
                        self.dir.display()
                    );
                    refused.push(format!("{epoch}: {why}"));
                }
            }
        }
        if refused.is_empty() {
            return Ok(None);
        }
        // Starting over silently could write the output twice.
        Err(WeirError::user(format!(
            "no usable checkpoint in '{}' ({}); start with --from-scratch to discard them",
            self.dir.display(),
            refused.join("; ")
        )))
    }

    fn prune(&self, retained: usize, keep: &[String]) -> Result<()> {
        self.prune_checkpoints(retained)?;
        self.prune_shared(keep)
    }

    fn clear(&self) -> Result<()> {
        for epoch in self.epochs()? {
            let dir = self.chk(epoch);
            std::fs::remove_dir_all(&dir).map_err(|e| io("delete", &dir, e))?;
        }
        let shared = self.dir.join("shared");
        if shared.exists() {
            std::fs::remove_dir_all(&shared).map_err(|e| io("delete", &shared, e))?;
        }
        Ok(())
    }
}

impl LocalStore {
    /// Delete shared files no retained checkpoint refers to, nor `also`. Only files older than
    /// the newest manifest go: newer ones may belong to a checkpoint being taken (one runs at
    /// a time, and the next is triggered after the last manifest was written). A task that
    /// ends takes its final snapshot outside that order, while a checkpoint may be in flight:
    /// its files come in `also` until a manifest lists them.
    fn prune_shared(&self, also: &[String]) -> Result<()> {
        let shared_dir = self.dir.join("shared");
        let Ok(entries) = std::fs::read_dir(&shared_dir) else { return Ok(()) };
        let mut keep: std::collections::BTreeSet<String> = also.iter().cloned().collect();
        let mut newest: Option<std::time::SystemTime> = None;
        let mut seen = 0;
        for epoch in self.epochs()? {
            let manifest = self.chk(epoch).join("manifest.json");
            let Ok(text) = std::fs::read_to_string(&manifest) else { continue };
            // The second newest manifest's time: a task that ended may have uploaded its
            // final files just before the newest one while its acknowledgement was still on
            // the way; by the next checkpoint the coordinator has it and passes its files in
            // `also`.
            if seen == 1 {
                newest = std::fs::metadata(&manifest).and_then(|m| m.modified()).ok();
            }
            seen += 1;
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                keep.extend(v["shared"].as_array().into_iter().flatten().filter_map(|s| s.as_str().map(String::from)));
            }
        }
        let Some(newest) = newest else { return Ok(()) };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            let old = entry.metadata().and_then(|m| m.modified()).is_ok_and(|t| t < newest);
            if old && !keep.contains(&name) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(())
    }

    fn prune_checkpoints(&self, retained: usize) -> Result<()> {
        let mut complete = 0;
        for epoch in self.epochs()? {
            let dir = self.chk(epoch);
            if dir.join("manifest.json").exists() {
                complete += 1;
                if complete <= retained {
                    continue;
                }
            } else if complete == 0 {
                // Newer than every complete one: may still be being written.
                continue;
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
        Ok(())
    }
}

/// A request for barrier `epoch`; `stop`: the job stops once this checkpoint is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Trigger {
    pub epoch: u64,
    pub stop: bool,
}

/// What a task needs to take part in checkpoints.
#[derive(Clone)]
pub struct TaskCheckpoint {
    pub key: String,
    pub acks: mpsc::UnboundedSender<Ack>,
    /// The job's checkpoint timeout: a checkpoint older than this may have been given up.
    pub timeout: std::time::Duration,
}

impl TaskCheckpoint {
    pub fn ack(&self, epoch: Option<u64>, state: TaskState) {
        let _ = self.acks.send(Ack { epoch, task: self.key.clone(), state });
    }
}

/// Runs checkpoints every `interval` until the job ends.
#[allow(clippy::too_many_arguments)]
pub async fn coordinate(
    config: CheckpointConfig,
    store: std::sync::Arc<dyn CheckpointStore>,
    tasks: Vec<String>,
    first_epoch: u64,
    trigger: watch::Sender<Trigger>,
    committed: watch::Sender<u64>,
    mut acks: mpsc::UnboundedReceiver<Ack>,
    mut stop: mpsc::UnboundedReceiver<()>,
    stats: std::sync::Arc<std::sync::Mutex<Vec<CheckpointStats>>>,
) -> Result<()> {
    let mut finished: BTreeMap<String, TaskState> = BTreeMap::new();
    let mut pending: BTreeMap<u64, BTreeMap<String, TaskState>> = BTreeMap::new();
    let mut epoch = first_epoch;
    let mut next_trigger = tokio::time::Instant::now() + config.interval;
    let mut started: BTreeMap<u64, tokio::time::Instant> = BTreeMap::new();
    let mut stopping = false;
    let mut stop_pending = false;
    let mut sources_gone = false;
    loop {
        tokio::select! {
            // Stop with a checkpoint: the next barrier is the last.
            Some(()) = stop.recv(), if !stopping => {
                stopping = true;
                // One checkpoint at a time (shared files of a running one must not look
                // unreferenced): the last barrier waits for the one in flight.
                if started.is_empty() {
                    if trigger.send(Trigger { epoch, stop: true }).is_err() {
                        sources_gone = true;
                        continue;
                    }
                    started.insert(epoch, tokio::time::Instant::now());
                    epoch += 1;
                } else {
                    stop_pending = true;
                }
            }
            _ = tokio::time::sleep_until(next_trigger), if !stopping && !sources_gone => {
                // One checkpoint at a time; a late one is given up after the timeout.
                if let Some((&open, &at)) = started.iter().next() {
                    if at.elapsed() < config.timeout {
                        next_trigger = tokio::time::Instant::now() + config.interval;
                        continue;
                    }
                    log::warn!("checkpoint {open} timed out after {:?}; abandoned", config.timeout);
                    started.remove(&open);
                    pending.remove(&open);
                }
                if trigger.send(Trigger { epoch, stop: false }).is_err() {
                    // Every source has ended: no more barriers, but the tasks still running
                    // acknowledge their end, and then comes the final checkpoint.
                    sources_gone = true;
                    continue;
                }
                started.insert(epoch, tokio::time::Instant::now());
                epoch += 1;
                next_trigger = tokio::time::Instant::now() + config.interval;
            }
            ack = acks.recv() => {
                let Some(ack) = ack else { return Ok(()) };
                match ack.epoch {
                    None => {
                        finished.insert(ack.task, ack.state);
                    }
                    Some(n) => {
                        if started.contains_key(&n) {
                            pending.entry(n).or_default().insert(ack.task, ack.state);
                        }
                    }
                }
                // Complete every started checkpoint that every task has acknowledged.
                let ready: Vec<u64> = started
                    .keys()
                    .copied()
                    .filter(|n| tasks.iter().all(|t| finished.contains_key(t) || pending.get(n).is_some_and(|p| p.contains_key(t))))
                    .collect();
                for n in ready {
                    let began = started.remove(&n);
                    let mut states = pending.remove(&n).unwrap_or_default();
                    for (task, state) in &finished {
                        states.entry(task.clone()).or_insert_with(|| state.clone());
                    }
                    let keep: Vec<String> = finished.values().flat_map(|s| s.shared_files()).cloned().collect();
                    complete(n, states, began, &config, &store, &stats, &committed, keep).await?;
                }
                // Every task has ended: a final checkpoint of their final states, so that a
                // restart resumes at the end and sinks commit what they pre-committed there.
                if started.is_empty() && tasks.iter().all(|t| finished.contains_key(t)) {
                    if !complete(epoch, finished.clone(), None, &config, &store, &stats, &committed, Vec::new()).await? {
                        return Err(WeirError::external(format!(
                            "the job's final checkpoint {epoch} could not be written: its last output is not committed \
                             (running the job again resumes from the checkpoint before)"
                        )));
                    }
                    return Ok(());
                }
                if stop_pending && started.is_empty() {
                    stop_pending = false;
                    if trigger.send(Trigger { epoch, stop: true }).is_ok() {
                        started.insert(epoch, tokio::time::Instant::now());
                        epoch += 1;
                    }
                }
            }
        }
    }
}

/// Write checkpoint `n` (off the async threads; the job goes on meanwhile), prune old ones,
/// and tell the sinks it is complete. A checkpoint that fails is given up (the next one
/// covers its rows; `false`), unless this instance has been fenced: that ends the job.
#[allow(clippy::too_many_arguments)]
async fn complete(
    n: u64,
    states: BTreeMap<String, TaskState>,
    began: Option<tokio::time::Instant>,
    config: &CheckpointConfig,
    store: &std::sync::Arc<dyn CheckpointStore>,
    stats: &std::sync::Arc<std::sync::Mutex<Vec<CheckpointStats>>>,
    committed: &watch::Sender<u64>,
    keep: Vec<String>,
) -> Result<bool> {
    let store = store.clone();
    let fingerprint = config.fingerprint.clone();
    let retained = config.retained;
    let written = tokio::task::spawn_blocking(move || {
        let s = store.write(n, &fingerprint, &states)?;
        store.prune(retained, &keep)?;
        Ok::<_, WeirError>(s)
    })
    .await;
    match written {
        Ok(Ok(mut s)) => {
            // From the barrier's injection to the manifest on disk.
            if let Some(began) = began {
                s.duration_ms = began.elapsed().as_millis() as u64;
            }
            log::info!("checkpoint {n} complete: {} bytes in {} ms", s.bytes_written, s.duration_ms);
            if let Ok(mut all) = stats.lock() {
                all.push(s);
                let excess = all.len().saturating_sub(100);
                all.drain(..excess);
            }
            let _ = committed.send(n);
            Ok(true)
        }
        Ok(Err(e)) if e.kind == weir_core::ErrorKind::Fenced => Err(e),
        Ok(Err(e)) => {
            log::warn!("checkpoint {n} failed: {e}");
            Ok(false)
        }
        Err(e) => {
            log::warn!("checkpoint {n} failed: {e}");
            Ok(false)
        }
    }
}

/// A stable fingerprint of a plan's text (FNV-1a).
pub fn fingerprint(text: &str) -> String {
    format!("{:016x}", checksum(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(bytes: &[u8]) -> BTreeMap<String, TaskState> {
        BTreeMap::from([("stage0-task0".to_string(), TaskState { source: Some(bytes.to_vec()), ..Default::default() })])
    }

    fn scratch() -> PathBuf {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        std::env::temp_dir().join(format!("weir-checkpoints-{nanos}-{}", std::process::id()))
    }

    #[test]
    fn a_damaged_or_unfinished_latest_checkpoint_falls_back_to_the_one_before() {
        let dir = scratch();
        let store = LocalStore::new(&dir);
        assert!(store.latest("plan").expect("empty store").is_none());
        store.write(1, "plan", &state(b"one")).expect("write 1");
        store.write(2, "plan", &state(b"two")).expect("write 2");
        assert_eq!(store.latest("plan").expect("latest").map(|r| r.epoch), Some(2));

        // A checkpoint that died before its manifest does not exist.
        std::fs::create_dir_all(dir.join("chk-0000000003")).expect("unfinished dir");
        assert_eq!(store.latest("plan").expect("latest").map(|r| r.epoch), Some(2));

        // A damaged state file: checksum mismatch, the one before is used.
        let damaged = dir.join("chk-0000000002").join("state-0-source.bin");
        std::fs::write(&damaged, b"tw0").expect("damage");
        let restored = store.latest("plan").expect("latest").expect("a checkpoint");
        assert_eq!(restored.epoch, 1);
        assert_eq!(restored.tasks["stage0-task0"].source, Some(b"one".to_vec()));

        // Checkpoints of another plan are refused loudly, not skipped into a fresh start.
        let err = store.latest("other plan").expect_err("another plan");
        assert!(err.message.contains("start with --from-scratch"), "{}", err.message);

        // One whose keys another hash grouped (no name: DataFusion's ahash) says so.
        let manifest = dir.join("chk-0000000001").join("manifest.json");
        let text = std::fs::read_to_string(&manifest).expect("manifest");
        let mut unversioned: serde_json::Value = serde_json::from_str(&text).expect("a manifest");
        assert_eq!(unversioned["version"], MANIFEST_VERSION, "the manifest has its version");
        unversioned.as_object_mut().map(|m| m.remove("version"));
        std::fs::write(&manifest, unversioned.to_string()).expect("an unversioned manifest");
        let err = store.latest("plan").expect_err("another layout");
        assert!(err.message.contains("format version 0"), "{}", err.message);
        let old = text.replace(&format!(",\"key_hash\":\"{}\"", crate::KEY_HASH), "");
        assert_ne!(old, text, "the manifest names its key hash");
        std::fs::write(&manifest, old).expect("an older manifest");
        let err = store.latest("plan").expect_err("another key hash");
        assert!(err.message.contains("key groups by DataFusion's ahash"), "{}", err.message);
        std::fs::write(&manifest, text).expect("manifest back");

        // Retention keeps the newest complete ones; clear removes everything.
        store.write(4, "plan", &state(b"four")).expect("write 4");
        store.prune(1, &[]).expect("prune");
        assert!(!dir.join("chk-0000000001").exists() && dir.join("chk-0000000004").exists());
        store.clear().expect("clear");
        assert!(store.latest("plan").expect("cleared").is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A task that ended uploads its final state's files while a checkpoint is in flight;
    /// that checkpoint's pruning must keep them though no manifest lists them yet (the final
    /// checkpoint will). They were deleted, and the final checkpoint could not be restored.
    #[test]
    fn pruning_keeps_the_files_of_tasks_that_have_ended() {
        let dir = scratch();
        let store = LocalStore::new(&dir);
        let shared = dir.join("shared");
        std::fs::create_dir_all(&shared).expect("shared dir");
        let with_file = |file: &str| {
            let op = OperatorState { state: b"s".to_vec(), shared_files: vec![file.to_string()], ..Default::default() };
            let task = TaskState { operators: BTreeMap::from([(0, op)]), ..Default::default() };
            BTreeMap::from([("stage1-task0".to_string(), task)])
        };
        std::fs::write(shared.join("a.sst"), b"a").expect("a");
        store.write(1, "plan", &with_file("a.sst")).expect("write 1");
        // The ended task's final file, copied while checkpoint 2 is being written.
        std::fs::write(shared.join("final.sst"), b"f").expect("final");
        store.write(2, "plan", &with_file("a.sst")).expect("write 2");
        // Older than the newest manifest, whatever the clock's resolution.
        let older = std::time::SystemTime::now() - Duration::from_secs(60);
        for f in ["a.sst", "final.sst"] {
            let file = std::fs::File::options().write(true).open(shared.join(f)).expect("open");
            file.set_modified(older).expect("set mtime");
        }
        store.prune(3, &["final.sst".to_string()]).expect("prune");
        assert!(shared.join("final.sst").exists(), "an ended task's file was pruned");
        store.prune(3, &[]).expect("prune");
        assert!(!shared.join("final.sst").exists() && shared.join("a.sst").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

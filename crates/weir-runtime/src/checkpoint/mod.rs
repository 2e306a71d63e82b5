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

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

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
///
/// - 1: state by place (stage, task, operator in the chain); restores only into the plan that
///   wrote it, which the manifest's fingerprint names.
/// - 2: state by stable identity ([`crate::identity`]); the manifest lists every part of the
///   plan, and each is checked on its own on restore.
/// - 3: as 2, with small parts inside the manifest (`inline`, base64; up to 320 KiB) rather
///   than in files of their own (`file`), and parts' checksums by XXH64 (FNV-1a before). A
///   Weir that reads 2 but not 3 would find such an entry incomplete and fall back to an
///   older checkpoint: the version makes it refuse instead.
///
/// Every version listed here is still restored (`tests/fixtures/checkpoint-v<n>`).
pub const MANIFEST_VERSION: u64 = 3;

/// The file in a checkpoint's directory that makes it a savepoint ([`Checkpoints::export`]).
pub const SAVEPOINT: &str = "savepoint.json";

#[derive(Debug, Clone)]
pub struct CheckpointConfig {
    pub interval: Duration,
    /// Where the job's checkpoints are kept (`checkpoint.dir`, with the job's name).
    pub storage: std::sync::Arc<dyn weir_storage::Storage>,
    pub mode: CheckpointMode,
    pub timeout: Duration,
    pub retained: usize,
    /// Checkpoints that may fail in a row before the job fails.
    pub tolerable_failures: u32,
    /// What the job's plan keeps, checked against a checkpoint before it is restored.
    pub plan: PlanState,
}

/// What a plan keeps in checkpoints.
#[derive(Debug, Clone, Default)]
pub struct PlanState {
    /// The whole plan's fingerprint: a checkpoint of format version 1 (state by place)
    /// restores only into the plan it names.
    pub fingerprint: String,
    /// What every part's encoding depends on (max parallelism, state backend): another
    /// layout is refused whatever the parts.
    pub layout: String,
    /// Every stateful operator, scan and sink, by stable identity.
    pub parts: Vec<crate::identity::StatePart>,
    /// Flink's `execution.savepoint.ignore-unclaimed-state`: a restore drops the state of
    /// parts the plan no longer has, instead of refusing.
    pub ignore_unclaimed: bool,
    /// `execution.savepoint.rebuild` = 'all': every stateful operator with state in the
    /// checkpoint is rebuilt by replay, changed or not.
    pub rebuild_all: bool,
    /// The ids of the parts each INSERT uses ([`crate::identity::Identities::branches`]).
    pub branches: Vec<Vec<String>>,
    /// Scans that cannot read their input again, by id, and why: an operator fed by one is
    /// not rebuilt by replay.
    pub unreplayable: BTreeMap<String, String>,
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

impl OperatorState {
    /// What the state takes in the checkpoint: its own bytes and the shared files it needs.
    pub fn size(&self) -> u64 {
        self.state.len() as u64 + self.bytes_copied + self.bytes_referenced
    }
}

/// One task's state in a checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskState {
    /// A source task's position.
    pub source: Option<Vec<u8>>,
    /// Stateful operators, by their stable identity (format version 1: by their place in
    /// the task's chain, `"0"`, `"1"`…).
    pub operators: BTreeMap<String, OperatorState>,
    /// What a sink task pre-committed.
    pub sink: Option<Vec<u8>>,
    /// The identity of the scan or sink whose state `source` or `sink` is.
    pub owner: Option<String>,
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
    /// The task could not take its part of the checkpoint (an upload failed), and why: the
    /// checkpoint fails at once rather than at its timeout.
    pub declined: Option<String>,
}

/// A checkpoint read back for a restart.
#[derive(Debug, Clone, Default)]
pub struct Restored {
    pub epoch: u64,
    /// Its format version ([`MANIFEST_VERSION`]): how its parts are keyed.
    pub version: u64,
    pub tasks: BTreeMap<String, TaskState>,
    /// Scans (by id) that read again, up to their positions here, what the state rebuilt by
    /// replay was built from ([`crate::upgrade`]).
    pub replay: BTreeSet<String>,
    /// Sinks (by id) whose input is dropped until the first barrier: the output of a replay.
    pub suppress: BTreeSet<String>,
    /// Operators (by id) rebuilt by the replay: what they send a late-data table before the
    /// first barrier is dropped too.
    pub rebuilt: BTreeSet<String>,
}

impl Restored {
    /// The tasks of one kind (keys `<kind><index>`), by index.
    pub fn of_kind(&self, kind: &str) -> Vec<(usize, &TaskState)> {
        let mut old: Vec<(usize, &TaskState)> = self
            .tasks
            .iter()
            .filter_map(|(key, state)| Some((key.strip_prefix(kind)?.parse::<usize>().ok()?, state)))
            .collect();
        old.sort_by_key(|(i, _)| *i);
        old
    }

    /// The kind of the tasks that held a part (`holds`): their key without the index.
    pub fn kind_holding(&self, holds: impl Fn(&TaskState) -> bool) -> Option<&str> {
        let (key, _) = self.tasks.iter().find(|(_, state)| holds(state))?;
        Some(key.trim_end_matches(|c: char| c.is_ascii_digit()))
    }
}

/// Figures of one completed checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointStats {
    pub id: u64,
    pub duration_ms: u64,
    pub bytes_written: u64,
    pub bytes_referenced: u64,
    /// When it completed, in milliseconds since the Unix epoch: for people reading the
    /// history, never for results.
    pub completed_at_ms: u64,
}

/// A job's checkpoints so far, across its restarts: what its watchers see.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointHistory {
    /// The last 100 completed, oldest first.
    pub completed: Vec<CheckpointStats>,
    /// All completed and all failed (written unsuccessfully, or given up after the timeout).
    pub completed_count: u64,
    pub failed_count: u64,
    /// The last failure: the checkpoint's id and why.
    pub last_failure: Option<(u64, String)>,
}

impl CheckpointHistory {
    fn completed(&mut self, s: CheckpointStats) {
        self.completed.push(s);
        let excess = self.completed.len().saturating_sub(100);
        self.completed.drain(..excess);
        self.completed_count += 1;
    }

    fn failed(&mut self, id: u64, why: String) {
        self.failed_count += 1;
        self.last_failure = Some((id, why));
    }
}

/// Milliseconds since the Unix epoch, for timestamps people read.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Where checkpoints are kept: [`Checkpoints`] in a storage, or a worker's task store over
/// it.
pub trait CheckpointStore: Send + Sync {
    /// Write checkpoint `epoch` durably; it counts only once this returns.
    fn write(&self, epoch: u64, plan: &PlanState, tasks: &BTreeMap<String, TaskState>) -> Result<CheckpointStats>;
    /// The newest complete checkpoint whose files are intact (older ones are tried when the
    /// newest is damaged, with a warning), checked against `plan`
    /// ([`crate::upgrade`]): a checkpoint that does not fit is refused at once.
    fn latest(&self, plan: &PlanState) -> Result<Option<Restored>>;
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

/// FNV-1a, 64 bits: a stable checksum to detect damaged state files, and the hash of
/// identities and fingerprints.
pub(crate) fn checksum(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

mod savepoint;
mod store;

pub use store::Checkpoints;

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
    /// The identity of the scan or sink whose state the task's `source` or `sink` is.
    pub owner: Option<String>,
}

impl TaskCheckpoint {
    pub fn ack(&self, epoch: Option<u64>, mut state: TaskState) {
        if state.source.is_some() || state.sink.is_some() {
            state.owner = self.owner.clone();
        }
        let _ = self.acks.send(Ack { epoch, task: self.key.clone(), state, declined: None });
    }

    /// This task's part of checkpoint `epoch` cannot be taken.
    pub fn decline(&self, epoch: u64, why: String) {
        let ack = Ack { epoch: Some(epoch), task: self.key.clone(), state: TaskState::default(), declined: Some(why) };
        let _ = self.acks.send(ack);
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
    stats: std::sync::Arc<std::sync::Mutex<CheckpointHistory>>,
    mut replaying: watch::Receiver<usize>,
) -> Result<()> {
    // Source tasks replaying for a rebuilt operator ([`crate::upgrade`]): no barrier before
    // they have all caught up, and then one at once, the cut-over.
    let replay_over = |r: &watch::Receiver<usize>| *r.borrow() == 0;
    let mut finished: BTreeMap<String, TaskState> = BTreeMap::new();
    let mut pending: BTreeMap<u64, BTreeMap<String, TaskState>> = BTreeMap::new();
    let mut epoch = first_epoch;
    let mut next_trigger = tokio::time::Instant::now() + config.interval;
    let mut started: BTreeMap<u64, tokio::time::Instant> = BTreeMap::new();
    let mut stopping = false;
    let mut stop_pending = false;
    // The checkpoint the job stops after.
    let mut last: Option<u64> = None;
    let mut sources_gone = false;
    let mut failures = Failures { in_a_row: 0, config: &config, stats: &stats };
    // A checkpoint came due while the one before was still running: it starts as soon as
    // that one completes, not an interval later (Flink's behaviour, without a minimum pause),
    // so that a checkpoint slower than the interval once does not double the wait for the
    // output of the next.
    let mut overdue = false;
    loop {
        tokio::select! {
            // Stop with a checkpoint: the next barrier is the last.
            Ok(()) = replaying.changed(), if !replay_over(&replaying) => {
                if replay_over(&replaying) {
                    next_trigger = tokio::time::Instant::now();
                }
            }
            Some(()) = stop.recv(), if !stopping && replay_over(&replaying) => {
                stopping = true;
                // One checkpoint at a time (shared files of a running one must not look
                // unreferenced): the last barrier waits for the one in flight.
                if started.is_empty() {
                    if trigger.send(Trigger { epoch, stop: true }).is_err() {
                        sources_gone = true;
                        continue;
                    }
                    started.insert(epoch, tokio::time::Instant::now());
                    last = Some(epoch);
                    epoch += 1;
                } else {
                    stop_pending = true;
                }
            }
            _ = tokio::time::sleep_until(next_trigger), if !stopping && !sources_gone && replay_over(&replaying) => {
                // One checkpoint at a time; a late one is given up after the timeout.
                if let Some((&open, &at)) = started.iter().next() {
                    if at.elapsed() < config.timeout {
                        // Checked again then for the timeout.
                        next_trigger = tokio::time::Instant::now() + config.interval;
                        overdue = true;
                        continue;
                    }
                    started.remove(&open);
                    pending.remove(&open);
                    failures.failed(open, Some(format!("timed out after {:?}; abandoned", config.timeout)))?;
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
                overdue = false;
            }
            ack = acks.recv() => {
                let Some(ack) = ack else { return Ok(()) };
                match ack.epoch {
                    None => {
                        finished.insert(ack.task, ack.state);
                    }
                    Some(n) => {
                        if let Some(why) = ack.declined.filter(|_| started.contains_key(&n)) {
                            started.remove(&n);
                            pending.remove(&n);
                            failures.failed(n, Some(format!("task {} declined it: {why}", ack.task)))?;
                        } else if started.contains_key(&n) {
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
                    if complete(n, states, began, &config, &store, &stats, &committed, keep).await? {
                        failures.in_a_row = 0;
                        if last == Some(n) {
                            // The job stops after this one. Closing the channel tells sinks
                            // that ended before it (and wait for the final checkpoint, which
                            // holds their final pre-commits as this one does) that it was this.
                            return Ok(());
                        }
                    } else {
                        // `complete` recorded why.
                        failures.failed(n, None)?;
                    }
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
                if overdue && started.is_empty() {
                    overdue = false;
                    next_trigger = tokio::time::Instant::now();
                }
                if stop_pending && started.is_empty() {
                    stop_pending = false;
                    if trigger.send(Trigger { epoch, stop: true }).is_ok() {
                        started.insert(epoch, tokio::time::Instant::now());
                        last = Some(epoch);
                        epoch += 1;
                    }
                }
            }
        }
    }
}

/// Checkpoints failed since the last that completed. A job whose checkpoints keep failing
/// fails (and restarts from its latest checkpoint): its exactly-once output is not committed
/// meanwhile, and its sources cannot move on.
struct Failures<'a> {
    in_a_row: u32,
    config: &'a CheckpointConfig,
    stats: &'a std::sync::Mutex<CheckpointHistory>,
}

impl Failures<'_> {
    /// Checkpoint `n` failed: for `why` (logged and recorded; `None`: recorded already).
    fn failed(&mut self, n: u64, why: Option<String>) -> Result<()> {
        if let Some(why) = why {
            log::warn!("checkpoint {n} failed: {why}");
            if let Ok(mut h) = self.stats.lock() {
                h.failed(n, why);
            }
        }
        self.in_a_row += 1;
        if self.in_a_row <= self.config.tolerable_failures {
            return Ok(());
        }
        let last = self.stats.lock().ok().and_then(|h| h.last_failure.clone()).map(|(_, why)| why).unwrap_or_default();
        Err(WeirError::external(format!(
            "{} checkpoints in a row failed, more than 'checkpoint.tolerable-failures' = {} allows; the last: {last}",
            self.in_a_row, self.config.tolerable_failures
        )))
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
    stats: &std::sync::Arc<std::sync::Mutex<CheckpointHistory>>,
    committed: &watch::Sender<u64>,
    keep: Vec<String>,
) -> Result<bool> {
    let store = store.clone();
    let plan = config.plan.clone();
    let retained = config.retained;
    let written = tokio::task::spawn_blocking(move || {
        let s = store.write(n, &plan, &states)?;
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
            s.completed_at_ms = now_ms();
            if let Ok(mut history) = stats.lock() {
                history.completed(s);
            }
            let _ = committed.send(n);
            Ok(true)
        }
        Ok(Err(e)) if e.kind == weir_core::ErrorKind::Fenced => Err(e),
        Ok(Err(e)) => {
            log::warn!("checkpoint {n} failed: {e}");
            if let Ok(mut history) = stats.lock() {
                history.failed(n, e.to_string());
            }
            Ok(false)
        }
        Err(e) => {
            log::warn!("checkpoint {n} failed: {e}");
            if let Ok(mut history) = stats.lock() {
                history.failed(n, e.to_string());
            }
            Ok(false)
        }
    }
}

/// A stable fingerprint of a plan's text (FNV-1a).
pub fn fingerprint(text: &str) -> String {
    format!("{:016x}", checksum(text.as_bytes()))
}

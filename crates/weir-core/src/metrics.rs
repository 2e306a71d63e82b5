//! Counters one operator task keeps, readable while the job runs (`SHOW JOB`, the HTTP
//! endpoint's `/metrics` and REST API). Every field is a relaxed atomic: the task adds, any
//! thread reads, nothing waits.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Where an operator task sits in its job: what the REST API's plan and the metrics' labels
/// name it by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskPlace {
    /// The job vertex (a chain of fused operators, run by `parallelism` tasks).
    pub vertex: usize,
    /// The task's index among its vertex's tasks.
    pub task: usize,
    /// The operator's stable identity (what its checkpointed state is keyed by), empty for
    /// an operator without one.
    pub id: String,
}

#[derive(Debug)]
pub struct OperatorMetrics {
    pub name: String,
    pub place: TaskPlace,
    pub rows_in: AtomicU64,
    pub rows_out: AtomicU64,
    pub batches_in: AtomicU64,
    pub batches_out: AtomicU64,
    /// Malformed input records skipped under `'format.ignore-parse-errors' = 'true'`.
    pub records_skipped: AtomicU64,
    /// Rows that arrived after their window had fired, dropped.
    pub late_rows: AtomicU64,
    /// Latest watermark seen, `i64::MIN` if none yet.
    pub watermark: AtomicI64,
    /// Nanoseconds spent waiting for room in the output channel: how much downstream slowed
    /// this task down.
    pub backpressure_nanos: AtomicU64,
    /// Nanoseconds spent in the operator's own work on rows (a source: reading them).
    pub busy_nanos: AtomicU64,
    /// A task with several inputs: nanoseconds from the first input's barrier to the last's,
    /// at the last checkpoint (the inputs that delivered it are not read meanwhile).
    pub alignment_nanos: AtomicU64,
    /// Bytes of the operator's state in its last checkpoint (RocksDB: its live SST files).
    pub state_bytes: AtomicU64,
    /// A sink: checkpoints whose output it has published, and how long the last took.
    pub commits: AtomicU64,
    pub last_commit_nanos: AtomicU64,
    /// A source that knows its input's size: how much it has read, of how much
    /// ([`crate::Source::progress`]; 0 of 0 when it cannot tell).
    pub input_done: AtomicU64,
    pub input_total: AtomicU64,
    /// A source reading partitioned streams: each partition's position and end.
    pub partitions: Mutex<Vec<PartitionLag>>,
}

/// How far a source task is behind one partition of its input (a Kafka partition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    /// The next offset the task reads.
    pub position: i64,
    /// The partition's log end offset, as last seen by the client.
    pub end: i64,
}

impl PartitionLag {
    /// Records not read yet; never negative.
    pub fn lag(&self) -> i64 {
        (self.end - self.position).max(0)
    }
}

impl OperatorMetrics {
    pub fn new(name: impl Into<String>) -> Self {
        Self::at(name, TaskPlace::default())
    }

    pub fn at(name: impl Into<String>, place: TaskPlace) -> Self {
        Self {
            name: name.into(),
            place,
            rows_in: AtomicU64::new(0),
            rows_out: AtomicU64::new(0),
            batches_in: AtomicU64::new(0),
            batches_out: AtomicU64::new(0),
            records_skipped: AtomicU64::new(0),
            late_rows: AtomicU64::new(0),
            watermark: AtomicI64::new(i64::MIN),
            backpressure_nanos: AtomicU64::new(0),
            busy_nanos: AtomicU64::new(0),
            state_bytes: AtomicU64::new(0),
            alignment_nanos: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            last_commit_nanos: AtomicU64::new(0),
            input_done: AtomicU64::new(0),
            input_total: AtomicU64::new(0),
            partitions: Mutex::new(Vec::new()),
        }
    }

    pub fn record_in(&self, rows: usize) {
        self.rows_in.fetch_add(rows as u64, Relaxed);
        self.batches_in.fetch_add(1, Relaxed);
    }

    pub fn record_out(&self, rows: usize) {
        self.rows_out.fetch_add(rows as u64, Relaxed);
        self.batches_out.fetch_add(1, Relaxed);
    }

    pub fn add_busy(&self, since: std::time::Instant) {
        self.busy_nanos.fetch_add(since.elapsed().as_nanos() as u64, Relaxed);
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            name: self.name.clone(),
            place: self.place.clone(),
            rows_in: self.rows_in.load(Relaxed),
            rows_out: self.rows_out.load(Relaxed),
            batches_in: self.batches_in.load(Relaxed),
            batches_out: self.batches_out.load(Relaxed),
            records_skipped: self.records_skipped.load(Relaxed),
            late_rows: self.late_rows.load(Relaxed),
            watermark: Some(self.watermark.load(Relaxed)).filter(|w| *w != i64::MIN),
            backpressure_ms: self.backpressure_nanos.load(Relaxed) / 1_000_000,
            backpressure_nanos: self.backpressure_nanos.load(Relaxed),
            busy_nanos: self.busy_nanos.load(Relaxed),
            state_bytes: self.state_bytes.load(Relaxed),
            alignment_nanos: self.alignment_nanos.load(Relaxed),
            commits: self.commits.load(Relaxed),
            last_commit_nanos: self.last_commit_nanos.load(Relaxed),
            partitions: self.partitions.lock().map(|p| p.clone()).unwrap_or_default(),
            input_done: self.input_done.load(Relaxed),
            input_total: self.input_total.load(Relaxed),
        }
    }
}

/// A copy of [`OperatorMetrics`] at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsSnapshot {
    pub name: String,
    pub place: TaskPlace,
    pub rows_in: u64,
    pub rows_out: u64,
    pub batches_in: u64,
    pub batches_out: u64,
    pub records_skipped: u64,
    pub late_rows: u64,
    pub watermark: Option<i64>,
    pub backpressure_ms: u64,
    pub backpressure_nanos: u64,
    pub busy_nanos: u64,
    pub state_bytes: u64,
    pub alignment_nanos: u64,
    pub commits: u64,
    pub last_commit_nanos: u64,
    pub partitions: Vec<PartitionLag>,
    pub input_done: u64,
    pub input_total: u64,
}

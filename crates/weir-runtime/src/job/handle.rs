//! The handle a caller holds on a job: its state, its status, cancel and stop.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use weir_core::metrics::MetricsSnapshot;
use weir_core::{OperatorMetrics, Result, WeirError};

use crate::checkpoint::{CheckpointHistory, CheckpointStats};

use super::JobGraph;

#[derive(Debug, Clone)]
pub enum JobState {
    Running,
    Finished,
    Failed(WeirError),
    Cancelled,
    /// Stopped with a final checkpoint; the next start resumes there.
    Stopped,
}

impl JobState {
    pub fn name(&self) -> &'static str {
        match self {
            JobState::Running => "RUNNING",
            JobState::Finished => "FINISHED",
            JobState::Failed(_) => "FAILED",
            JobState::Cancelled => "CANCELLED",
            JobState::Stopped => "STOPPED",
        }
    }
}

/// A job at one moment: its state and every operator task's counters.
#[derive(Debug, Clone)]
pub struct JobStatus {
    pub id: u64,
    pub name: String,
    pub state: JobState,
    pub elapsed: Duration,
    pub operators: Vec<MetricsSnapshot>,
    /// Completed checkpoints, oldest first (the last 100).
    pub checkpoints: Vec<CheckpointStats>,
    /// All checkpoints completed and failed, and the last failure.
    pub checkpoint_counts: CheckpointHistory,
    /// Restarts after failures.
    pub restarts: u32,
    /// The failures of its attempts, oldest first (the last 20): what it restarted after,
    /// or failed of.
    pub exceptions: Vec<JobException>,
    /// Its vertices and edges.
    pub graph: JobGraph,
    /// When it started, in milliseconds since the Unix epoch (for people).
    pub started_at_ms: u64,
}

/// One failure of a job's attempt.
#[derive(Debug, Clone)]
pub struct JobException {
    pub at_ms: u64,
    pub error: WeirError,
    /// The job restarted from its latest checkpoint after it.
    pub restarted: bool,
}

impl JobStatus {
    /// Rows produced by the job's sources.
    pub fn rows_read(&self) -> u64 {
        self.operators.iter().filter(|o| o.name.starts_with("Source: ") || o.name == "Values").map(|o| o.rows_out).sum()
    }

    /// Rows that reached the job's sinks.
    pub fn rows_written(&self) -> u64 {
        self.operators.iter().filter(|o| o.name.starts_with("Sink: ")).map(|o| o.rows_in).sum()
    }

    /// How much of their input the sources that know its size have read, of how much
    /// (`None`: none knows).
    pub fn input_progress(&self) -> Option<(u64, u64)> {
        let known = self.operators.iter().filter(|o| o.input_total > 0);
        let (done, total) = known.fold((0, 0), |(d, t), o| (d + o.input_done.min(o.input_total), t + o.input_total));
        (total > 0).then_some((done, total))
    }

    /// Malformed records skipped by all sources of the job.
    pub fn records_skipped(&self) -> u64 {
        self.operators.iter().map(|o| o.records_skipped).sum()
    }
}

pub(super) struct JobInner {
    pub(super) id: u64,
    pub(super) name: String,
    /// The current attempt's metrics.
    pub(super) metrics: Mutex<Vec<Arc<OperatorMetrics>>>,
    pub(super) state: watch::Receiver<JobState>,
    pub(super) cancel: watch::Sender<bool>,
    pub(super) started: Instant,
    pub(super) finished: Mutex<Option<Duration>>,
    pub(super) checkpoints: Arc<Mutex<CheckpointHistory>>,
    pub(super) exceptions: Mutex<Vec<JobException>>,
    pub(super) graph: Mutex<JobGraph>,
    pub(super) started_at_ms: u64,
    /// Asks the current attempt's coordinator for a last checkpoint, after which it stops.
    pub(super) stop: Mutex<Option<mpsc::UnboundedSender<()>>>,
    pub(super) stop_requested: Arc<std::sync::atomic::AtomicBool>,
    pub(super) checkpointing: bool,
    /// Restarts after failures so far.
    pub(super) restarts: std::sync::atomic::AtomicU32,
}

/// A running (or finished) job. Cloning gives another handle to the same job.
#[derive(Clone)]
pub struct JobHandle {
    pub(super) inner: Arc<JobInner>,
}

impl JobHandle {
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn state(&self) -> JobState {
        self.inner.state.borrow().clone()
    }

    /// Ask the job to stop. Returns at once; `wait` returns when it has stopped.
    pub fn cancel(&self) {
        let _ = self.inner.cancel.send(true);
    }

    /// Stop after one last checkpoint, so that the next start resumes exactly there (its
    /// output up to there is published). Without checkpoints this is `cancel`.
    pub fn stop_with_checkpoint(&self) {
        self.inner.stop_requested.store(true, std::sync::atomic::Ordering::SeqCst);
        let sent = self.inner.stop.lock().ok().and_then(|s| s.as_ref().map(|s| s.send(()).is_ok())).unwrap_or(false);
        if !self.inner.checkpointing || !sent {
            self.cancel();
        }
    }

    /// Wait until the job stops: `Ok` if it finished or was cancelled, its error if it failed.
    pub async fn wait(&self) -> Result<()> {
        let mut state = self.inner.state.clone();
        let state = state
            .wait_for(|s| !matches!(s, JobState::Running))
            .await
            .map_err(|_| WeirError::internal("job supervisor vanished"))?
            .clone();
        match state {
            JobState::Failed(e) => Err(e),
            _ => Ok(()),
        }
    }

    pub fn status(&self) -> JobStatus {
        let elapsed = self.inner.finished.lock().ok().and_then(|f| *f).unwrap_or_else(|| self.inner.started.elapsed());
        JobStatus {
            id: self.inner.id,
            name: self.inner.name.clone(),
            state: self.state(),
            elapsed,
            operators: self.inner.metrics.lock().map(|m| m.iter().map(|m| m.snapshot()).collect()).unwrap_or_default(),
            restarts: self.inner.restarts.load(std::sync::atomic::Ordering::SeqCst),
            checkpoints: self.inner.checkpoints.lock().map(|c| c.completed.clone()).unwrap_or_default(),
            checkpoint_counts: self
                .inner
                .checkpoints
                .lock()
                .map(|c| CheckpointHistory { completed: Vec::new(), ..c.clone() })
                .unwrap_or_default(),
            exceptions: self.inner.exceptions.lock().map(|e| e.clone()).unwrap_or_default(),
            graph: self.inner.graph.lock().map(|g| g.clone()).unwrap_or_default(),
            started_at_ms: self.inner.started_at_ms,
        }
    }
}

impl JobInner {
    /// Record an attempt's failure for watchers (the last 20 are kept).
    pub(super) fn failed(&self, error: &WeirError, restarted: bool) {
        if let Ok(mut list) = self.exceptions.lock() {
            list.push(JobException { at_ms: crate::checkpoint::now_ms(), error: error.clone(), restarted });
            let excess = list.len().saturating_sub(20);
            list.drain(..excess);
        }
    }
}

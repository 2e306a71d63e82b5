//! Running a plan: building its tasks, supervising them, and the handle a caller holds.
//!
//! - `build`: the tasks of a plan (operator chains, channels, exchanges);
//! - `chain`: one task's fused operators and output;
//! - `branches`: the chains one source task feeds (several in a statement set);
//! - `tasks`: the source, merge and sink task loops;
//! - `attempt`: running, supervising and restarting a job;
//! - `handle`: what the caller holds.

mod attempt;
mod branches;
mod build;
mod chain;
mod graph;
mod handle;
mod tasks;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use weir_core::{Result, Sink, Split};

pub use attempt::{identities, sink_task_kind, spawn_job};
pub use graph::{Edge, JobGraph, Vertex};
pub use handle::{JobException, JobHandle, JobState, JobStatus};

// The submodules see each other's items through `super::*`.
use branches::*;
use build::*;
use chain::*;
use handle::*;
use tasks::*;

use crate::checkpoint::{CheckpointConfig, CheckpointStore, Restored};

pub(super) type Task = Pin<Box<dyn Future<Output = Result<()>> + Send>>;

/// How a job runs.
#[derive(Clone)]
pub struct JobOptions {
    /// Tasks per operator.
    pub parallelism: usize,
    /// A source task with no data for this long stops holding back the watermark.
    pub idle_timeout: Option<Duration>,
    /// Take checkpoints, into this store.
    pub checkpoint: Option<(CheckpointConfig, Arc<dyn CheckpointStore>)>,
    /// Start from this checkpoint: sources rewound, operator and sink state restored.
    pub restore: Option<Restored>,
    /// With checkpoints: restarts after failures, and the wait before the first (doubling).
    pub restart_attempts: u32,
    pub restart_backoff: Duration,
    /// Keep window state in RocksDB under this local directory (else in memory).
    pub rocksdb: Option<std::path::PathBuf>,
    /// How keyed state and hash exchanges cut keys into groups (`'pipeline.max-parallelism'`).
    pub key_groups: weir_state::KeyGroups,
}

impl Default for JobOptions {
    fn default() -> Self {
        Self {
            parallelism: 1,
            idle_timeout: None,
            checkpoint: None,
            restore: None,
            restart_attempts: 3,
            restart_backoff: Duration::from_secs(1),
            rocksdb: None,
            key_groups: weir_state::KeyGroups::default(),
        }
    }
}

/// Where a job's rows go: a name for metrics, whether sink tasks may run in parallel, and how
/// to make the sink of task `split`.
pub struct SinkSpec<'a> {
    pub name: String,
    /// The sink table's connector (part of the sink's identity in checkpoints).
    pub connector: String,
    pub parallel: bool,
    pub make: Box<dyn FnMut(Split) -> Result<Box<dyn Sink>> + Send + 'a>,
}

//! A task's checkpoints: written to its directory of the shared store like any job's, but
//! the one to restore is the one its committed Kafka offsets name, not the newest on disk
//! (a checkpoint written just before a crash, whose transaction never committed, is never
//! used: its outputs were aborted).

use std::collections::BTreeMap;
use std::sync::Arc;

use weir_core::Result;
use weir_runtime::checkpoint::{CheckpointStats, CheckpointStore, Checkpoints, PlanState, Restored, TaskState};

/// The task's committed checkpoint, from its consumer group.
pub type Committed = Arc<dyn Fn() -> Result<Option<u64>> + Send + Sync>;

pub struct TaskStore {
    local: Checkpoints,
    committed: Committed,
}

impl TaskStore {
    pub fn new(storage: Arc<dyn weir_storage::Storage>, committed: Committed) -> Self {
        Self { local: Checkpoints::new(storage), committed }
    }
}

impl CheckpointStore for TaskStore {
    fn write(&self, epoch: u64, plan: &PlanState, tasks: &BTreeMap<String, TaskState>) -> Result<CheckpointStats> {
        self.local.write(epoch, plan, tasks)
    }

    fn latest(&self, plan: &PlanState) -> Result<Option<Restored>> {
        match (self.committed)()? {
            None => Ok(None),
            Some(epoch) => self.local.load(epoch, plan).map(Some),
        }
    }

    /// Two at least: when checkpoint `n` is written, `n - 1` is committed, but `n` may not
    /// be yet.
    fn prune(&self, retained: usize, keep: &[String]) -> Result<()> {
        self.local.prune(retained.max(2), keep)
    }

    fn clear(&self) -> Result<()> {
        self.local.clear()
    }

    fn claim(&self) -> Result<()> {
        self.local.claim()
    }
}

//! The connectors one task runs with: a Kafka table's source reads only the task's partition,
//! a repartition table reads its partition of the topic, and every source tells the task's
//! sink the offsets it had at each checkpoint (they go into the task's transaction).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use weir_core::{ConnectorFactory, LookupFactory, Op, Result, Sink, Source, Split, TableDef, Watermark};

use super::source::RepartitionSource;
use super::topology::REPARTITION;

/// Offsets per (topic, partition).
pub type Offsets = BTreeMap<(String, i32), i64>;

/// What a task's sources tell its sink: their offsets at each checkpoint, and at their end.
#[derive(Default)]
pub struct TaskShared {
    at: Mutex<BTreeMap<u64, Offsets>>,
    ended: Mutex<Offsets>,
}

impl TaskShared {
    fn record(&self, epoch: Option<u64>, offsets: Vec<(String, i32, i64)>) {
        let mut ended;
        let mut at;
        let target = match epoch {
            Some(e) => {
                at = self.at.lock().unwrap_or_else(|p| p.into_inner());
                at.entry(e).or_default()
            }
            None => {
                ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
                &mut *ended
            }
        };
        for (topic, partition, offset) in offsets {
            target.insert((topic, partition), offset);
        }
    }

    /// The offsets of checkpoint `epoch` (forgetting older ones); for the final checkpoint,
    /// the ends.
    pub fn take(&self, epoch: u64, last: bool) -> Offsets {
        let mut at = self.at.lock().unwrap_or_else(|p| p.into_inner());
        let mut offsets = at.remove(&epoch).unwrap_or_default();
        at.retain(|e, _| *e > epoch);
        if last {
            offsets.extend(self.ended.lock().unwrap_or_else(|p| p.into_inner()).clone());
        }
        offsets
    }
}

pub struct TaskConnectors {
    pub inner: Arc<dyn ConnectorFactory>,
    /// The task's partition number, of `tasks`.
    pub partition: usize,
    pub tasks: usize,
    /// Tasks of each upstream sub-topology, by its id.
    pub upstream_tasks: BTreeMap<usize, usize>,
    pub shared: Arc<TaskShared>,
}

impl ConnectorFactory for TaskConnectors {
    fn validate(&self, table: &TableDef) -> Result<()> {
        self.inner.validate(table)
    }

    fn source(&self, table: &TableDef, projection: Option<Vec<usize>>, _split: Split) -> Result<Box<dyn Source>> {
        let inner: Box<dyn Source> = if table.options.get("connector") == Some(REPARTITION) {
            let upstream: usize = table.options.get("upstream").and_then(|u| u.parse().ok()).unwrap_or(0);
            let tasks = self.upstream_tasks.get(&upstream).copied().unwrap_or(1);
            Box::new(RepartitionSource::new(table, self.partition as i32, tasks)?)
        } else {
            // The i-th partition of the topic goes to task i of as many tasks as partitions.
            self.inner.source(table, projection, Split { index: self.partition, count: self.tasks })?
        };
        Ok(Box::new(Tracked { inner, shared: self.shared.clone() }))
    }

    fn sink(&self, table: &TableDef, schema: SchemaRef, split: Split) -> Result<Box<dyn Sink>> {
        self.inner.sink(table, schema, split)
    }

    fn source_rewinds(&self, table: &TableDef) -> bool {
        self.inner.source_rewinds(table)
    }

    fn source_bounded(&self, table: &TableDef) -> bool {
        self.inner.source_bounded(table)
    }

    fn source_replays(&self, _table: &TableDef) -> std::result::Result<(), String> {
        Err("the processes of 'weir worker' do not rebuild state by replay (not built)".into())
    }

    fn lookup_source(&self, table: &TableDef) -> bool {
        self.inner.lookup_source(table)
    }

    fn lookup(&self, table: &TableDef, projection: Option<Vec<usize>>, keys: Vec<usize>) -> Result<LookupFactory> {
        self.inner.lookup(table, projection, keys)
    }

    fn source_changelog(&self, table: &TableDef) -> weir_core::Changelog {
        self.inner.source_changelog(table)
    }
}

/// A source whose offsets are recorded at each checkpoint and at its end.
struct Tracked {
    inner: Box<dyn Source>,
    shared: Arc<TaskShared>,
}

#[async_trait]
impl Source for Tracked {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        let next = self.inner.next_batch().await?;
        if next.is_none() {
            self.shared.record(None, self.inner.offsets());
        }
        Ok(next)
    }

    fn cancel_safe(&self) -> bool {
        self.inner.cancel_safe()
    }

    fn records_skipped(&self) -> u64 {
        self.inner.records_skipped()
    }

    fn checkpoint_taken(&mut self, epoch: u64) {
        self.shared.record(Some(epoch), self.inner.offsets());
        self.inner.checkpoint_taken(epoch);
    }

    fn checkpoint_complete(&mut self, epoch: u64) -> Result<()> {
        self.inner.checkpoint_complete(epoch)
    }

    fn partitions(&self) -> Vec<u32> {
        self.inner.partitions()
    }

    fn batch_partition(&self) -> Option<u32> {
        self.inner.batch_partition()
    }

    fn batch_ops(&self) -> Option<Vec<Op>> {
        self.inner.batch_ops()
    }

    fn position(&self) -> Option<Vec<u8>> {
        self.inner.position()
    }

    fn seek(&mut self, position: &[u8]) -> Result<()> {
        self.inner.seek(position)?;
        log::debug!("restored at offsets {:?}", self.inner.offsets());
        Ok(())
    }

    fn offsets(&self) -> Vec<(String, i32, i64)> {
        self.inner.offsets()
    }

    fn watermark(&self) -> Option<Watermark> {
        self.inner.watermark()
    }
}

//! Where connectors and the runtime meet. Each trait has defaults so that an implementation
//! overrides only what it does differently.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use crate::{Barrier, Chunk, Message, Result, TableDef, Watermark};

/// A stream of batches read from outside. A bounded source returns `None` at its end.
#[async_trait]
pub trait Source: Send {
    /// Schema of the batches returned (the table's columns, after the projection given at
    /// creation).
    fn schema(&self) -> SchemaRef;

    /// The next batch, or `None` at the end of a bounded input.
    async fn next_batch(&mut self) -> Result<Option<RecordBatch>>;

    /// Malformed records skipped so far under the table's parse-error policy.
    fn records_skipped(&self) -> u64 {
        0
    }
}

/// A stateless or stateful step between a source and a sink. Driven one message at a time;
/// what it emits goes into `out`, in order.
pub trait Operator: Send {
    /// One line for `EXPLAIN` and metrics.
    fn name(&self) -> String;

    fn process_chunk(&mut self, chunk: Chunk, out: &mut Vec<Message>) -> Result<()>;

    fn process_watermark(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        out.push(Message::Watermark(watermark));
        Ok(())
    }

    /// Snapshot state for `barrier` (nothing for stateless operators), then forward it.
    fn process_barrier(&mut self, barrier: Barrier, out: &mut Vec<Message>) -> Result<()> {
        out.push(Message::Barrier(barrier));
        Ok(())
    }

    /// The input ended: emit what is still pending. `End` itself is forwarded by the runtime.
    fn finish(&mut self, _out: &mut Vec<Message>) -> Result<()> {
        Ok(())
    }

    /// Rows dropped so far because they arrived after their window had fired.
    fn late_rows(&self) -> u64 {
        0
    }

    /// True once the operator will emit nothing more (a satisfied `LIMIT`), so that the
    /// runtime can end the stream early and stop its sources.
    fn is_done(&self) -> bool {
        false
    }
}

/// Where a job's rows go.
#[async_trait]
pub trait Sink: Send {
    async fn write_chunk(&mut self, chunk: Chunk) -> Result<()>;

    async fn on_watermark(&mut self, _watermark: Watermark) -> Result<()> {
        Ok(())
    }

    /// Pre-commit: make everything written before `barrier` durable and remember how to
    /// publish it (the first phase of a two-phase commit).
    async fn on_barrier(&mut self, _barrier: Barrier) -> Result<()> {
        Ok(())
    }

    /// Checkpoint `epoch` completed everywhere: publish what was pre-committed for it.
    async fn commit(&mut self, _epoch: u64) -> Result<()> {
        Ok(())
    }

    /// The input ended: flush and publish everything.
    async fn finish(&mut self) -> Result<()>;
}

/// Which part of a source one task reads: task `index` of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    pub index: usize,
    pub count: usize,
}

impl Split {
    pub const WHOLE: Split = Split { index: 0, count: 1 };
}

/// Builds the sources and sinks that a table's `'connector'` option names.
pub trait ConnectorFactory: Send + Sync {
    /// Check a table's options at `CREATE TABLE` time, before any job uses it.
    fn validate(&self, table: &TableDef) -> Result<()>;

    /// Source task `split.index` of `split.count` reading `table`, returning only the columns
    /// in `projection` (all if `None`). The splits of a table together read it exactly once.
    fn source(&self, table: &TableDef, projection: Option<Vec<usize>>, split: Split) -> Result<Box<dyn Source>>;

    /// Sink task `split.index` of `split.count` writing batches with `schema` into `table`.
    fn sink(&self, table: &TableDef, schema: SchemaRef, split: Split) -> Result<Box<dyn Sink>>;

    /// Whether sink tasks can run in parallel; if not, all rows go to one sink task (a console
    /// shows one stream of lines).
    fn parallel_sink(&self, _table: &TableDef) -> bool {
        true
    }
}

pub type SharedConnectorFactory = Arc<dyn ConnectorFactory>;

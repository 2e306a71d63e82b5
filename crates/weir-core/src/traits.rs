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

    /// Whether a `next_batch` call may be dropped while it waits (at an `.await`) without
    /// losing or repeating anything: it takes records only once it returns them. A source
    /// that waits for data (Kafka) should be, so that the task can take checkpoint barriers
    /// while there is nothing to read; the others are read to the next batch first.
    fn cancel_safe(&self) -> bool {
        false
    }

    /// Malformed records skipped so far under the table's parse-error policy.
    fn records_skipped(&self) -> u64 {
        0
    }

    /// Checkpoint `epoch` took this source's `position` just now.
    fn checkpoint_taken(&mut self, _epoch: u64) {}

    /// Checkpoint `epoch` is complete: a source may tell its system how far it has read
    /// (a Kafka consumer group's offsets, for monitoring; the checkpoint stays the truth).
    fn checkpoint_complete(&mut self, _epoch: u64) -> Result<()> {
        Ok(())
    }

    /// The partitions this source task reads, when it reads several streams whose event
    /// times advance separately (Kafka partitions): watermarks are then kept per partition.
    fn partitions(&self) -> Vec<u32> {
        Vec::new()
    }

    /// How much of a bounded input this task has read, of how much, in any unit (files: parts
    /// in thousandths); `None` when it cannot tell (an unbounded stream).
    fn progress(&self) -> Option<(u64, u64)> {
        None
    }

    /// How far this task is behind each partition it reads (for metrics; called about once
    /// a second while the job is watched, so it must not wait on the network).
    fn partition_lag(&self) -> Vec<crate::metrics::PartitionLag> {
        Vec::new()
    }

    /// The partition the last batch came from (each batch comes from one).
    fn batch_partition(&self) -> Option<u32> {
        None
    }

    /// The ops of the last batch's rows, for a source that reads a changelog (a Kafka topic
    /// of Debezium events); `None`: every row is an insert.
    fn batch_ops(&self) -> Option<Vec<crate::Op>> {
        None
    }

    /// Where this source is: everything returned so far is before it. Recorded in each
    /// checkpoint; `None` if the source cannot rewind (then checkpoints are refused).
    fn position(&self) -> Option<Vec<u8>> {
        None
    }

    /// Continue from a position `position()` gave, before the first `next_batch`.
    fn seek(&mut self, _position: &[u8]) -> Result<()> {
        Err(crate::WeirError::not_supported("restoring this source from a checkpoint"))
    }

    /// Kafka sources: the next offset to read of each partition read, as (topic, partition,
    /// offset). A worker's task commits them in its transaction with each checkpoint.
    fn offsets(&self) -> Vec<(String, i32, i64)> {
        Vec::new()
    }

    /// A source that carries event time itself (a repartition topic's watermark markers):
    /// the watermark after the last batch, which the task sends on when it advances. A
    /// batch without rows may come just to move it.
    fn watermark(&self) -> Option<crate::Watermark> {
        None
    }

    /// Continue from a checkpoint taken at another parallelism: `positions` are those of
    /// every task of the earlier run, and each task of this run (all given the same ones)
    /// takes its share of what they had left, so that together they read it once.
    fn seek_rescaled(&mut self, _positions: &[&[u8]]) -> Result<()> {
        Err(crate::WeirError::not_supported("restoring this source at another parallelism than its checkpoint's"))
    }

    /// Replay (an operator rebuilt after its SQL changed): read again, from where the table
    /// starts, what an earlier run had read up to `positions` (those of every task of that
    /// run, as for [`Source::seek_rescaled`]; each task takes its share), and nothing past
    /// them. Called before the first `next_batch`; once [`Source::replayed`], the runtime
    /// calls `seek_rescaled(positions)` and the source goes on from there.
    fn replay_to(&mut self, _positions: &[&[u8]]) -> Result<()> {
        Err(crate::WeirError::not_supported("reading this source's input a second time"))
    }

    /// Everything up to the replay's bound has been returned.
    fn replayed(&self) -> bool {
        true
    }
}

/// Work a snapshot leaves that may run on another thread while the operator goes on
/// (copying new RocksDB files to checkpoint storage).
pub type SnapshotUpload = Box<dyn FnOnce() -> Result<()> + Send>;

/// One operator's state at a barrier.
pub struct OperatorSnapshot {
    /// What [`Operator::restore`] takes back.
    pub state: Vec<u8>,
    /// Files the state needs in the checkpoints' shared directory: kept while a retained
    /// checkpoint names them.
    pub shared_files: Vec<String>,
    /// Bytes copied for this snapshot, and bytes it refers to (copied now or before).
    pub bytes_copied: u64,
    pub bytes_referenced: u64,
    /// Runs off the task's thread; the checkpoint counts for the task only once it has
    /// succeeded.
    pub upload: Option<SnapshotUpload>,
}

impl OperatorSnapshot {
    /// State that is all in its bytes (memory state).
    pub fn bytes(state: Vec<u8>) -> Self {
        Self { state, shared_files: Vec::new(), bytes_copied: 0, bytes_referenced: 0, upload: None }
    }
}

/// A stateless or stateful step between a source and a sink. Driven one message at a time;
/// what it emits goes into `out`, in order.
pub trait Operator: Send {
    /// One line for `EXPLAIN` and metrics.
    fn name(&self) -> String;

    fn process_chunk(&mut self, chunk: Chunk, out: &mut Vec<Message>) -> Result<()>;

    /// A chunk from input `input` of an operator with several inputs (a join: 0 = left,
    /// 1 = right). Single-input operators only implement `process_chunk`.
    fn process_input(&mut self, input: usize, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        let _ = input;
        self.process_chunk(chunk, out)
    }

    fn process_watermark(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        out.push(Message::Watermark(watermark));
        Ok(())
    }

    /// Forward a checkpoint barrier (after the runtime has taken `snapshot`).
    fn process_barrier(&mut self, barrier: Barrier, out: &mut Vec<Message>) -> Result<()> {
        out.push(Message::Barrier(barrier));
        Ok(())
    }

    /// Told once, before any chunk, by a source task that reads several partitions: which,
    /// and after how long without data a partition stops holding back the watermark.
    fn source_partitions(&mut self, _partitions: &[u32], _idle_timeout: Option<std::time::Duration>) {}

    /// Rows found late since the last call, to be written to the source table's
    /// `'late-data.table'` (only operators planned with one return any).
    fn drain_late_rows(&mut self) -> Vec<RecordBatch> {
        Vec::new()
    }

    /// The operator's state at a barrier, for the checkpoint (`None`: stateless). Everything
    /// the checkpoint needs of it comes in this one value, so that no path through the
    /// runtime (a barrier, a task's end) can take the bytes and forget the files.
    fn snapshot(&mut self) -> Result<Option<OperatorSnapshot>> {
        Ok(None)
    }

    /// Take back the state `snapshot` gave, before any message: one snapshot, or at another
    /// parallelism those of every earlier task whose key groups this task now owns in part.
    /// An operator without keyed state takes exactly one ([`single_state`]).
    fn restore(&mut self, _states: &[&[u8]]) -> Result<()> {
        Err(crate::WeirError::internal(format!("operator {} has no state to restore", self.name())))
    }

    /// Every task of input `input` of a two-input operator has ended, the other input goes
    /// on (a lookup join's table is loaded). Not called for the last input: `finish` is.
    fn input_ended(&mut self, _input: usize, _out: &mut Vec<Message>) -> Result<()> {
        Ok(())
    }

    /// When the operator wants [`Operator::on_timer`] called if nothing comes first (the
    /// wall clock's watermark of processing-time windows on a quiet stream). `None` by
    /// default: never.
    fn next_timer(&self) -> Option<std::time::Instant> {
        None
    }

    /// The time [`Operator::next_timer`] gave has come; what it emits goes down the chain.
    fn on_timer(&mut self, _out: &mut Vec<Message>) -> Result<()> {
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

/// The one snapshot an operator without keyed state restores from; several (a restore at
/// another parallelism) are refused, naming the operator.
pub fn single_state<'a>(states: &[&'a [u8]], operator: &str) -> Result<&'a [u8]> {
    match states {
        [one] => Ok(one),
        _ => Err(crate::WeirError::not_supported(format!(
            "restoring {operator} from a checkpoint taken at another parallelism"
        ))),
    }
}

/// Where a job's rows go.
#[async_trait]
pub trait Sink: Send {
    async fn write_chunk(&mut self, chunk: Chunk) -> Result<()>;

    async fn on_watermark(&mut self, _watermark: Watermark) -> Result<()> {
        Ok(())
    }

    /// When the sink wants [`Sink::on_timer`] called if nothing else comes first (a buffer
    /// to flush by age on a quiet stream). `None` by default: never.
    fn next_timer(&self) -> Option<std::time::Instant> {
        None
    }

    /// The time [`Sink::next_timer`] asked for has come.
    async fn on_timer(&mut self) -> Result<()> {
        Ok(())
    }

    /// Pre-commit at barrier `epoch`: make everything written before it durable, and return
    /// what is needed to publish it (the first phase of a two-phase commit). This goes into
    /// checkpoint `epoch`.
    async fn pre_commit(&mut self, _epoch: u64) -> Result<Option<Vec<u8>>> {
        Ok(None)
    }

    /// The newest checkpoint this sink pre-committed and has not yet been told is complete,
    /// when its final pre-commit must come after that commit (a database transaction would
    /// wait on the rows the earlier one holds locked). The runtime then waits for the
    /// checkpoint, up to its timeout, before [`Sink::pre_commit_final`]. `None` by default.
    fn awaiting_commit(&self) -> Option<u64> {
        None
    }

    /// Checkpoint `epoch` completed everywhere: publish what was pre-committed up to it.
    async fn commit(&mut self, _epoch: u64) -> Result<()> {
        Ok(())
    }

    /// The end of the input, when the job takes checkpoints: pre-commit the rows written
    /// since the last barrier and return what committing them needs. They are committed
    /// (`commit`) once the job's final checkpoint, taken when every task has ended, is
    /// complete; a restart from that checkpoint finishes the commit (`restore`). `None`, the
    /// default: nothing to commit that way, and `finish` publishes whatever is left.
    async fn pre_commit_final(&mut self) -> Result<Option<Vec<u8>>> {
        Ok(None)
    }

    /// Before any row, after a restart from checkpoint `epoch`: finish publishing what that
    /// checkpoint pre-committed (`state` is what `pre_commit` returned, if anything) and
    /// discard what attempts after it wrote. Must be idempotent: a restore can be cut short.
    async fn restore(&mut self, _epoch: u64, _state: Option<&[u8]>) -> Result<()> {
        Ok(())
    }

    /// [`Sink::restore`] from a checkpoint taken at another parallelism: `old` holds the
    /// states of the earlier tasks that fall to this one (by index), with their index; every
    /// earlier task falls to exactly one. By default, a sink without state restores as from
    /// nothing; one with state refuses.
    async fn restore_rescaled(&mut self, epoch: u64, old: &[(usize, Option<&[u8]>)]) -> Result<()> {
        if old.iter().any(|(_, s)| s.is_some()) {
            return Err(crate::WeirError::not_supported(
                "restoring this sink from a checkpoint taken at another parallelism",
            ));
        }
        self.restore(epoch, None).await
    }

    /// The input ended: flush and publish everything.
    async fn finish(&mut self) -> Result<()>;
}

/// A table read by key as a stream asks (a database table in a lookup join).
pub trait Lookup: Send {
    /// The rows whose key columns equal a row of `keys` (one row per distinct key, no
    /// NULLs): the rows found, and for each the row of `keys` it belongs to.
    fn lookup(&mut self, keys: &RecordBatch) -> Result<(RecordBatch, Vec<u32>)>;
}

/// Makes a [`Lookup`] for each task that needs one.
pub type LookupFactory = Arc<dyn Fn() -> Result<Box<dyn Lookup>> + Send + Sync>;

/// What a sink delivers when its job takes checkpoints, as `EXPLAIN` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivered {
    /// Each row's effect once: a two-phase commit, or idempotent writes by key.
    ExactlyOnce,
    /// A replay writes rows again.
    AtLeastOnce,
    /// Nothing is promised (a console).
    None,
}

impl Delivered {
    pub fn name(self) -> &'static str {
        match self {
            Delivered::ExactlyOnce => "exactly-once",
            Delivered::AtLeastOnce => "at-least-once",
            Delivered::None => "none",
        }
    }
}

/// A sink's guarantee and what it rests on.
#[derive(Debug, Clone)]
pub struct SinkGuarantee {
    pub delivered: Delivered,
    /// The mechanism, in a few words ("Kafka transactions committed with the checkpoint").
    pub rests_on: String,
    /// Output is visible only once its checkpoint completes.
    pub transactional: bool,
    /// Rows are written by a key: a replay rewrites each key's value.
    pub by_key: bool,
    /// What a reader needs to see only committed output.
    pub readers: Option<String>,
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

    /// Whether a sink of `table` takes an input carrying `changelog`, whose rows are
    /// identified by the `unique_key` columns if known. By default only appended rows: a sink
    /// that can apply updates and deletes says so.
    fn check_sink_input(
        &self,
        table: &TableDef,
        changelog: &crate::Changelog,
        _unique_key: Option<&[usize]>,
    ) -> Result<()> {
        if changelog.is_append_only() {
            return Ok(());
        }
        Err(crate::WeirError::not_supported(format!(
            "writing an updating result ({}) into table '{}' (connector '{}'): it takes only appended rows",
            changelog.describe(),
            table.name,
            table.options.get("connector").unwrap_or("?")
        )))
    }

    /// Whether the source of `table` can rewind to a checkpoint's position
    /// ([`Source::position`]): every built-in one can. A source that cannot (a socket, a
    /// queue that forgets what it delivered) says so, and an exactly-once job reading it is
    /// refused before it starts instead of failing at its first checkpoint.
    fn source_rewinds(&self, _table: &TableDef) -> bool {
        true
    }

    /// Whether the source of `table` ends (a file, a bounded Kafka read): a lookup join
    /// loads such a table whole.
    fn source_bounded(&self, _table: &TableDef) -> bool {
        false
    }

    /// Whether the source of `table` can read again what an earlier run read
    /// ([`Source::replay_to`]), so that an operator whose state cannot be carried over is
    /// rebuilt; if not, why (one phrase, after "it cannot be read again:").
    fn source_replays(&self, table: &TableDef) -> std::result::Result<(), String> {
        Err(format!(
            "the '{}' connector cannot read its input a second time",
            table.options.get("connector").unwrap_or("?")
        ))
    }

    /// Whether a lookup join asks `table` for the rows of each key as they are needed (a
    /// database table) instead of loading it whole.
    fn lookup_source(&self, _table: &TableDef) -> bool {
        false
    }

    /// What looks up rows of `table` (its `projection` columns, all if `None`) by the `keys`
    /// columns (indices into the projected columns).
    fn lookup(&self, table: &TableDef, _projection: Option<Vec<usize>>, _keys: Vec<usize>) -> Result<LookupFactory> {
        Err(crate::WeirError::not_supported(format!("looking up rows of table '{}' by key", table.name)))
    }

    /// What the source of `table` reads: appended rows (the default), or a changelog.
    fn source_changelog(&self, _table: &TableDef) -> crate::Changelog {
        crate::Changelog::AppendOnly
    }

    /// What a sink of `table` guarantees when the job takes checkpoints.
    fn sink_guarantee(&self, _table: &TableDef) -> SinkGuarantee {
        SinkGuarantee {
            delivered: Delivered::None,
            rests_on: "nothing: the sink takes no part in checkpoints".into(),
            transactional: false,
            by_key: false,
            readers: None,
        }
    }

    /// Whether sink tasks can run in parallel; if not, all rows go to one sink task (a console
    /// shows one stream of lines).
    fn parallel_sink(&self, _table: &TableDef) -> bool {
        true
    }
}

pub type SharedConnectorFactory = Arc<dyn ConnectorFactory>;

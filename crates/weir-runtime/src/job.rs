//! Running a plan: building its tasks, supervising them, and the handle a caller holds.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use weir_core::metrics::MetricsSnapshot;
use weir_core::{
    Chunk, ConnectorFactory, Message, Operator, OperatorMetrics, Result, Sink, Source, Split, Watermark, WeirError,
};

use crate::checkpoint::{
    Ack, CheckpointConfig, CheckpointMode, CheckpointStats, CheckpointStore, OperatorState, Restored, TaskCheckpoint,
    TaskState, Trigger,
};
use crate::exchange::Partitioning;
use crate::merge::InputMerger;
use crate::plan::{InstanceContext, Node, OperatorSpec};
use crate::values::ValuesSource;
use crate::CHANNEL_CAPACITY;

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
    /// Restarts after failures.
    pub restarts: u32,
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

    /// Malformed records skipped by all sources of the job.
    pub fn records_skipped(&self) -> u64 {
        self.operators.iter().map(|o| o.records_skipped).sum()
    }
}

struct JobInner {
    id: u64,
    name: String,
    /// The current attempt's metrics.
    metrics: Mutex<Vec<Arc<OperatorMetrics>>>,
    state: watch::Receiver<JobState>,
    cancel: watch::Sender<bool>,
    started: Instant,
    finished: Mutex<Option<Duration>>,
    checkpoints: Arc<Mutex<Vec<CheckpointStats>>>,
    /// Asks the current attempt's coordinator for a last checkpoint, after which it stops.
    stop: Mutex<Option<mpsc::UnboundedSender<()>>>,
    stop_requested: Arc<std::sync::atomic::AtomicBool>,
    checkpointing: bool,
    /// Restarts after failures so far.
    restarts: std::sync::atomic::AtomicU32,
}

/// A running (or finished) job. Cloning gives another handle to the same job.
#[derive(Clone)]
pub struct JobHandle {
    inner: Arc<JobInner>,
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
            checkpoints: self.inner.checkpoints.lock().map(|c| c.clone()).unwrap_or_default(),
        }
    }
}

type Task = Pin<Box<dyn Future<Output = Result<()>> + Send>>;

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
        }
    }
}

/// Where a job's rows go: a name for metrics, whether sink tasks may run in parallel, and how
/// to make the sink of task `split`.
pub struct SinkSpec<'a> {
    pub name: String,
    pub parallel: bool,
    pub make: Box<dyn FnMut(Split) -> Result<Box<dyn Sink>> + Send + 'a>,
}

/// Builds the tasks of a plan.
struct Builder<'a> {
    connectors: &'a dyn ConnectorFactory,
    options: JobOptions,
    tasks: Vec<(String, Task)>,
    metrics: Vec<Arc<OperatorMetrics>>,
    /// Stages built so far: part of each task's checkpoint key, deterministic for a plan.
    stages: usize,
    /// Checkpointing: where tasks acknowledge barriers, and the keys of every task.
    acks: Option<mpsc::UnboundedSender<Ack>>,
    trigger: Option<watch::Receiver<Trigger>>,
    /// Checkpoints completed (sources tell their systems, e.g. Kafka consumer groups).
    committed: Option<watch::Receiver<u64>>,
    keys: Vec<String>,
    /// Late rows of window operators, by late-data table: every task's channel.
    late: std::collections::BTreeMap<String, (Arc<weir_core::TableDef>, Vec<mpsc::Receiver<Message>>)>,
}

impl Builder<'_> {
    /// A task's part in checkpoints, and its restored state.
    fn checkpoint_of(&mut self, key: String) -> (Option<TaskCheckpoint>, Option<TaskState>) {
        let restored = self.options.restore.as_ref().and_then(|r| r.tasks.get(&key).cloned());
        let cp = self.acks.clone().map(|acks| TaskCheckpoint { key: key.clone(), acks });
        self.keys.push(key);
        (cp, restored)
    }

    /// RocksDB state: the local working root of this job, and the checkpoints' shared files.
    fn rocksdb_dirs(&self) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
        let local = self.options.rocksdb.clone()?;
        let shared = match &self.options.checkpoint {
            Some((config, _)) => config.dir.join("shared"),
            None => local.join("shared"),
        };
        Some((local, shared))
    }

    fn aligned(&self) -> bool {
        self.options.checkpoint.as_ref().is_none_or(|(c, _)| c.mode == CheckpointMode::ExactlyOnce)
    }

    fn metrics(&mut self, name: String) -> Arc<OperatorMetrics> {
        let m = Arc::new(OperatorMetrics::new(name));
        self.metrics.push(m.clone());
        m
    }

    /// One task merging `inputs` (watermarks, barriers aligned); returns its output.
    fn merge_into_one(
        &mut self,
        key: &str,
        name: &str,
        inputs: Vec<mpsc::Receiver<Message>>,
    ) -> mpsc::Receiver<Message> {
        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
        let (checkpoint, _) = self.checkpoint_of(key.to_string());
        let chain = Chain {
            ops: Vec::new(),
            output: Output::Forward(tx),
            metrics: None,
            checkpoint,
            extra: TaskState::default(),
            late: Vec::new(),
            acking: None,
        };
        let aligned = self.aligned();
        self.tasks.push((name.to_string(), Box::pin(run_merge(inputs, chain, aligned, usize::MAX))));
        rx
    }

    /// Tasks computing `node`, `parallelism` of each. Without `exchange`, returns the channel
    /// each task's output arrives on, by task index (`[task][0]`). With an exchange to `n`
    /// tasks of the next stage, returns what each of those receives (`[next task][task]`).
    fn build(
        &mut self,
        node: &Node,
        exchange: Option<(&Partitioning, usize)>,
    ) -> Result<Vec<Vec<mpsc::Receiver<Message>>>> {
        // The operators above the node that starts the task, bottom up. An operator that needs
        // all rows in one task starts a task of its own, fed by all tasks of its input.
        let mut specs: Vec<&OperatorSpec> = Vec::new();
        let mut start = node;
        let mut gather: Option<&Node> = None;
        while let Node::Operator { spec, input } = start {
            specs.push(spec);
            if spec.single_task() {
                gather = Some(input);
                break;
            }
            start = input;
        }
        if let Node::Join { spec, .. } = start {
            specs.push(spec);
        }
        specs.reverse();
        let parallelism = match start {
            _ if gather.is_some() => 1,
            // Literal rows are few: one task.
            Node::Values { .. } => 1,
            _ => self.options.parallelism,
        };
        // Of each task's inputs, how many are the left input of a join (the rest are right).
        let mut left_inputs = usize::MAX;
        let mut merge_inputs: Vec<Vec<mpsc::Receiver<Message>>> = match (gather, start) {
            (Some(input), _) => vec![self.build(input, None)?.into_iter().flatten().collect()],
            (None, Node::Union { inputs, .. }) => {
                // Input j's task i feeds union task i (a forward edge); an input with fewer
                // tasks feeds them all to union task 0.
                let mut per_task: Vec<Vec<mpsc::Receiver<Message>>> = (0..parallelism).map(|_| Vec::new()).collect();
                for input in inputs {
                    for (i, rx) in self.build(input, None)?.into_iter().flatten().enumerate() {
                        per_task[i % parallelism].push(rx);
                    }
                }
                per_task
            }
            (None, Node::Exchange { partitioning, input }) => self.build(input, Some((partitioning, parallelism)))?,
            (None, Node::Join { left, right, .. }) => {
                // Both inputs come exchanged by their join keys (Exchange nodes); each join
                // task reads the left receivers first, then the right ones.
                let mut exchanged = |node: &Node| match node {
                    Node::Exchange { partitioning, input } => self.build(input, Some((partitioning, parallelism))),
                    _ => Err(WeirError::internal("a join input is not exchanged")),
                };
                let lefts = exchanged(left)?;
                let rights = exchanged(right)?;
                left_inputs = lefts.first().map_or(0, |l| l.len());
                lefts
                    .into_iter()
                    .zip(rights)
                    .map(|(mut l, r)| {
                        l.extend(r);
                        l
                    })
                    .collect()
            }
            _ => Vec::new(),
        };
        let stage = self.stages;
        self.stages += 1;
        // Output channels: one per task, or a task-by-next-task matrix for an exchange.
        let mut outputs: Vec<Vec<mpsc::Receiver<Message>>> = match exchange {
            None => Vec::with_capacity(parallelism),
            Some((_, next)) => (0..next).map(|_| Vec::with_capacity(parallelism)).collect(),
        };
        for index in 0..parallelism {
            let split = Split { index, count: parallelism };
            let output = match exchange {
                None => {
                    let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
                    outputs.push(vec![rx]);
                    Output::Forward(tx)
                }
                Some((partitioning, next)) => {
                    let mut senders = Vec::with_capacity(next);
                    for receivers in outputs.iter_mut() {
                        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
                        senders.push(tx);
                        receivers.push(rx);
                    }
                    Output::Exchange { senders, partitioning: partitioning.clone(), next: index }
                }
            };
            // The task's own metrics first (source, values), so that they list in flow order.
            let source_metrics = match start {
                _ if gather.is_some() => None,
                Node::Source { table, .. } => Some(self.metrics(format!("Source: {} [{index}]", table.name))),
                Node::Values { .. } => Some(self.metrics("Values".to_string())),
                _ => None,
            };
            let (checkpoint, restored) = self.checkpoint_of(format!("stage{stage}-task{index}"));
            let mut ops = Vec::with_capacity(specs.len());
            let mut late = Vec::with_capacity(specs.len());
            for (i, s) in specs.iter().enumerate() {
                late.push(s.late_table().map(|table| {
                    let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
                    self.late.entry(table.name.clone()).or_insert_with(|| (table.clone(), Vec::new())).1.push(rx);
                    tx
                }));
                let ctx =
                    InstanceContext { key: format!("stage{stage}-task{index}-op{i}"), rocksdb: self.rocksdb_dirs() };
                let mut op = s.instantiate_in(&ctx)?;
                if let Some(state) = restored.as_ref().and_then(|r| r.operators.get(&i)) {
                    op.restore(&state.state)?;
                }
                ops.push((op, self.metrics(format!("{} [{index}]", s.describe()))));
            }
            let chain =
                Chain { ops, output, metrics: None, checkpoint, extra: TaskState::default(), late, acking: None };
            let aligned = self.aligned();
            if gather.is_some() {
                let receivers = std::mem::take(&mut merge_inputs[index]);
                self.tasks
                    .push((format!("gather [{index}]"), Box::pin(run_merge(receivers, chain, aligned, usize::MAX))));
                continue;
            }
            match start {
                Node::Source { table, projection, .. } => {
                    let mut source = self.connectors.source(table, projection.clone(), split)?;
                    if let Some(position) = restored.as_ref().and_then(|r| r.source.as_ref()) {
                        source.seek(position)?;
                    }
                    let partitions = source.partitions();
                    let mut chain = chain;
                    if !partitions.is_empty() {
                        for (op, _) in chain.ops.iter_mut() {
                            op.source_partitions(&partitions, self.options.idle_timeout);
                        }
                    }
                    let trigger = self.trigger.clone().zip(self.committed.clone());
                    let metrics =
                        source_metrics.clone().ok_or_else(|| WeirError::internal("source without metrics"))?;
                    let idle = self.options.idle_timeout;
                    let chain = chain.with_metrics(metrics.clone());
                    self.tasks.push((
                        format!("source {} [{index}]", table.name),
                        Box::pin(run_source(source, metrics, chain, idle, trigger)),
                    ));
                }
                Node::Values { batches, schema } => {
                    let source = Box::new(ValuesSource::new(schema.clone(), batches.clone()));
                    let metrics =
                        source_metrics.clone().ok_or_else(|| WeirError::internal("values without metrics"))?;
                    let chain = chain.with_metrics(metrics.clone());
                    let trigger = self.trigger.clone().zip(self.committed.clone());
                    self.tasks
                        .push(("values".to_string(), Box::pin(run_source(source, metrics, chain, None, trigger))));
                }
                Node::Union { .. } | Node::Exchange { .. } => {
                    let receivers = std::mem::take(&mut merge_inputs[index]);
                    self.tasks
                        .push((format!("merge [{index}]"), Box::pin(run_merge(receivers, chain, aligned, usize::MAX))));
                }
                Node::Join { .. } => {
                    let receivers = std::mem::take(&mut merge_inputs[index]);
                    let run = run_merge(receivers, chain, aligned, left_inputs);
                    self.tasks.push((format!("join [{index}]"), Box::pin(run)));
                }
                Node::Operator { .. } => return Err(WeirError::internal("operator chain did not end")),
            }
        }
        Ok(outputs)
    }
}

/// Where a task's output goes.
enum Output {
    /// To the task with the same index in the next stage.
    Forward(mpsc::Sender<Message>),
    /// Spread over the next stage's tasks; `next` is the round-robin turn.
    Exchange { senders: Vec<mpsc::Sender<Message>>, partitioning: Partitioning, next: usize },
}

/// Fused operators of one task, and the channel(s) after them.
struct Chain {
    ops: Vec<(Box<dyn Operator>, Arc<OperatorMetrics>)>,
    output: Output,
    /// This task's part in checkpoints.
    checkpoint: Option<TaskCheckpoint>,
    /// State of the task beyond its operators (a source's position), for the next ack.
    extra: TaskState,
    /// Where waiting for room in `tx` is counted (the task's first metrics).
    metrics: Option<Arc<OperatorMetrics>>,
    /// Per operator: where its late rows go (with barriers and the end, for the late-data
    /// table's sink), if it has a late-data table.
    late: Vec<Option<mpsc::Sender<Message>>>,
    /// The last checkpoint's uploads, then its acknowledgement, running off this task.
    acking: Option<tokio::task::JoinHandle<Result<()>>>,
}

impl Chain {
    fn with_metrics(mut self, metrics: Arc<OperatorMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Send downstream: rows by the partitioning, everything else to every next task.
    /// `false` when downstream is gone.
    async fn send(&mut self, msg: Message) -> Result<bool> {
        let metrics = self.metrics.clone();
        match &mut self.output {
            Output::Forward(tx) => Ok(send_one(tx, msg, &metrics).await),
            Output::Exchange { senders, partitioning, next } => {
                let Message::Chunk(chunk) = msg else {
                    let mut any = false;
                    for tx in senders.iter() {
                        any |= send_one(tx, msg.clone(), &metrics).await;
                    }
                    return Ok(any);
                };
                let parts: Vec<Option<Chunk>> = match partitioning {
                    Partitioning::Hash(keys) => crate::exchange::hash_partition(&chunk, keys, senders.len())?,
                    Partitioning::Broadcast => senders.iter().map(|_| Some(chunk.clone())).collect(),
                    Partitioning::RoundRobin => {
                        let mut parts: Vec<Option<Chunk>> = senders.iter().map(|_| None).collect();
                        parts[*next % senders.len()] = Some(chunk);
                        *next += 1;
                        parts
                    }
                };
                let mut any = false;
                for (tx, part) in senders.iter().zip(parts) {
                    if let Some(part) = part {
                        any |= send_one(tx, Message::Chunk(part), &metrics).await;
                    } else {
                        any |= !tx.is_closed();
                    }
                }
                Ok(any)
            }
        }
    }

    /// Push `msg` through every operator and send what comes out. `false`: stop this task,
    /// because downstream is gone or an operator (a `LIMIT`) has ended the stream.
    async fn push(&mut self, msg: Message) -> Result<bool> {
        self.push_from(msg, 0).await
    }

    /// [`Chain::push`] for a chunk from input `input` of the first operator (a join).
    async fn push_from(&mut self, msg: Message, input: usize) -> Result<bool> {
        if self.acking.as_ref().is_some_and(|a| a.is_finished()) {
            self.acked().await?;
        }
        let mut messages = vec![msg];
        let mut done = false;
        let mut snapshot: Option<(u64, TaskState)> = None;
        let mut uploads: Vec<weir_core::SnapshotUpload> = Vec::new();
        for (i, (op, metrics)) in self.ops.iter_mut().enumerate() {
            let mut next = Vec::with_capacity(messages.len());
            for msg in messages {
                // Barriers and the end also go to the late-data table's sink.
                let control = match &msg {
                    Message::Barrier(_) | Message::End => Some(msg.clone()),
                    _ => None,
                };
                match msg {
                    Message::Chunk(c) => {
                        metrics.record_in(c.num_rows());
                        if i == 0 && input > 0 {
                            op.process_input(input, c, &mut next)?;
                        } else {
                            op.process_chunk(c, &mut next)?;
                        }
                    }
                    Message::Watermark(w) => {
                        metrics.watermark.store(w.0, std::sync::atomic::Ordering::Relaxed);
                        op.process_watermark(w, &mut next)?;
                    }
                    Message::Barrier(b) => {
                        if self.checkpoint.is_some() {
                            let (_, state) = snapshot.get_or_insert_with(|| (b.epoch, std::mem::take(&mut self.extra)));
                            take_snapshot(op.as_mut(), i, state, &mut uploads)?;
                        }
                        op.process_barrier(b, &mut next)?
                    }
                    Message::Idle => next.push(Message::Idle),
                    Message::End => {
                        op.finish(&mut next)?;
                        next.push(Message::End);
                    }
                }
                if let Some(Some(tx)) = self.late.get(i) {
                    for batch in op.drain_late_rows() {
                        send_one(tx, Message::Chunk(Chunk::inserts(batch)), &None).await;
                    }
                    if let Some(m) = control {
                        send_one(tx, m, &None).await;
                    }
                }
            }
            for msg in &next {
                if let Message::Chunk(c) = msg {
                    metrics.record_out(c.num_rows());
                }
            }
            let late = op.late_rows();
            if late > 0 {
                metrics.late_rows.store(late, std::sync::atomic::Ordering::Relaxed);
            }
            messages = next;
            if op.is_done() {
                done = true;
                messages.retain(|m| !matches!(m, Message::End));
                messages.push(Message::End);
                break;
            }
        }
        if let Some(cp) = &self.checkpoint {
            // A task without operators acknowledges the barrier as it passes.
            let barrier = messages.iter().find_map(|m| match m {
                Message::Barrier(b) => Some(b.epoch),
                _ => None,
            });
            if let Some(epoch) = barrier.filter(|_| snapshot.is_none()) {
                snapshot = Some((epoch, std::mem::take(&mut self.extra)));
            }
            if let Some((epoch, state)) = snapshot {
                if uploads.is_empty() && self.acking.is_none() {
                    cp.ack(Some(epoch), state);
                } else {
                    // Acknowledged once its files are in place, and after the checkpoint
                    // before it: processing goes on meanwhile.
                    let (cp, previous) = (cp.clone(), self.acking.take());
                    self.acking = Some(tokio::spawn(async move {
                        if let Some(previous) = previous {
                            previous.await.map_err(|e| WeirError::internal(format!("checkpoint upload: {e}")))??;
                        }
                        tokio::task::spawn_blocking(move || uploads.into_iter().try_for_each(|upload| upload()))
                            .await
                            .map_err(|e| WeirError::internal(format!("checkpoint upload: {e}")))??;
                        cp.ack(Some(epoch), state);
                        Ok(())
                    }));
                }
            }
        }
        for msg in messages {
            if !self.send(msg).await? {
                return Ok(false);
            }
        }
        Ok(!done)
    }

    /// Wait for the last checkpoint's uploads and acknowledgement; their error, if any.
    async fn acked(&mut self) -> Result<()> {
        match self.acking.take() {
            Some(acking) => acking.await.map_err(|e| WeirError::internal(format!("checkpoint upload: {e}")))?,
            None => Ok(()),
        }
    }

    /// The task has finished: its final state stands for every later checkpoint.
    async fn finished(&mut self) -> Result<()> {
        // The acknowledgement of the last checkpoint goes first.
        self.acked().await?;
        if let Some(cp) = &self.checkpoint {
            let mut state = std::mem::take(&mut self.extra);
            let mut uploads = Vec::new();
            for (i, (op, _)) in self.ops.iter_mut().enumerate() {
                take_snapshot(op.as_mut(), i, &mut state, &mut uploads)?;
            }
            tokio::task::spawn_blocking(move || uploads.into_iter().try_for_each(|upload| upload()))
                .await
                .map_err(|e| WeirError::internal(format!("checkpoint upload: {e}")))??;
            cp.ack(None, state);
        }
        Ok(())
    }
}

/// Operator `i`'s snapshot into its task's state; its upload, if any, into `uploads`, to
/// run before the task acknowledges. The one place a snapshot is taken apart, for barriers
/// and a task's end alike.
fn take_snapshot(
    op: &mut dyn Operator,
    i: usize,
    state: &mut TaskState,
    uploads: &mut Vec<weir_core::SnapshotUpload>,
) -> Result<()> {
    if let Some(s) = op.snapshot()? {
        uploads.extend(s.upload);
        let o = OperatorState {
            state: s.state,
            shared_files: s.shared_files,
            bytes_copied: s.bytes_copied,
            bytes_referenced: s.bytes_referenced,
        };
        state.operators.insert(i, o);
    }
    Ok(())
}

/// Send one message, counting the time spent waiting for room as backpressure.
async fn send_one(tx: &mpsc::Sender<Message>, msg: Message, metrics: &Option<Arc<OperatorMetrics>>) -> bool {
    match tx.try_send(msg) {
        Ok(()) => true,
        Err(mpsc::error::TrySendError::Closed(_)) => false,
        Err(mpsc::error::TrySendError::Full(msg)) => {
            let waited = Instant::now();
            let sent = tx.send(msg).await.is_ok();
            if let Some(m) = metrics {
                m.backpressure_nanos
                    .fetch_add(waited.elapsed().as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
            }
            sent
        }
    }
}

async fn run_source(
    mut source: Box<dyn Source>,
    metrics: Arc<OperatorMetrics>,
    mut chain: Chain,
    idle_timeout: Option<Duration>,
    checkpoints: Option<(watch::Receiver<Trigger>, watch::Receiver<u64>)>,
) -> Result<()> {
    let (mut trigger, mut committed) = checkpoints.unzip();
    // A cancel-safe read is given up when a barrier is asked for while it waits, so that a
    // quiet source still takes part in checkpoints (and exactly-once output is committed).
    let interruptible = source.cancel_safe();
    let mut last_data = tokio::time::Instant::now();
    let mut idle = false;
    loop {
        if let Some(committed) = &mut committed {
            if committed.has_changed().unwrap_or(false) {
                let n = *committed.borrow_and_update();
                source.checkpoint_complete(n)?;
            }
        }
        // A checkpoint asked for: between two batches, the position is exact.
        if let Some(t) = &mut trigger {
            if t.has_changed().unwrap_or(false) {
                let Trigger { epoch, stop } = *t.borrow_and_update();
                let position = source
                    .position()
                    .ok_or_else(|| WeirError::not_supported("checkpoints of a job with a source that cannot rewind"))?;
                source.checkpoint_taken(epoch);
                chain.extra.source = Some(position);
                let kind =
                    if stop { weir_core::BarrierKind::StopWithCheckpoint } else { weir_core::BarrierKind::Checkpoint };
                if !chain.push(Message::Barrier(weir_core::Barrier { epoch, kind })).await? {
                    return Ok(());
                }
                if stop {
                    // Nothing after the last barrier: wait to be shut down.
                    std::future::pending::<()>().await;
                }
            }
        }
        let next = {
            // Keep the same read going while reporting idleness: dropping a read that is not
            // cancel-safe could lose data.
            let read = source.next_batch();
            tokio::pin!(read);
            loop {
                let idle_at = idle_timeout.filter(|_| !idle).map(|t| last_data + t);
                tokio::select! {
                    r = &mut read => break Some(r),
                    () = sleep_until(idle_at) => {
                        idle = true;
                        if !chain.push(Message::Idle).await? {
                            return Ok(());
                        }
                    }
                    // Seen here without being marked seen: taken at the top of the loop.
                    () = changed(trigger.as_ref()), if interruptible => break None,
                    () = changed(committed.as_ref()), if interruptible => break None,
                }
            }
        };
        let Some(next) = next else { continue };
        metrics.records_skipped.store(source.records_skipped(), std::sync::atomic::Ordering::Relaxed);
        match next? {
            Some(batch) => {
                last_data = tokio::time::Instant::now();
                idle = false;
                metrics.record_out(batch.num_rows());
                let chunk = Chunk::inserts(batch).from_partition(source.batch_partition());
                if !chain.push(Message::Chunk(chunk)).await? {
                    return Ok(());
                }
            }
            None => {
                // A bounded input ended: every pending window may fire.
                if chain.push(Message::Watermark(Watermark::END_OF_TIME)).await? {
                    chain.push(Message::End).await?;
                }
                if let Some(position) = source.position() {
                    chain.extra.source = Some(position);
                }
                chain.finished().await?;
                return Ok(());
            }
        }
    }
}

/// Sleep until `at`; never without it.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Until the watched value has a version not yet seen, leaving it unseen (a clone waits, so
/// that the caller's `has_changed` still tells); never without a channel, or once it closed.
async fn changed<T>(rx: Option<&watch::Receiver<T>>) {
    let Some(rx) = rx else { return std::future::pending().await };
    let mut probe = rx.clone();
    if probe.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Merge several inputs (a union, parallel tasks feeding one sink, or a join's two inputs)
/// into one chain. Inputs from `left_inputs` on are a join's right input: their chunks go to
/// the first operator as input 1.
async fn run_merge(
    mut inputs: Vec<mpsc::Receiver<Message>>,
    mut chain: Chain,
    aligned: bool,
    left_inputs: usize,
) -> Result<()> {
    let mut merger = InputMerger::new(inputs.len()).aligned(aligned);
    let mut next_first = 0;
    loop {
        // Poll the readable inputs, starting after the last one served so none starves.
        let (i, msg) = std::future::poll_fn(|cx| {
            let n = inputs.len();
            for k in 0..n {
                let i = (next_first + k) % n;
                if !merger.readable(i) {
                    continue;
                }
                if let Poll::Ready(msg) = inputs[i].poll_recv(cx) {
                    return Poll::Ready((i, msg));
                }
            }
            Poll::Pending
        })
        .await;
        next_first = (i + 1) % inputs.len();
        // A closed channel without `End` means that input's task stopped; the supervisor
        // reports its error, if it had one.
        let msg = msg.unwrap_or(Message::End);
        let mut out = Vec::new();
        merger.on_message(i, msg, &mut out);
        let side = usize::from(i >= left_inputs);
        for msg in out {
            let is_end = matches!(msg, Message::End);
            if !chain.push_from(msg, side).await? {
                return Ok(());
            }
            if is_end {
                chain.finished().await?;
                return Ok(());
            }
        }
    }
}

async fn run_sink(
    mut input: mpsc::Receiver<Message>,
    mut sink: Box<dyn Sink>,
    metrics: Arc<OperatorMetrics>,
    checkpoint: Option<TaskCheckpoint>,
    restored: Option<(u64, Option<Vec<u8>>)>,
    mut committed: Option<watch::Receiver<u64>>,
) -> Result<()> {
    if let Some((epoch, state)) = &restored {
        sink.restore(*epoch, state.as_deref()).await?;
    }
    let mut stopping_at: Option<u64> = None;
    loop {
        let msg = tokio::select! {
            msg = input.recv() => msg,
            // Checkpoint n complete everywhere: publish what was pre-committed for it.
            Some(n) = async {
                match &mut committed {
                    Some(c) => c.changed().await.ok().map(|_| *c.borrow_and_update()),
                    None => std::future::pending().await,
                }
            } => {
                sink.commit(n).await?;
                if stopping_at.is_some_and(|s| n >= s) {
                    // Stopped with a checkpoint: everything before it is published.
                    return Ok(());
                }
                continue;
            }
        };
        let Some(msg) = msg else { break };
        match msg {
            Message::Chunk(chunk) => {
                metrics.record_in(chunk.num_rows());
                sink.write_chunk(chunk).await?;
            }
            Message::Watermark(w) => {
                metrics.watermark.store(w.0, std::sync::atomic::Ordering::Relaxed);
                sink.on_watermark(w).await?;
            }
            Message::Barrier(b) => {
                if b.kind == weir_core::BarrierKind::StopWithCheckpoint {
                    stopping_at = Some(b.epoch);
                }
                let state = sink.pre_commit(b.epoch).await?;
                if let Some(cp) = &checkpoint {
                    cp.ack(Some(b.epoch), TaskState { sink: state, ..Default::default() });
                }
            }
            Message::Idle => {}
            Message::End => {
                let (Some(cp), Some(committed)) = (&checkpoint, &mut committed) else {
                    sink.finish().await?;
                    return Ok(());
                };
                let Some(state) = sink.pre_commit_final().await? else {
                    sink.finish().await?;
                    cp.ack(None, TaskState::default());
                    return Ok(());
                };
                // Committed with the final checkpoint, which the coordinator writes once
                // every task has ended (and any still in flight before it); it closes the
                // channel after the final one.
                cp.ack(None, TaskState { sink: Some(state), ..Default::default() });
                let mut last = None;
                while committed.changed().await.is_ok() {
                    let n = *committed.borrow_and_update();
                    sink.commit(n).await?;
                    last = Some(n);
                }
                if last.is_none() {
                    return Err(WeirError::external(
                        "the job's final checkpoint was not completed: its last output is not committed",
                    ));
                }
                sink.finish().await?;
                return Ok(());
            }
        }
    }
    Err(WeirError::internal("the sink's input closed before the end of the stream"))
}

/// One attempt at running a job: its tasks, their metrics, and how to ask it to stop with
/// a checkpoint.
struct Attempt {
    tasks: Vec<(String, Task)>,
    metrics: Vec<Arc<OperatorMetrics>>,
    stop: Option<mpsc::UnboundedSender<()>>,
}

fn build_attempt(
    root: &Node,
    sink: &mut SinkSpec<'static>,
    connectors: &dyn ConnectorFactory,
    options: &JobOptions,
    stats: &Arc<Mutex<Vec<CheckpointStats>>>,
) -> Result<Attempt> {
    let checkpointing = options.checkpoint.clone();
    let restored_epoch = options.restore.as_ref().map(|r| r.epoch);
    let (ack_tx, ack_rx) = mpsc::unbounded_channel();
    let (trigger_tx, trigger_rx) = watch::channel(Trigger::default());
    let (stop_tx, stop_rx) = mpsc::unbounded_channel();
    let (committed_tx, committed_rx) = watch::channel(0u64);
    let mut builder = Builder {
        connectors,
        options: options.clone(),
        tasks: Vec::new(),
        metrics: Vec::new(),
        stages: 0,
        acks: checkpointing.as_ref().map(|_| ack_tx),
        trigger: checkpointing.as_ref().map(|_| trigger_rx),
        committed: checkpointing.as_ref().map(|_| committed_rx.clone()),
        keys: Vec::new(),
        late: Default::default(),
    };
    let mut inputs: Vec<mpsc::Receiver<Message>> = builder.build(root, None)?.into_iter().flatten().collect();
    if !sink.parallel && inputs.len() > 1 {
        inputs = vec![builder.merge_into_one("merge-to-sink", "merge to sink", inputs)];
    }
    let count = inputs.len();
    for (index, input) in inputs.into_iter().enumerate() {
        let task_sink = (sink.make)(Split { index, count })?;
        let metrics = builder.metrics(format!("Sink: {} [{index}]", sink.name));
        let (checkpoint, restored) = builder.checkpoint_of(format!("sink-task{index}"));
        // With checkpoints a sink always restores: from the checkpoint, or from nothing
        // (epoch 0) to clear what an earlier attempt left unpublished.
        let restored = checkpointing.as_ref().map(|_| (restored_epoch.unwrap_or(0), restored.and_then(|s| s.sink)));
        let committed = checkpointing.as_ref().map(|_| committed_rx.clone());
        builder.tasks.push((
            format!("sink [{index}]"),
            Box::pin(run_sink(input, task_sink, metrics, checkpoint, restored, committed)),
        ));
    }
    // Late rows: every window task's into one sink per late-data table.
    for (name, (table, receivers)) in std::mem::take(&mut builder.late) {
        let input =
            builder.merge_into_one(&format!("late-merge-{name}"), &format!("merge late rows to {name}"), receivers);
        let task_sink = connectors.sink(&table, table.schema.clone(), Split { index: 0, count: 1 })?;
        let metrics = builder.metrics(format!("Sink: {name} (late rows)"));
        let (checkpoint, restored) = builder.checkpoint_of(format!("late-sink-{name}"));
        let restored = checkpointing.as_ref().map(|_| (restored_epoch.unwrap_or(0), restored.and_then(|s| s.sink)));
        let committed = checkpointing.as_ref().map(|_| committed_rx.clone());
        builder.tasks.push((
            format!("sink [late rows to {name}]"),
            Box::pin(run_sink(input, task_sink, metrics, checkpoint, restored, committed)),
        ));
    }
    let stop = match checkpointing {
        Some((config, store)) => {
            let keys = builder.keys.clone();
            let first = restored_epoch.map_or(1, |e| e + 1);
            // One of the job's tasks: a checkpoint it cannot write because another instance
            // took over fails the job.
            let coordinator = crate::checkpoint::coordinate(
                config,
                store,
                keys,
                first,
                trigger_tx,
                committed_tx,
                ack_rx,
                stop_rx,
                stats.clone(),
            );
            builder.tasks.push(("checkpoint coordinator".to_string(), Box::pin(coordinator)));
            Some(stop_tx)
        }
        None => None,
    };
    Ok(Attempt { tasks: builder.tasks, metrics: builder.metrics, stop })
}

/// How an attempt ended.
enum Ended {
    Finished,
    Stopped,
    Cancelled,
    Failed(WeirError),
}

/// Run an attempt's tasks until they end, fail, or the job is cancelled.
async fn supervise(
    attempt: Attempt,
    name: &str,
    cancel: &mut watch::Receiver<bool>,
    stop_requested: &std::sync::atomic::AtomicBool,
) -> Ended {
    let mut set = JoinSet::new();
    let sinks = attempt.tasks.iter().filter(|(name, _)| name.starts_with("sink [")).count();
    for (task_name, task) in attempt.tasks {
        set.spawn(async move {
            let is_sink = task_name.starts_with("sink [");
            task.await.map(|_| is_sink).map_err(|e| (task_name, e))
        });
    }
    let mut sinks_done = 0;
    let ended = loop {
        tokio::select! {
            changed = cancel.changed() => {
                if changed.is_err() || *cancel.borrow() {
                    set.abort_all();
                    break Ended::Cancelled;
                }
            }
            joined = set.join_next() => match joined {
                None => break Ended::Finished,
                Some(Ok(Ok(is_sink))) => {
                    sinks_done += usize::from(is_sink);
                    // Every sink done while sources still run: stopped with a checkpoint.
                    if sinks_done == sinks && !set.is_empty() && stop_requested.load(std::sync::atomic::Ordering::SeqCst) {
                        set.abort_all();
                        break Ended::Stopped;
                    }
                }
                Some(Ok(Err((task, e)))) => {
                    set.abort_all();
                    // A task that fails because the job is being cancelled (its reader went
                    // away) does not make the job a failure.
                    if *cancel.borrow() {
                        break Ended::Cancelled;
                    }
                    log::debug!("job {name} failed in task {task}: {e}");
                    break Ended::Failed(e);
                }
                Some(Err(join)) => {
                    set.abort_all();
                    let what = if join.is_panic() { "panicked" } else { "was aborted" };
                    break Ended::Failed(WeirError::internal(format!("a task of job '{name}' {what}")));
                }
            }
        }
    };
    // Wait for aborted tasks to be dropped so that files and channels are released.
    while set.join_next().await.is_some() {}
    ended
}

/// Start running `root` into the sink. Sources are opened here, so a missing file fails now,
/// before the job exists. A job with checkpoints that fails restarts from its latest
/// checkpoint, up to `options.restart_attempts` times, waiting longer before each attempt.
/// Must be called inside a Tokio runtime.
pub fn spawn_job(
    id: u64,
    name: String,
    root: &Node,
    mut sink: SinkSpec<'static>,
    connectors: Arc<dyn ConnectorFactory>,
    options: JobOptions,
) -> Result<JobHandle> {
    let checkpoint_stats = Arc::new(Mutex::new(Vec::new()));
    let first = build_attempt(root, &mut sink, connectors.as_ref(), &options, &checkpoint_stats)?;
    let stop_requested = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (state_tx, state_rx) = watch::channel(JobState::Running);
    let (cancel_tx, mut cancel_rx) = watch::channel(false);
    let inner = Arc::new(JobInner {
        id,
        name,
        metrics: Mutex::new(first.metrics.clone()),
        state: state_rx,
        cancel: cancel_tx,
        started: Instant::now(),
        finished: Mutex::new(None),
        checkpoints: checkpoint_stats.clone(),
        stop: Mutex::new(first.stop.clone()),
        stop_requested: stop_requested.clone(),
        checkpointing: options.checkpoint.is_some(),
        restarts: std::sync::atomic::AtomicU32::new(0),
    });
    let handle = JobHandle { inner: inner.clone() };
    let root = root.clone();
    tokio::spawn(async move {
        let mut attempt = first;
        let mut backoff = options.restart_backoff;
        let outcome = loop {
            match supervise(attempt, &inner.name, &mut cancel_rx, &stop_requested).await {
                Ended::Finished => break JobState::Finished,
                Ended::Stopped => break JobState::Stopped,
                Ended::Cancelled => break JobState::Cancelled,
                Ended::Failed(e) => {
                    let done = inner.restarts.load(std::sync::atomic::Ordering::SeqCst);
                    let restartable = done < options.restart_attempts && e.kind != weir_core::ErrorKind::Fenced;
                    let Some((config, store)) = options.checkpoint.as_ref().filter(|_| restartable) else {
                        break JobState::Failed(e);
                    };
                    log::warn!(
                        "job '{}' failed ({e}); restarting from its latest checkpoint in {backoff:?}",
                        inner.name
                    );
                    inner.restarts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = cancel_rx.changed() => break JobState::Cancelled,
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(60));
                    let mut next_options = options.clone();
                    let rebuilt = store.latest(&config.fingerprint).and_then(|restored| {
                        next_options.restore = restored;
                        build_attempt(&root, &mut sink, connectors.as_ref(), &next_options, &checkpoint_stats)
                    });
                    match rebuilt {
                        Ok(next) => {
                            if let Ok(mut m) = inner.metrics.lock() {
                                *m = next.metrics.clone();
                            }
                            if let Ok(mut s) = inner.stop.lock() {
                                *s = next.stop.clone();
                            }
                            attempt = next;
                        }
                        Err(e) => break JobState::Failed(e),
                    }
                }
            }
        };
        let elapsed = inner.started.elapsed();
        if let Ok(mut f) = inner.finished.lock() {
            *f = Some(elapsed);
        }
        // Local RocksDB copies are scratch: the checkpoints hold the state.
        if let Some(dir) = &options.rocksdb {
            let _ = std::fs::remove_dir_all(dir);
        }
        log_summary(&inner, &outcome, elapsed);
        let _ = state_tx.send(outcome);
    });
    Ok(handle)
}

/// What the job did, in the log when it stops: per operator task rows, batches, watermark and
/// backpressure.
fn log_summary(inner: &JobInner, outcome: &JobState, elapsed: Duration) {
    if !log::log_enabled!(log::Level::Info) {
        return;
    }
    let mut text = format!("job {} '{}' {} after {:.3}s", inner.id, inner.name, outcome.name(), elapsed.as_secs_f64());
    let metrics = inner.metrics.lock().map(|m| m.clone()).unwrap_or_default();
    for m in &metrics {
        let s = m.snapshot();
        text.push_str(&format!(
            "\n  {}: rows in {} out {}, batches in {} out {}, watermark {:?}, backpressure {} ms, skipped {}",
            s.name,
            s.rows_in,
            s.rows_out,
            s.batches_in,
            s.batches_out,
            s.watermark,
            s.backpressure_ms,
            s.records_skipped
        ));
    }
    log::info!("{text}");
}

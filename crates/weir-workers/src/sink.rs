//! A task's output: everything it writes (rows for a repartition topic or the job's Kafka
//! sink, watermark markers) goes through one transactional producer per transaction, under
//! an id of its own (`<prefix>-<s>`: one transaction per id, ever). Per checkpoint `n`, in
//! this order:
//! 1. barrier `n`: the producer is flushed (pre-commit); the runtime then writes the state
//!    snapshot to the shared checkpoint store;
//! 2. checkpoint `n` written: the offsets the task's sources had at barrier `n` go into the
//!    transaction, with `weir:<n>` as their commit metadata, and the transaction commits.
//!
//! The commit is what makes checkpoint `n` the task's: a task that starts (restarts, or
//! moves to another worker) restores the checkpoint named by its committed offsets, and
//! [`fence`] fences its predecessors and aborts what they left open. Rows that
//! arrive between the flush and the commit wait here: they belong to the next transaction.
//!
//! A job sink of another kind (files, PostgreSQL) is that connector's own sink, told of each
//! checkpoint after the Kafka commit, as in one process.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerGroupMetadata};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use weir_connectors::kafka::client::Cluster;
use weir_connectors::kafka::{recovery, send, TopicWriter};
use weir_core::{Chunk, Result, Sink, Watermark, WeirError};
use weir_runtime::KeyGroups;

use super::codec::{encode_chunk, marker, MARKER};
use super::connectors::TaskShared;

const TIMEOUT: Duration = Duration::from_secs(60);
/// Markers at most this often while the watermark moves (and at every checkpoint).
const MARKER_EVERY: Duration = Duration::from_millis(200);

#[derive(Clone, Default)]
pub struct TaskContext(Arc<Mutex<Option<String>>>);

impl ClientContext for TaskContext {}

impl ProducerContext for TaskContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            if let Ok(mut error) = self.0.lock() {
                error.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

/// Where a task's rows go.
pub enum Target {
    /// A repartition topic: each row to the partition of its key group.
    Repartition { topic: String, keys: Vec<usize>, partitions: usize, key_groups: KeyGroups },
    /// The job's Kafka sink table.
    Topic(TopicWriter),
    /// The job's sink of another connector.
    Other(Box<dyn Sink>),
}

/// The metadata of a task's committed offsets: the checkpoint they belong to, and whether it
/// is the task's last.
pub fn commit_metadata(epoch: u64, last: bool) -> String {
    if last {
        format!("weir:{epoch}:end")
    } else {
        format!("weir:{epoch}")
    }
}

pub fn parse_commit_metadata(text: &str) -> Option<(u64, bool)> {
    let rest = text.strip_prefix("weir:")?;
    match rest.split_once(':') {
        Some((n, "end")) => Some((n.parse().ok()?, true)),
        None => Some((rest.parse().ok()?, false)),
        _ => None,
    }
}

pub struct TaskSink {
    /// `task <sub-topology>/<partition> of job '<job>'`, for messages.
    name: String,
    task: usize,
    config: rdkafka::ClientConfig,
    next_seq: u64,
    seqs: Arc<Seqs>,
    /// The open transaction's producer.
    producer: Option<ThreadedProducer<TaskContext>>,
    context: TaskContext,
    target: Target,
    /// The sub-topology's consumer group, which the offsets are committed to.
    group: ConsumerGroupMetadata,
    _group_consumer: BaseConsumer,
    shared: Arc<TaskShared>,
    /// Flushed for a checkpoint, not yet committed: its epoch (`None`: the final one, whose
    /// number comes with its completion).
    pending: Option<Option<u64>>,
    held: Vec<Chunk>,
    /// Rows written into the open transaction, for the log.
    rows_in_txn: std::collections::BTreeMap<i32, usize>,
    watermark: Option<i64>,
    marked: Option<i64>,
    marked_at: Instant,
}

fn kafka(name: &str, what: &str, e: KafkaError) -> WeirError {
    use rdkafka::types::RDKafkaErrorCode::{InvalidProducerEpoch, ProducerFenced};
    let fenced = matches!(e.rdkafka_error_code(), Some(ProducerFenced | InvalidProducerEpoch))
        || e.to_string().to_lowercase().contains("fenced");
    if fenced {
        WeirError::fenced(format!(
            "{name}: Kafka: {what}: {e}: the task has moved to another worker, which fenced this one; it stops here"
        ))
    } else {
        WeirError::external(format!("{name}: Kafka: {what}: {e}"))
    }
}

/// End what the task's earlier runs may have left open under the ids from `from` on, as the
/// single-process Kafka sink does after a restart ([`recovery`]): each open transaction is
/// aborted (or, if it was committing, committed first) and its producer fenced. Returns the
/// first id the task may use, past every id initialized here. Done before a task reads which
/// checkpoint it restores, and again until that does not change, so that no commit lands
/// after the read.
///
/// An id fenced here is never used again: each id carries one transaction, ever. (On the
/// test broker, a `read_committed` reader skipped committed records of a transaction that
/// reused an id whose earlier transaction had been aborted by a fence.)
pub fn fence(config: &rdkafka::ClientConfig, prefix: &str, from: u64, name: &str) -> Result<u64> {
    recovery::end_earlier_attempts(&cluster(config, name)?, prefix, from, Duration::from_secs(60), TIMEOUT)
        .map_err(|e| e.context(format!("{name}: fencing the ids '{prefix}-{from}' on")))
}

/// The cluster as the job's librdkafka clients reach it (its security settings included).
fn cluster(config: &rdkafka::ClientConfig, name: &str) -> Result<Cluster> {
    Cluster::from_config(config, name)
}

/// Initialize `<prefix>-<seq>`: abort what it holds open and fence its producer.
fn init_id(config: &rdkafka::ClientConfig, prefix: &str, seq: u64, name: &str) -> Result<()> {
    let id = format!("{prefix}-{seq}");
    weir_connectors::kafka::txn::init_producer_id(&cluster(config, name)?, &id, Duration::from_secs(60), TIMEOUT)
        .map_err(|e| e.context(format!("{name}: fencing '{id}'")))?;
    Ok(())
}

/// The transactional ids of one task in this process: the first it may use (past every id
/// the worker fenced when it started the task) and the next no attempt has used yet. An
/// attempt that replaces a failed one starts past the ids the failed one used, and fences
/// those first (its producers were dropped with their transactions open).
#[derive(Debug)]
pub struct Seqs {
    /// Transaction `s` of the task has the id `<prefix>-<s>`.
    pub prefix: String,
    first: u64,
    next: std::sync::atomic::AtomicU64,
}

impl Seqs {
    pub fn new(prefix: String, first: u64) -> Arc<Self> {
        Arc::new(Self { prefix, first, next: std::sync::atomic::AtomicU64::new(first) })
    }

    /// Abort the transaction the task's last attempt here may have left open (a task that
    /// failed dropped its producer with it open), by initializing its id. Only the last can
    /// be open: a task opens its next transaction after committing the one before.
    pub fn abort_open(&self, config: &rdkafka::ClientConfig, name: &str) -> Result<()> {
        let next = self.next.load(std::sync::atomic::Ordering::SeqCst);
        if next > self.first {
            init_id(config, &self.prefix, next - 1, name)?;
        }
        Ok(())
    }
}

/// A task sink's state in a checkpoint: the next transaction number, and the state of the
/// job's sink of another connector, if it has one.
#[derive(serde::Serialize, serde::Deserialize)]
struct TaskSinkState {
    format: String,
    version: u32,
    next: u64,
    /// Hex, so that the file stays text.
    inner: Option<String>,
}

const STATE_FORMAT: &str = "weir-worker-sink";
const STATE_VERSION: u32 = 1;

fn encode_state(next: u64, inner: Option<&[u8]>) -> Result<Vec<u8>> {
    let state = TaskSinkState {
        format: STATE_FORMAT.into(),
        version: STATE_VERSION,
        next,
        inner: inner.map(|s| s.iter().map(|b| format!("{b:02x}")).collect()),
    };
    serde_json::to_vec(&state).map_err(|e| WeirError::internal(format!("encoding a task sink's state: {e}")))
}

/// The next transaction number and the inner sink's state, from a task sink's state; a
/// damaged or foreign one is an error naming the task, never a silent fresh start.
fn decode_state(state: &[u8], name: &str) -> Result<(u64, Option<Vec<u8>>)> {
    let damaged = |why: String| WeirError::internal(format!("{name}: its sink's state in the checkpoint {why}"));
    let decoded: TaskSinkState = serde_json::from_slice(state).map_err(|e| damaged(format!("is damaged: {e}")))?;
    if decoded.format != STATE_FORMAT || decoded.version != STATE_VERSION {
        return Err(damaged(format!(
            "is '{}' version {}; this Weir reads '{STATE_FORMAT}' version {STATE_VERSION}",
            decoded.format, decoded.version
        )));
    }
    let inner = match decoded.inner {
        None => None,
        Some(hex) => Some(
            (0..hex.len())
                .step_by(2)
                .map(|i| hex.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok()))
                .collect::<Option<Vec<u8>>>()
                .ok_or_else(|| damaged("is damaged: its inner state is not hex".into()))?,
        ),
    };
    Ok((decoded.next, inner))
}

/// The first transaction a task restored from `state` (its sink state in a checkpoint) opens.
pub fn next_transaction(state: Option<&[u8]>, name: &str) -> Result<u64> {
    match state {
        None => Ok(1),
        Some(state) => Ok(decode_state(state, name)?.0),
    }
}

fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

impl TaskSink {
    /// `config`: the cluster's client settings; `group`: the sub-topology's group.
    pub fn new(
        name: String,
        task: usize,
        mut config: rdkafka::ClientConfig,
        group: &str,
        target: Target,
        shared: Arc<TaskShared>,
        seqs: Arc<Seqs>,
    ) -> Result<Self> {
        blocking(|| seqs.abort_open(&config, &name))?;
        let used = seqs.next.load(std::sync::atomic::Ordering::SeqCst);
        let mut consumer_config = config.clone();
        consumer_config.set("group.id", group).set("enable.auto.commit", "false");
        let consumer: BaseConsumer =
            consumer_config.create().map_err(|e| kafka(&name, "cannot create a consumer", e))?;
        let group =
            consumer.group_metadata().ok_or_else(|| WeirError::internal("a consumer without group metadata"))?;
        config.set("enable.idempotence", "true");
        Ok(Self {
            name,
            task,
            config,
            next_seq: used,
            seqs,
            producer: None,
            context: TaskContext::default(),
            target,
            group,
            _group_consumer: consumer,
            shared,
            pending: None,
            held: Vec::new(),
            rows_in_txn: Default::default(),
            watermark: None,
            marked: None,
            marked_at: Instant::now(),
        })
    }

    /// The open transaction's producer, opening the next transaction (a new producer on the
    /// next id) if none is open.
    fn producer(&mut self) -> Result<&ThreadedProducer<TaskContext>> {
        if self.producer.is_none() {
            let id = format!("{}-{}", self.seqs.prefix, self.next_seq);
            let mut config = self.config.clone();
            config.set("transactional.id", &id);
            let producer: ThreadedProducer<TaskContext> = config
                .create_with_context(self.context.clone())
                .map_err(|e| kafka(&self.name, "cannot create a producer", e))?;
            blocking(|| producer.init_transactions(TIMEOUT))
                .map_err(|e| kafka(&self.name, &format!("cannot initialize transactions as '{id}'"), e))?;
            producer.begin_transaction().map_err(|e| kafka(&self.name, "cannot begin a transaction", e))?;
            self.next_seq += 1;
            self.seqs.next.fetch_max(self.next_seq, std::sync::atomic::Ordering::SeqCst);
            self.producer = Some(producer);
        }
        self.producer.as_ref().ok_or_else(|| WeirError::internal(format!("{}: no producer", self.name)))
    }

    /// A write or flush that failed because the producer was fenced (librdkafka reports
    /// that as a fatal error, the write only as "fatal") is this task's fencing: it stops
    /// rather than failing the worker.
    ///
    /// Said here, where it happens: a worker that is being replaced may be gone before it
    /// reads its tasks' ends.
    fn fenced_if_so<T>(&self, result: Result<T>) -> Result<T> {
        let Err(e) = result else { return result };
        let fatal = self.producer.as_ref().and_then(|p| p.client().fatal_error());
        let e = match fatal {
            Some((code, why)) if code == rdkafka::types::RDKafkaErrorCode::Fenced || why.contains("fenced") => {
                WeirError::fenced(format!(
                    "{}: Kafka: {why}: the task has moved to another worker, which fenced this one; it stops here",
                    self.name
                ))
            }
            _ => e,
        };
        if e.kind == weir_core::ErrorKind::Fenced {
            log::warn!("{e}");
        }
        Err(e)
    }

    fn check(&self) -> Result<()> {
        match self.context.0.lock().ok().and_then(|mut e| e.take()) {
            Some(e) => Err(WeirError::external(format!("{}: Kafka: a write failed: {e}", self.name))),
            None => Ok(()),
        }
    }

    async fn write_now(&mut self, chunk: Chunk) -> Result<()> {
        if let Target::Other(sink) = &mut self.target {
            return sink.write_chunk(chunk).await;
        }
        if let Target::Topic(writer) = &mut self.target {
            writer.prepare(&chunk.schema()).await?;
        }
        self.producer()?;
        let Some(producer) = &self.producer else { return Ok(()) };
        match &self.target {
            Target::Repartition { topic, keys, partitions, key_groups } => {
                let parts = weir_runtime::hash_partition(&chunk, keys, *partitions, *key_groups)?;
                for (partition, part) in parts.into_iter().enumerate() {
                    let Some(part) = part.filter(|p| p.num_rows() > 0) else { continue };
                    *self.rows_in_txn.entry(partition as i32).or_default() += part.num_rows();
                    let bytes = encode_chunk(&part)?;
                    let record = BaseRecord::to(topic).partition(partition as i32).payload(bytes.as_slice());
                    blocking(|| send(producer, record, topic))?;
                }
            }
            Target::Topic(writer) => {
                *self.rows_in_txn.entry(-1).or_default() += chunk.num_rows();
                blocking(|| writer.write(producer, &chunk))?
            }
            Target::Other(_) => {}
        }
        self.check()
    }

    /// A marker of the current watermark to every partition of the repartition topic, if
    /// it moved since the last one.
    fn write_markers(&mut self, force: bool) -> Result<()> {
        let Some(watermark) = self.watermark.filter(|w| Some(*w) != self.marked) else { return Ok(()) };
        let due = force || watermark == i64::MAX || self.marked_at.elapsed() >= MARKER_EVERY;
        let Target::Repartition { topic, partitions, .. } = &self.target else { return Ok(()) };
        if !due {
            return Ok(());
        }
        let (topic, partitions) = (topic.clone(), *partitions);
        self.producer()?;
        let Some(producer) = &self.producer else { return Ok(()) };
        let value = marker(self.task, watermark);
        for partition in 0..partitions {
            let headers = OwnedHeaders::new().insert(Header { key: MARKER, value: Some(&[] as &[u8]) });
            let record = BaseRecord::to(&topic).partition(partition as i32).payload(value.as_slice()).headers(headers);
            blocking(|| send(producer, record, &topic))?;
        }
        log::debug!("{}: markers {watermark} to '{topic}'", self.name);
        self.marked = Some(watermark);
        self.marked_at = Instant::now();
        Ok(())
    }

    /// Flush for checkpoint `epoch` (`None`: the final one).
    async fn flush_for(&mut self, epoch: Option<u64>) -> Result<Option<Vec<u8>>> {
        self.write_markers(true)?;
        let state = match &mut self.target {
            Target::Other(sink) => match epoch {
                Some(e) => sink.pre_commit(e).await?,
                None => sink.pre_commit_final().await?,
            },
            _ => None,
        };
        // The checkpoint's transaction, opened now if nothing was written (it still commits
        // the offsets), so that the state below names the next one.
        let producer = self.producer()?;
        blocking(|| producer.flush(TIMEOUT)).map_err(|e| kafka(&self.name, "cannot flush", e))?;
        self.check()?;
        self.pending = Some(epoch);
        Ok(Some(encode_state(self.next_seq, state.as_deref())?))
    }
    /// Commit checkpoint `epoch`'s transaction, with the offsets at its barrier.
    async fn commit_now(&mut self, epoch: u64) -> Result<()> {
        let Some(pending) = self.pending else { return Ok(()) };
        if pending.is_some_and(|e| e > epoch) {
            return Ok(());
        }
        let last = pending.is_none();
        let offsets = self.shared.take(epoch, last);
        let mut list = TopicPartitionList::new();
        let metadata = commit_metadata(epoch, last);
        for ((topic, partition), offset) in &offsets {
            list.add_partition_offset(topic, *partition, Offset::Offset(*offset))
                .map_err(|e| kafka(&self.name, "cannot list offsets", e))?;
        }
        for mut elem in list.elements() {
            elem.set_metadata(metadata.clone());
        }
        weir_core::fault::pause("worker_commit");
        self.producer()?;
        let (Some(producer), name, group) = (&self.producer, &self.name, &self.group) else { return Ok(()) };
        blocking(|| {
            producer
                .send_offsets_to_transaction(&list, group, TIMEOUT)
                .map_err(|e| kafka(name, "cannot add the offsets to the transaction", e))?;
            producer
                .commit_transaction(TIMEOUT)
                .map_err(|e| kafka(name, &format!("cannot commit checkpoint {epoch}"), e))
        })?;
        log::debug!(
            "{}: committed checkpoint {epoch} ({metadata}) as '{}-{}': rows {:?}, offsets {offsets:?}",
            self.name,
            self.seqs.prefix,
            self.next_seq - 1,
            self.rows_in_txn
        );
        self.rows_in_txn.clear();
        self.producer = None;
        self.pending = None;
        if let Target::Other(sink) = &mut self.target {
            sink.commit(epoch).await?;
        }
        for chunk in std::mem::take(&mut self.held) {
            self.write_now(chunk).await?;
        }
        self.write_markers(false)
    }
}

#[async_trait]
impl Sink for TaskSink {
    async fn write_chunk(&mut self, chunk: Chunk) -> Result<()> {
        if chunk.num_rows() == 0 {
            return Ok(());
        }
        if let Target::Topic(writer) = &self.target {
            writer.check(&chunk)?;
        }
        if self.pending.is_some() {
            self.held.push(chunk);
            return Ok(());
        }
        let written = self.write_now(chunk).await;
        self.fenced_if_so(written)
    }

    async fn on_watermark(&mut self, watermark: Watermark) -> Result<()> {
        self.watermark = Some(self.watermark.map_or(watermark.0, |w| w.max(watermark.0)));
        if let Target::Other(sink) = &mut self.target {
            sink.on_watermark(watermark).await?;
        }
        if self.pending.is_none() {
            let written = self.write_markers(false);
            self.fenced_if_so(written)?;
        }
        Ok(())
    }

    async fn pre_commit(&mut self, epoch: u64) -> Result<Option<Vec<u8>>> {
        let flushed = self.flush_for(Some(epoch)).await;
        self.fenced_if_so(flushed)
    }

    fn awaiting_commit(&self) -> Option<u64> {
        match self.pending {
            Some(Some(e)) => Some(e),
            _ => None,
        }
    }

    async fn commit(&mut self, epoch: u64) -> Result<()> {
        let committed = self.commit_now(epoch).await;
        self.fenced_if_so(committed)
    }

    /// The worker has fenced the ids earlier runs may have used before starting the task,
    /// and the sink starts past them (`Seqs`).
    async fn restore(&mut self, epoch: u64, state: Option<&[u8]>) -> Result<()> {
        weir_core::fault::pause("worker_restore");
        let inner = match state {
            Some(state) => decode_state(state, &self.name)?.1,
            None => None,
        };
        if let Target::Other(sink) = &mut self.target {
            sink.restore(epoch, inner.as_deref()).await?;
        }
        Ok(())
    }

    async fn pre_commit_final(&mut self) -> Result<Option<Vec<u8>>> {
        let flushed = self.flush_for(None).await;
        self.fenced_if_so(flushed)
    }

    async fn finish(&mut self) -> Result<()> {
        if let Target::Other(sink) = &mut self.target {
            sink.finish().await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_sinks_state_round_trips_and_a_damaged_one_is_an_error() {
        let state = encode_state(7, Some(&[0, 1, 0xab])).expect("encode");
        assert_eq!(decode_state(&state, "task 1/0").expect("decode"), (7, Some(vec![0, 1, 0xab])));
        assert_eq!(next_transaction(Some(&state), "task 1/0").expect("next"), 7);
        assert_eq!(next_transaction(None, "task 1/0").expect("a fresh start"), 1);
        let e = next_transaction(Some(b"{\"next\": 3"), "task 1/0").expect_err("damaged");
        assert!(e.to_string().contains("task 1/0") && e.to_string().contains("damaged"), "{e}");
        let old = br#"{"format":"weir-worker-sink","version":0,"next":3,"inner":null}"#;
        let e = decode_state(old, "task 1/0").expect_err("another version");
        assert!(e.to_string().contains("version 0"), "{e}");
        let odd = br#"{"format":"weir-worker-sink","version":1,"next":3,"inner":"abc"}"#;
        assert!(decode_state(odd, "task 1/0").is_err(), "an inner state that is not hex");
    }

    #[test]
    fn commit_metadata_names_the_checkpoint_and_the_last() {
        assert_eq!(parse_commit_metadata(&commit_metadata(12, false)), Some((12, false)));
        assert_eq!(parse_commit_metadata(&commit_metadata(3, true)), Some((3, true)));
        assert_eq!(parse_commit_metadata("weir:x"), None);
        assert_eq!(parse_commit_metadata("other"), None);
    }
}

//! Writing a Kafka topic, one record per row (key from `'key.fields'`, so Kafka's
//! partitioner keeps a key in one partition). An `upsert-kafka` table is keyed by its primary
//! key and takes an updating input: `+I` and `+U` write the key's new value, `-D` a tombstone
//! (a record without a value), and `-U` nothing (the `+U` after it replaces it).
//!
//! `exactly-once`: the rows between barrier `n - 1` and barrier `n` go into one Kafka
//! transaction, with a transactional id of its own, `<prefix>-<task>-<s>`, where `s` counts
//! the task's transactions (committing one after a crash can then touch nothing else). On
//! barrier `n` the transaction is flushed (pre-commit) and its id, producer id and producer
//! epoch go into checkpoint `n`, with the next `s`; rows after the barrier go into the next
//! transaction. When checkpoint `n` is complete, transactions up to `n` are committed.
//!
//! After a restart from checkpoint `n`, the transactions it recorded are committed as their
//! producers would have ([`super::txn`]: a crash between checkpoint completion and commit
//! loses nothing and duplicates nothing). Then [`super::recovery`] ends every transaction that
//! attempts after `n` may have left open, whatever the moment they died (it states the
//! invariant that makes them all reachable), and the attempt starts past every id it
//! initialized: each id carries one transaction, ever.
//!
//! `at-least-once`: an idempotent producer, flushed at every barrier. `none`: no flush.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use rdkafka::error::KafkaError;
use rdkafka::producer::{Producer, PurgeConfig};
use serde::{Deserialize, Serialize};
use weir_core::two_phase::{Committer, Earlier, TwoPhaseCommitSink};
use weir_core::{Chunk, Result, Sink, Split, TableDef, WeirError};

use super::client::Cluster;
use super::producer::{flush, serve, KafkaProducer, SinkContext};
use super::recovery;
use super::txn::{self, PreCommitted};
use super::writer::TopicWriter;
use super::Delivery;

const FLUSH_TIMEOUT: Duration = Duration::from_secs(60);

/// A producer and the context its events reach.
type Initialized = (KafkaProducer, SinkContext);

/// The next transaction's producer: being made on a thread of its own, or made.
enum Prepared {
    Starting(std::thread::JoinHandle<Result<Initialized>>),
    Ready(Result<Initialized>),
}

impl Prepared {
    fn join(self) -> Result<Initialized> {
        match self {
            Prepared::Starting(handle) => {
                handle.join().map_err(|_| WeirError::internal("the thread preparing a Kafka producer panicked"))?
            }
            Prepared::Ready(made) => made,
        }
    }
}

/// A transactional producer with the id `transactional_id`, initialized: whatever an earlier
/// producer with that id left open is aborted, and that producer is fenced.
fn init_producer(
    mut config: rdkafka::ClientConfig,
    transactional_id: String,
    table: &str,
    topic: &str,
) -> Result<Initialized> {
    config.set("transactional.id", &transactional_id);
    let context = SinkContext::default();
    let producer: KafkaProducer =
        config.create_with_context(context.clone()).map_err(|e| kafka_error("cannot create a producer", e))?;
    // A new librdkafka client asks for its producer id before a connection to a broker it
    // knows by id is up, finds none, and asks again only on its 500 ms coordinator timer. Two
    // metadata requests first: the first, through the bootstrap address, names the brokers
    // (and retires the bootstrap connection); the second goes to one of them, so a broker is
    // up when the producer id is asked for, and it comes in a round trip.
    for _ in 0..2 {
        producer
            .client()
            .fetch_metadata(Some(topic), FLUSH_TIMEOUT)
            .map_err(|e| kafka_error("cannot read the topic's metadata", e))?;
    }
    producer.init_transactions(FLUSH_TIMEOUT).map_err(|e| kafka_error("cannot initialize transactions", e))?;
    log::debug!("Kafka sink of '{table}': initialized '{transactional_id}' for a coming transaction");
    Ok((producer, context))
}

fn kafka_error(what: &str, e: KafkaError) -> WeirError {
    let message = format!("Kafka: {what}: {e}");
    if is_fenced(&e) {
        fenced(message)
    } else {
        WeirError::external(message)
    }
}

/// A newer producer with the same transactional id exists: another instance of the job.
fn is_fenced(e: &KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode::{InvalidProducerEpoch, ProducerFenced};
    matches!(e.rdkafka_error_code(), Some(ProducerFenced | InvalidProducerEpoch))
        || e.to_string().to_lowercase().contains("fenced")
}

fn fenced(message: String) -> WeirError {
    WeirError::fenced(format!(
        "{message}: another instance of this job has taken over its Kafka transactions; this one stops"
    ))
}

/// A transaction being written or waiting for its checkpoint.
struct Transaction {
    epoch: u64,
    /// Its number among the task's transactions, in its id.
    seq: u64,
    producer: KafkaProducer,
    context: SinkContext,
    id: PreCommitted,
}

pub struct KafkaSink {
    table: String,
    topic: String,
    /// How exactly-once recovery reaches the cluster: as the table's librdkafka clients do.
    cluster: Option<Cluster>,
    delivery: Delivery,
    config: rdkafka::ClientConfig,
    prefix: String,
    task: usize,
    txn_timeout: Duration,
    /// The rows since the last barrier (exactly-once: in this transaction).
    epoch: u64,
    /// The number of the next transaction opened.
    next_seq: u64,
    open: Option<Transaction>,
    /// The producer of the next transaction, created and initialized while `open` is written
    /// (its transaction number, and the thread doing it or what it made).
    prepared: Option<(u64, Prepared)>,
    /// Threads closing committed producers. Joined before the sink is gone: a librdkafka
    /// client still running when the process exits races OpenSSL's clean-up (a crash).
    closing: Vec<std::thread::JoinHandle<()>>,
    /// Pre-committed, waiting for their checkpoint to complete (the checkpoint records
    /// their ids; these are the producers that commit them).
    waiting: Vec<Transaction>,
    /// At-least-once and none: one producer for the job.
    plain: Option<Initialized>,
    writer: TopicWriter,
    /// Rows written since this sink was made (fault injection: a kill during an attempt's
    /// first transaction).
    wrote: bool,
}

impl KafkaSink {
    pub fn new(table: &TableDef, schema: SchemaRef, split: Split) -> Result<Self> {
        if table.options.get("topic-pattern").is_some() {
            return Err(WeirError::user(format!(
                "table '{}' reads a 'topic-pattern': it cannot be written (give 'topic')",
                table.name
            )));
        }
        let delivery = super::delivery(table)?;
        let fixed: Vec<(&str, &str)> = match delivery {
            Delivery::ExactlyOnce => vec![("enable.idempotence", "true"), ("statistics.interval.ms", "50")],
            Delivery::AtLeastOnce => vec![("enable.idempotence", "true")],
            Delivery::None => vec![],
        };
        let mut config = super::client_config(table, &fixed)?;
        let txn_timeout = super::transaction_timeout(table)?;
        if delivery == Delivery::ExactlyOnce {
            config.set("transaction.timeout.ms", txn_timeout.as_millis().to_string());
        }
        let writer = TopicWriter::new(table, &schema)?;
        Ok(Self {
            table: table.name.clone(),
            topic: super::topic(table)?,
            cluster: match delivery {
                Delivery::ExactlyOnce => Some(Cluster::of_table(table)?),
                _ => None,
            },
            delivery,
            config,
            prefix: table.options.get("sink.transactional-id-prefix").unwrap_or_default().to_string(),
            task: split.index,
            txn_timeout,
            epoch: 1,
            next_seq: 1,
            open: None,
            prepared: None,
            closing: Vec::new(),
            waiting: Vec::new(),
            plain: None,
            writer,
            wrote: false,
        })
    }

    /// The task's transactional ids are `<base>-<s>`.
    fn cluster(&self) -> Result<Cluster> {
        self.cluster
            .clone()
            .ok_or_else(|| WeirError::internal("transaction recovery in a sink that is not exactly-once"))
    }

    fn id_base(&self) -> String {
        format!("{}-{}", self.prefix, self.task)
    }

    fn transactional_id(&self, seq: u64) -> String {
        format!("{}-{seq}", self.id_base())
    }

    /// A transactional producer for transaction `seq`'s id, initialized: whatever an
    /// earlier producer with that id left open is aborted, and that producer is fenced.
    fn transactional_producer(&self, seq: u64) -> Result<Initialized> {
        init_producer(self.config.clone(), self.transactional_id(seq), &self.table, &self.topic)
    }

    /// The producer of transaction `seq`: the one prepared for it while the transaction
    /// before was open, or a new one.
    fn producer_for(&mut self, seq: u64) -> Result<Initialized> {
        match self.prepared.take() {
            Some((s, prepared)) if s == seq => prepared.join(),
            _ => self.transactional_producer(seq),
        }
    }

    fn begin(&mut self) -> Result<&mut Transaction> {
        if self.open.is_none() {
            let seq = self.next_seq;
            let (producer, context) = self.producer_for(seq)?;
            weir_core::fault::pause("kafka_begin");
            producer.begin_transaction().map_err(|e| kafka_error("cannot begin a transaction", e))?;
            log::debug!(
                "Kafka sink of '{}': began transaction '{}' for checkpoint {}",
                self.table,
                self.transactional_id(seq),
                self.epoch
            );
            let id = PreCommitted { transactional_id: self.transactional_id(seq), producer_id: -1, producer_epoch: -1 };
            self.next_seq = seq + 1;
            self.open = Some(Transaction { epoch: self.epoch, seq, producer, context, id });
            // Creating and initializing a producer takes round trips to the cluster (and
            // librdkafka's start): the next transaction's is made now, off the task, so that
            // the first row after the barrier does not wait for it. Ids are still initialized
            // in increasing order without a gap, which is what recovery's probe relies on.
            let (config, id) = (self.config.clone(), self.transactional_id(seq + 1));
            let (table, topic) = (self.table.clone(), self.topic.clone());
            let handle = std::thread::Builder::new()
                .name("kafka-producer-init".into())
                .spawn(move || init_producer(config, id, &table, &topic))
                .map_err(|e| WeirError::internal(format!("cannot start a thread: {e}")))?;
            self.prepared = Some((seq + 1, Prepared::Starting(handle)));
        }
        self.open.as_mut().ok_or_else(|| WeirError::internal("no open transaction"))
    }

    fn plain(&mut self) -> Result<&Initialized> {
        if self.plain.is_none() {
            let context = SinkContext::default();
            let producer: KafkaProducer = self
                .config
                .create_with_context(context.clone())
                .map_err(|e| kafka_error("cannot create a producer", e))?;
            self.plain = Some((producer, context));
        }
        self.plain.as_ref().ok_or_else(|| WeirError::internal("no producer"))
    }

    fn flush_plain(&self) -> Result<()> {
        if let Some((producer, context)) = &self.plain {
            super::blocking(|| flush(producer, FLUSH_TIMEOUT)).map_err(|e| kafka_error("cannot flush", e))?;
            Self::check(context, &self.table)?;
        }
        Ok(())
    }

    fn check(context: &SinkContext, table: &str) -> Result<()> {
        let error = context.0.lock().ok().and_then(|mut o| o.error.take());
        match error {
            Some(e) => Err(WeirError::external(format!("Kafka: writing table '{table}' failed: {e}"))),
            None => Ok(()),
        }
    }

    /// Flush and learn the producer id and epoch (librdkafka's statistics carry them).
    fn pre_commit_open(&mut self) -> Result<Option<Transaction>> {
        let Some(mut t) = self.open.take() else { return Ok(None) };
        let started = Instant::now();
        flush(&t.producer, FLUSH_TIMEOUT).map_err(|e| kafka_error("cannot flush a transaction", e))?;
        log::debug!("Kafka sink of '{}': flushed in {} ms", self.table, started.elapsed().as_millis());
        Self::check(&t.context, &self.table)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some((id, epoch)) = t.context.0.lock().ok().and_then(|o| o.producer) {
                t.id.producer_id = id;
                t.id.producer_epoch = epoch;
                log::debug!(
                    "Kafka sink of '{}': pre-committed transaction '{}' (producer id {id}, epoch {epoch}) for checkpoint {}",
                    self.table,
                    t.id.transactional_id,
                    t.epoch
                );
                break;
            }
            if Instant::now() > deadline {
                return Err(WeirError::external("Kafka: the producer did not report its producer id"));
            }
            std::thread::sleep(Duration::from_millis(10));
            // Its statistics carry it: they come as events.
            serve(&t.producer);
        }
        Ok(Some(t))
    }

    /// Serve the producers no row goes through: the next transaction's, once made, and those
    /// waiting for their checkpoint. librdkafka queues their statistics (every 50 ms, a few
    /// KiB each) until they are served, so a sink whose source has gone quiet would grow by
    /// them; this runs at every chunk and every barrier, which keeps it to an interval's.
    fn serve_idle(&mut self) {
        if let Some((seq, Prepared::Starting(handle))) = &self.prepared {
            if handle.is_finished() {
                let seq = *seq;
                if let Some((_, prepared)) = self.prepared.take() {
                    self.prepared = Some((seq, Prepared::Ready(prepared.join())));
                }
            }
        }
        if let Some((_, Prepared::Ready(Ok((producer, _))))) = &self.prepared {
            serve(producer);
        }
        for t in &self.waiting {
            serve(&t.producer);
        }
    }

    /// Dropping a producer stops librdkafka's threads, and first serves what it still has
    /// queued (statistics, at the least) in polls of up to 100 ms: done off the task, so that a
    /// commit does not hold up the rows behind it.
    fn close_in_background(&mut self, t: Transaction) {
        self.closing.retain(|h| !h.is_finished());
        // If no thread can be started, the closure, and `t` with it, is dropped here.
        if let Ok(handle) = std::thread::Builder::new().name("kafka-producer-close".into()).spawn(move || drop(t)) {
            self.closing.push(handle);
        }
    }

    /// Wait for the threads this sink started (the next producer's, closing ones): none of
    /// its librdkafka clients outlives it.
    fn join_background(&mut self) {
        if let Some((_, prepared)) = self.prepared.take() {
            drop(prepared.join());
        }
        for handle in self.closing.drain(..) {
            drop(handle.join());
        }
    }

    fn commit_one(&self, t: &Transaction) -> Result<()> {
        log::debug!(
            "Kafka sink of '{}': committing transaction '{}' (producer id {}, epoch {}) of checkpoint {}",
            self.table,
            t.id.transactional_id,
            t.id.producer_id,
            t.id.producer_epoch,
            t.epoch
        );
        let started = Instant::now();
        let committed = t.producer.commit_transaction(FLUSH_TIMEOUT);
        log::debug!("Kafka sink of '{}': committed in {} ms", self.table, started.elapsed().as_millis());
        committed.map_err(|e| {
            let message =
                format!("Kafka: committing the output of checkpoint {} to table '{}' failed: {e}", t.epoch, self.table);
            if is_fenced(&e) {
                fenced(message)
            } else {
                WeirError::external(message)
            }
        })
    }
}

/// The job's Kafka sink: a [`KafkaSink`] committed with the checkpoints under
/// `exactly-once`, the producer alone otherwise.
pub fn sink(table: &TableDef, schema: SchemaRef, split: Split) -> Result<Box<dyn Sink>> {
    let sink = KafkaSink::new(table, schema, split)?;
    Ok(match sink.delivery {
        Delivery::ExactlyOnce => Box::new(TwoPhaseCommitSink::new(sink, split.index)),
        _ => Box::new(sink),
    })
}

/// What the task keeps for a restore beside its pre-committed transactions.
#[derive(Serialize, Deserialize)]
pub struct Recovery {
    /// The number of the next transaction after a restore from here: the open transaction's
    /// (its rows are not in this checkpoint), or the next one's.
    next: u64,
}

impl Default for Recovery {
    fn default() -> Self {
        Self { next: 1 }
    }
}

/// A sink dropped with a transaction still open (its task failed, or another instance of the
/// job took over and this one stops): the transaction is aborted, so that it does not hold
/// back `read_committed` readers until the broker times it out (a broker may never do so).
/// It is in no checkpoint, so nothing is lost. Pre-committed transactions are left alone: a
/// completed checkpoint may list them, for the next restore to commit.
impl Drop for KafkaSink {
    fn drop(&mut self) {
        self.join_background();
        if let Some(t) = self.open.take() {
            // Aborting waits for every message to be gone, reports served (nothing else
            // polls the producer): what is queued is purged, what is in flight delivered.
            t.producer.purge(PurgeConfig::default().queue());
            let delivered = flush(&t.producer, Duration::from_secs(2));
            if let Err(e) = delivered.and_then(|()| t.producer.abort_transaction(Duration::from_secs(2))) {
                log::debug!(
                    "Kafka: the open transaction of table '{}' task {} was not aborted: {e}",
                    self.table,
                    self.task
                );
            }
        }
    }
}

/// `at-least-once` and `none`.
#[async_trait]
impl Sink for KafkaSink {
    async fn write_chunk(&mut self, chunk: Chunk) -> Result<()> {
        self.writer.check(&chunk)?;
        if chunk.num_rows() == 0 {
            return Ok(());
        }
        self.writer.prepare(&chunk.schema()).await?;
        self.plain()?;
        let Some((producer, context)) = &self.plain else { return Err(WeirError::internal("no producer")) };
        // Sending waits while librdkafka's queue is full: off the runtime's worker threads.
        let writer = &self.writer;
        super::blocking(|| writer.write(producer, &chunk))?;
        serve(producer);
        Self::check(context, &self.table)
    }

    async fn pre_commit(&mut self, _epoch: u64) -> Result<Option<Vec<u8>>> {
        if self.delivery == Delivery::AtLeastOnce {
            self.flush_plain()?;
        }
        Ok(None)
    }

    async fn finish(&mut self) -> Result<()> {
        self.flush_plain()
    }
}

/// `exactly-once`: one transaction per checkpoint.
#[async_trait]
impl Committer for KafkaSink {
    type PreCommit = PreCommitted;
    type Recovery = Recovery;
    const KIND: &'static str = "kafka";
    const VERSION: u32 = 1;
    const RESCALES: bool = false;

    fn describe(&self) -> String {
        format!("the Kafka sink of table '{}' (task {})", self.table, self.task)
    }

    async fn write(&mut self, chunk: Chunk) -> Result<()> {
        self.writer.check(&chunk)?;
        if chunk.num_rows() == 0 {
            return Ok(());
        }
        self.writer.prepare(&chunk.schema()).await?;
        super::blocking(|| self.begin())?;
        let Some(t) = &self.open else { return Err(WeirError::internal("no open transaction")) };
        // Sending waits while librdkafka's queue is full: off the runtime's worker threads.
        let writer = &self.writer;
        super::blocking(|| writer.write(&t.producer, &chunk))?;
        serve(&t.producer);
        Self::check(&t.context, &self.table)?;
        self.serve_idle();
        if !self.wrote {
            self.wrote = true;
            weir_core::fault::pause("kafka_first_write");
        }
        Ok(())
    }

    async fn pre_commit(&mut self, epoch: u64) -> Result<Option<PreCommitted>> {
        self.serve_idle();
        let pre_committed = super::blocking(|| self.pre_commit_open())?;
        self.epoch = epoch + 1;
        Ok(pre_committed.map(|t| {
            let id = t.id.clone();
            self.waiting.push(t);
            id
        }))
    }

    fn recovery(&self) -> Recovery {
        Recovery { next: self.open.as_ref().map_or(self.next_seq, |t| t.seq) }
    }

    async fn commit(&mut self, _epoch: u64, pre_commit: &PreCommitted) -> Result<()> {
        let Some(at) = self.waiting.iter().position(|t| t.id.transactional_id == pre_commit.transactional_id) else {
            return Err(WeirError::internal(format!(
                "Kafka sink of '{}': no producer for transaction '{}'",
                self.table, pre_commit.transactional_id
            )));
        };
        let t = self.waiting.remove(at);
        super::blocking(|| self.commit_one(&t))?;
        self.close_in_background(t);
        Ok(())
    }

    async fn recover(&mut self, epoch: u64, earlier: Vec<Earlier<PreCommitted, Recovery>>) -> Result<()> {
        self.epoch = epoch + 1;
        // 1. Commit what checkpoint `epoch` pre-committed: it is complete.
        let mut next_seq = 1;
        for old in earlier {
            if old.task == self.task {
                next_seq = old.recovery.next;
            }
            for (e, id) in old.pre_commits {
                let (cluster, timeout, name) = (self.cluster()?, FLUSH_TIMEOUT, id.transactional_id.clone());
                let outcome = tokio::task::spawn_blocking(move || txn::commit(&cluster, &id, timeout))
                    .await
                    .map_err(|e| WeirError::internal(format!("transaction recovery: {e}")))??;
                weir_core::fault::pause("kafka_restore_commit");
                if let txn::Outcome::Superseded(code) = outcome {
                    return Err(WeirError::external(format!(
                        "Kafka: the output of checkpoint {e} to table '{}' (transaction '{name}') cannot be committed: \
                         the broker ended that transaction otherwise (error code {code}); it was aborted, for instance \
                         after 'transaction.timeout.ms' ({} ms), and checkpoint {e}'s rows are lost from the topic",
                        self.table,
                        self.txn_timeout.as_millis()
                    )));
                }
            }
        }
        // 2. End what attempts after it left open, fence them, and start past every id used.
        let (cluster, base, txn_timeout) = (self.cluster()?, self.id_base(), self.txn_timeout);
        let began = Instant::now();
        let first = tokio::task::spawn_blocking(move || {
            recovery::end_earlier_attempts(&cluster, &base, next_seq, txn_timeout, FLUSH_TIMEOUT)
        })
        .await
        .map_err(|e| WeirError::internal(format!("transaction recovery: {e}")))??;
        log::debug!(
            "Kafka sink of '{}', task {}: restored checkpoint {epoch} (next id '{}'); its first transaction is '{}' \
             (earlier attempts' transactions ended in {:?})",
            self.table,
            self.task,
            self.transactional_id(next_seq),
            self.transactional_id(first),
            began.elapsed()
        );
        self.next_seq = first;
        Ok(())
    }

    /// Without checkpoints: commit at the end (with them, the final checkpoint has).
    async fn finish(&mut self) -> Result<()> {
        if let Some(t) = self.open.take() {
            super::blocking(|| flush(&t.producer, FLUSH_TIMEOUT)).map_err(|e| kafka_error("cannot flush", e))?;
            Self::check(&t.context, &self.table)?;
            super::blocking(|| self.commit_one(&t))?;
        }
        for t in std::mem::take(&mut self.waiting) {
            super::blocking(|| self.commit_one(&t))?;
        }
        super::blocking(|| self.join_background());
        Ok(())
    }
}

//! The `jdbc` sink task. Changes are buffered and written in flushes ([`super::write`]):
//!
//! - `at-least-once`: a flush when the buffer holds `'sink.buffer-flush.max-rows'` rows, when
//!   it is older than `'sink.buffer-flush.interval'` (on a timer the runtime keeps),
//!   and at every barrier, each flush committed on its own. With a primary key a replay
//!   rewrites the same final values; without one it appends them again.
//! - `none`: the same without the flush at barriers.
//! - `exactly-once`: a checkpoint's changes go into one transaction, prepared at its barrier
//!   and committed when the checkpoint completes ([`super::xa`]). They are written as the
//!   buffer fills, but only while no earlier transaction of the task is prepared and not yet
//!   committed: a prepared transaction holds its rows' locks, and this task, blocked on them,
//!   could not run the `COMMIT PREPARED` that frees them. The runtime hands a sink a
//!   checkpoint's completion before the next barrier, so a transaction still prepared at the
//!   next barrier belongs to a checkpoint that was given up: it is rolled back, and its
//!   changes written again, first, in the next transaction. Changes stay in memory until
//!   committed, so that a lost connection (and the open transaction with it) loses nothing.
//!
//! A connection that fails is opened again, with backoff, up to `'sink.max-retries'` times
//! for each write; then the job fails and restarts from its checkpoint. No row is skipped.

use std::time::Instant;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use serde::{Deserialize, Serialize};
use tokio_postgres::Client;
use weir_core::two_phase::{Committer, Earlier, TwoPhaseCommitSink};
use weir_core::{Chunk, Result, Sink, Split, TableDef, WeirError};

use super::check::{check_with, Target};
use super::write::{flush, Buffer, Failure, Statements};
use super::xa::{application, backoff, gid, TakeOver, Xa};
use super::{Delivery, Settings};

struct Conn {
    client: Client,
    target: Target,
    statements: Statements,
}

/// What opening a connection needs.
struct Opener {
    table: TableDef,
    settings: Settings,
    application: String,
}

impl Opener {
    async fn open(&self) -> Result<Conn, Failure> {
        let client = self.settings.endpoint.connect(&self.application).await?;
        // A sink's transaction stays open, between writes, until its checkpoint's barrier;
        // the server's timeouts for idle (and, from PostgreSQL 17, any) transactions would end
        // it, each time, and a retry would write the whole checkpoint again. The session
        // lifts them (a user may set both); prepared transactions never time out.
        client
            .batch_execute(
                "SET idle_in_transaction_session_timeout = 0; \
                 SELECT set_config('transaction_timeout', '0', false) \
                 WHERE current_setting('server_version_num')::int >= 170000",
            )
            .await?;
        let target = check_with(&client, &self.table, &self.settings).await?;
        let statements = Statements::new(&target);
        Ok(Conn { client, target, statements })
    }
}

/// Run `$body` (an expression that may `.await`, giving `Result<_, Failure>`) with `$c` the
/// connection, opened first if needed, and `$attempt` the retry number; a connection failure
/// (in `$body` or in opening) is retried on a new connection up to `'sink.max-retries'`
/// times. A macro rather than a closure: the body borrows the sink's fields, and the
/// futures must stay `Send`.
macro_rules! with_retries {
    ($conn:expr, $opener:expr, $what:expr, |$c:ident, $attempt:ident| $body:expr) => {{
        let mut $attempt: u32 = 0;
        loop {
            let opened: Result<(), Failure> = match $conn.is_some() {
                true => Ok(()),
                false => $opener.open().await.map(|c| *$conn = Some(c)),
            };
            let outcome = match (opened, $conn.as_ref()) {
                (Ok(()), Some($c)) => $body.await,
                (Ok(()), None) => Err(Failure::Weir(WeirError::internal("no connection"))),
                (Err(e), _) => Err(e),
            };
            match outcome {
                Ok(v) => break Ok::<_, WeirError>(v),
                Err(failure) => match give_up($conn, $opener, failure, $attempt, $what) {
                    Some(error) => break Err(error),
                    None => {
                        $attempt += 1;
                        tokio::time::sleep(backoff($attempt)).await;
                    }
                },
            }
        }
    }};
}

/// After a failed try: the error to fail with, or `None` to retry (the connection dropped).
fn give_up(conn: &mut Option<Conn>, opener: &Opener, failure: Failure, attempt: u32, what: &str) -> Option<WeirError> {
    let connection_lost = failure.retryable() || conn.as_ref().is_some_and(|c| c.client.is_closed());
    let error = match conn.as_ref() {
        Some(c) => failure.into_error(&c.target),
        None => match failure {
            Failure::Lost(e) | Failure::Weir(e) => e,
            Failure::Pg(e) => WeirError::external(format!("PostgreSQL: {e}")),
        },
    };
    // Not connected: a failure to connect is worth a retry, a wrong table is not.
    let unreachable = conn.is_none() && error.kind == weir_core::ErrorKind::External;
    let max = opener.settings.max_retries;
    if !(connection_lost || unreachable) || attempt >= max {
        return Some(error.context(format!("{what} (table '{}', after {attempt} retries)", opener.table.name)));
    }
    log::warn!("{what} (table '{}'): {error}; retry {} of {max} on a new connection", opener.table.name, attempt + 1);
    *conn = None;
    None
}

/// A prepared transaction waiting for its checkpoint, with its changes (written again if
/// the checkpoint is given up).
struct Prepared {
    gid: String,
    rows: Buffer,
}

pub struct JdbcSink {
    opener: Opener,
    schema: SchemaRef,
    split: Split,
    conn: Option<Conn>,
    buffer: Buffer,
    since: Instant,
    /// Exactly-once: the checkpoint the buffered changes belong to.
    epoch: u64,
    /// Prepared transactions waiting for their checkpoint, oldest first.
    prepared: Vec<Prepared>,
    /// Changes of transactions rolled back with their given-up checkpoints: written first
    /// in the next one.
    redo: Buffer,
    /// Exactly-once: this task's generation once it has taken over.
    generation: Option<i64>,
    /// Exactly-once: a transaction is open on the connection (its lock on the task's row
    /// taken), holding the first `written` chunks of the buffer.
    open: bool,
    written: usize,
    written_rows: usize,
}

impl JdbcSink {
    pub fn new(table: &TableDef, schema: SchemaRef, split: Split) -> Result<Self> {
        let settings = Settings::from_table(table)?;
        let application = application(&settings.prefix, split.index);
        Ok(Self {
            opener: Opener { table: table.clone(), settings, application },
            schema,
            split,
            conn: None,
            buffer: Buffer::default(),
            since: Instant::now(),
            epoch: 1,
            prepared: Vec::new(),
            redo: Buffer::default(),
            generation: None,
            open: false,
            written: 0,
            written_rows: 0,
        })
    }

    fn settings(&self) -> &Settings {
        &self.opener.settings
    }

    /// The bookkeeping of prepared transactions, in the target table's schema.
    async fn xa(&mut self) -> Result<Xa> {
        let opener = &self.opener;
        let schema =
            with_retries!(&mut self.conn, opener, "connecting", |c, _attempt| async { Ok(c.target.schema.clone()) })?;
        Ok(Xa::new(&self.opener.settings.prefix, &schema))
    }

    /// Autocommitted flush of the buffer (at-least-once, none).
    async fn flush_now(&mut self) -> Result<()> {
        if self.buffer.is_empty() {
            self.since = Instant::now();
            return Ok(());
        }
        let (schema, buffer, opener) = (&self.schema, &self.buffer, &self.opener);
        with_retries!(&mut self.conn, opener, "writing", |c, _attempt| async {
            flush(&c.client, &c.statements, &c.target, schema, buffer).await
        })?;
        self.buffer = Buffer::default();
        self.since = Instant::now();
        Ok(())
    }

    /// Take over this task's transactions (and those of `old` tasks at another parallelism)
    /// after a restore from `restored` (0: none).
    async fn take_over(&mut self, restored: u64, old: &[(usize, Vec<(u64, String)>)]) -> Result<()> {
        let xa = self.xa().await?;
        let me = self.split.index;
        let mut parts = vec![TakeOver { task: me, prepared: Vec::new(), fence: true }];
        for (task, prepared) in old {
            if *task == me {
                parts[0].prepared.extend(prepared.iter().cloned());
            } else {
                parts.push(TakeOver { task: *task, prepared: prepared.clone(), fence: *task >= self.split.count });
            }
        }
        // A fresh start: task 0 also rolls back what tasks of an earlier, wider run left.
        let rollback_from = (restored == 0 && me == 0).then_some(self.split.count);
        let opener = &self.opener;
        let generations = with_retries!(&mut self.conn, opener, "taking over", |c, _attempt| async {
            xa.take_over(&c.client, &parts, restored, rollback_from).await
        })?;
        let mine = generations.iter().find(|(t, _)| *t == me).map(|(_, g)| *g);
        self.generation = Some(mine.ok_or_else(|| WeirError::internal("no generation for this task"))?);
        Ok(())
    }

    /// Write the checkpoint's changes in one transaction and prepare it (`None`: there were
    /// none).
    async fn prepare(&mut self, epoch: u64) -> Result<Option<PreCommit>> {
        if self.generation.is_none() {
            self.take_over(0, &[]).await?;
        }
        let generation = self.generation.ok_or_else(|| WeirError::internal("no generation"))?;
        let xa = self.xa().await?;
        // Tests slow the barrier down here, past the checkpoint timeout: the checkpoint is
        // given up and its transactions are left to the next barrier.
        weir_core::fault::pause("postgres_prepare");
        let mut rows = std::mem::take(&mut self.redo);
        // Rows given up with their checkpoint come first; then an open transaction (there is
        // none with such rows) holds the first `written` chunks of this checkpoint's.
        let (open, written) = (self.open && rows.is_empty(), self.written);
        self.open = false;
        self.written = 0;
        self.written_rows = 0;
        rows.append(std::mem::take(&mut self.buffer));
        if rows.is_empty() {
            return Ok(None);
        }
        let name = gid(&self.settings().prefix, self.split.index, epoch);
        let task = self.split.index;
        let (schema, opener) = (&self.schema, &self.opener);
        let fenced = with_retries!(&mut self.conn, opener, "preparing", |c, attempt| async {
            if attempt > 0 && xa.is_prepared(&c.client, &name).await? {
                return Ok(false);
            }
            let fresh = attempt > 0 || !open;
            if fresh {
                c.client.batch_execute("BEGIN").await?;
            }
            let outcome: Result<bool, Failure> = async {
                if fresh && !xa.hold(&c.client, task, generation).await? {
                    return Ok(true);
                }
                let rest = if fresh { rows.clone() } else { rows.since(written) };
                flush(&c.client, &c.statements, &c.target, schema, &rest).await?;
                c.client.batch_execute(&format!("PREPARE TRANSACTION '{}'", name.replace('\'', "''"))).await?;
                Ok(false)
            }
            .await;
            if !matches!(outcome, Ok(false)) {
                let _ = c.client.batch_execute("ROLLBACK").await;
            }
            outcome
        })?;
        if fenced {
            return Err(self.fenced());
        }
        self.prepared.push(Prepared { gid: name.clone(), rows });
        Ok(Some(PreCommit { gid: name }))
    }

    /// Exactly-once, while no transaction is prepared (none can hold locks this one would
    /// wait on): write the buffer's new chunks into the open transaction, opening it first.
    /// The chunks stay in the buffer: a lost connection takes the transaction with it, and
    /// they are written again.
    async fn write_open(&mut self) -> Result<()> {
        if !self.prepared.is_empty() {
            return Ok(());
        }
        if self.generation.is_none() {
            self.take_over(0, &[]).await?;
        }
        let generation = self.generation.ok_or_else(|| WeirError::internal("no generation"))?;
        let xa = self.xa().await?;
        let (open, written, task) = (self.open, self.written, self.split.index);
        let (schema, opener, buffer) = (&self.schema, &self.opener, &self.buffer);
        let fenced = with_retries!(&mut self.conn, opener, "writing", |c, attempt| async {
            let fresh = attempt > 0 || !open;
            if fresh {
                c.client.batch_execute("BEGIN").await?;
                if !xa.hold(&c.client, task, generation).await? {
                    let _ = c.client.batch_execute("ROLLBACK").await;
                    return Ok(true);
                }
            }
            let rest = if fresh { buffer.clone() } else { buffer.since(written) };
            flush(&c.client, &c.statements, &c.target, schema, &rest).await?;
            Ok(false)
        })?;
        if fenced {
            return Err(self.fenced());
        }
        self.open = true;
        self.written = self.buffer.chunks();
        self.written_rows = self.buffer.rows();
        Ok(())
    }

    fn fenced(&self) -> WeirError {
        WeirError::fenced(format!(
            "PostgreSQL: another instance of this job has taken over the sink of table '{}' (task {}); this one stops",
            self.opener.table.name, self.split.index
        ))
    }

    fn flush_due(&self) -> bool {
        self.buffer.rows() >= self.settings().max_rows
            || self.settings().interval.is_some_and(|i| !self.buffer.is_empty() && self.since.elapsed() >= i)
    }
}

/// The job's PostgreSQL sink: a [`JdbcSink`] committed with the checkpoints under
/// `exactly-once`, flushing on its own otherwise.
pub fn sink(table: &TableDef, schema: SchemaRef, split: Split) -> Result<Box<dyn Sink>> {
    let sink = JdbcSink::new(table, schema, split)?;
    Ok(match sink.settings().delivery {
        Delivery::ExactlyOnce => Box::new(TwoPhaseCommitSink::new(sink, split.index)),
        _ => Box::new(sink),
    })
}

/// A checkpoint's prepared transaction.
#[derive(Serialize, Deserialize)]
pub struct PreCommit {
    gid: String,
}

/// `at-least-once` and `none`: flushes committed on their own.
#[async_trait]
impl Sink for JdbcSink {
    async fn write_chunk(&mut self, chunk: Chunk) -> Result<()> {
        if chunk.num_rows() == 0 {
            return Ok(());
        }
        if self.buffer.is_empty() {
            self.since = Instant::now();
        }
        self.buffer.push(chunk);
        if self.flush_due() {
            self.flush_now().await?;
        }
        Ok(())
    }

    async fn on_watermark(&mut self, _: weir_core::Watermark) -> Result<()> {
        if self.flush_due() {
            self.flush_now().await?;
        }
        Ok(())
    }

    fn next_timer(&self) -> Option<Instant> {
        match self.buffer.is_empty() {
            true => None,
            false => self.settings().interval.map(|i| self.since + i),
        }
    }

    async fn on_timer(&mut self) -> Result<()> {
        if self.flush_due() {
            self.flush_now().await?;
        }
        Ok(())
    }

    async fn pre_commit(&mut self, _epoch: u64) -> Result<Option<Vec<u8>>> {
        if self.settings().delivery == Delivery::AtLeastOnce {
            self.flush_now().await?;
        }
        Ok(None)
    }

    async fn finish(&mut self) -> Result<()> {
        self.flush_now().await
    }
}

/// `exactly-once`: one prepared transaction per checkpoint.
#[async_trait]
impl Committer for JdbcSink {
    type PreCommit = PreCommit;
    type Recovery = ();
    const KIND: &'static str = "postgres";
    const VERSION: u32 = 1;
    const WAITS_FOR_COMMIT: bool = true;

    fn describe(&self) -> String {
        format!("the PostgreSQL sink of table '{}' (task {})", self.opener.table.name, self.split.index)
    }

    async fn write(&mut self, chunk: Chunk) -> Result<()> {
        if chunk.num_rows() == 0 {
            return Ok(());
        }
        self.buffer.push(chunk);
        if self.buffer.rows() - self.written_rows >= self.settings().max_rows {
            self.write_open().await?;
        }
        Ok(())
    }

    async fn pre_commit(&mut self, epoch: u64) -> Result<Option<PreCommit>> {
        let prepared = self.prepare(epoch).await?;
        self.epoch = epoch + 1;
        Ok(prepared)
    }

    /// Rolled back, and their changes written again first in the next transaction: a
    /// prepared transaction holds its rows' locks, which the next one would wait on.
    async fn given_up(&mut self, pending: &[(u64, &PreCommit)]) -> Result<bool> {
        let xa = self.xa().await?;
        for (e, pre_commit) in pending {
            let Some(at) = self.prepared.iter().position(|p| p.gid == pre_commit.gid) else { continue };
            let p = self.prepared.remove(at);
            log::info!("checkpoint {e} was given up: its transaction '{}' is rolled back and written again", p.gid);
            let opener = &self.opener;
            with_retries!(&mut self.conn, opener, "rolling back", |c, _attempt| async {
                xa.rollback_one(&c.client, &p.gid).await
            })?;
            self.redo.append(p.rows);
        }
        Ok(true)
    }

    async fn commit(&mut self, _epoch: u64, pre_commit: &PreCommit) -> Result<()> {
        let xa = self.xa().await?;
        let opener = &self.opener;
        with_retries!(&mut self.conn, opener, "committing", |c, _attempt| async {
            xa.commit(&c.client, &pre_commit.gid).await
        })?;
        weir_core::fault::pause("postgres_committed");
        self.prepared.retain(|p| p.gid != pre_commit.gid);
        Ok(())
    }

    async fn recover(&mut self, epoch: u64, earlier: Vec<Earlier<PreCommit, ()>>) -> Result<()> {
        let old: Vec<(usize, Vec<(u64, String)>)> = earlier
            .into_iter()
            .map(|t| (t.task, t.pre_commits.into_iter().map(|(e, p)| (e, p.gid)).collect()))
            .collect();
        self.epoch = epoch + 1;
        self.take_over(epoch, &old).await
    }

    /// Without checkpoints: everything in one transaction at the end (with them, the final
    /// checkpoint has written it).
    async fn finish(&mut self) -> Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let (open, written) = (self.open, self.written);
        let (schema, buffer, opener) = (&self.schema, &self.buffer, &self.opener);
        with_retries!(&mut self.conn, opener, "writing", |c, attempt| async {
            let fresh = attempt > 0 || !open;
            if fresh {
                c.client.batch_execute("BEGIN").await?;
            }
            let rest = if fresh { buffer.clone() } else { buffer.since(written) };
            match flush(&c.client, &c.statements, &c.target, schema, &rest).await {
                Ok(_) => Ok(c.client.batch_execute("COMMIT").await?),
                Err(e) => {
                    let _ = c.client.batch_execute("ROLLBACK").await;
                    Err(e)
                }
            }
        })?;
        self.buffer = Buffer::default();
        self.open = false;
        self.written = 0;
        self.written_rows = 0;
        Ok(())
    }
}

//! Exactly-once into PostgreSQL: each sink task writes a checkpoint's rows in one
//! transaction, prepared at the barrier (`PREPARE TRANSACTION '<prefix>-<task>-<checkpoint>'`)
//! and committed (`COMMIT PREPARED`) when the checkpoint is complete. A prepared transaction
//! survives the crash of its writer and of the server; only `COMMIT PREPARED` or
//! `ROLLBACK PREPARED` ends it (PostgreSQL never times one out).
//!
//! **Taking over** (every start, fresh or restored): the task
//! 1. ends the sessions of earlier instances of its task (by `application_name`), so that
//!    none holds a transaction open;
//! 2. commits what the restored checkpoint prepared (a transaction already committed is
//!    gone from `pg_prepared_xacts`, and that is success);
//! 3. rolls back every prepared transaction of its task from a later checkpoint (found in
//!    `pg_prepared_xacts`): written by attempts whose checkpoints never completed;
//! 4. raises its task's generation in the bookkeeping table `weir_sink_state` (in the target
//!    table's schema).
//!
//! **Fencing**: every transaction first takes a shared lock on its task's row of
//! `weir_sink_state` at the generation it started with, and stops (fenced) if the row has a
//! newer one. A prepared transaction keeps that lock, so step 4 waits for, and step 3 rolls
//! back, whatever an earlier instance prepared; once the generation is raised, an earlier
//! instance can prepare nothing more, and what it prepared before is rolled back or, if its
//! checkpoint completed, committed by the new instance.

use std::time::Duration;

use tokio_postgres::Client;
use weir_core::WeirError;

use super::write::{is_connection_error, Failure};

/// What the calls here give: a lost connection stays one (the sink retries it on a new
/// connection) even once it carries the statement that met it.
type Result<T, E = Failure> = std::result::Result<T, E>;

/// Name of the bookkeeping table, in the target's schema.
const STATE_TABLE: &str = "weir_sink_state";
/// How long raising the generation waits for an earlier instance's lock before looking
/// again for transactions to roll back.
const LOCK_WAIT: &str = "2s";

/// A prepared transaction's name.
pub fn gid(prefix: &str, task: usize, epoch: u64) -> String {
    format!("{prefix}-{task}-{epoch}")
}

/// The task and checkpoint of one of this sink's transaction names.
pub fn parse_gid(prefix: &str, gid: &str) -> Option<(usize, u64)> {
    let rest = gid.strip_prefix(prefix)?.strip_prefix('-')?;
    let (task, epoch) = rest.split_once('-')?;
    Some((task.parse().ok()?, epoch.parse().ok()?))
}

/// The session name of a task's connections.
pub fn application(prefix: &str, task: usize) -> String {
    // Task first: a long prefix is cut at 63 bytes, and two tasks must never share a name.
    let name = format!("{task}:{prefix}");
    name.chars().take(60).collect()
}

fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

fn pg(what: &str, e: tokio_postgres::Error) -> Failure {
    let error = WeirError::external(format!(
        "PostgreSQL: {what}: {}",
        e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_string())
    ));
    // A server ending the session (57P01) can answer before the socket closes: the error
    // alone must say that the connection is lost.
    if is_connection_error(&e) {
        Failure::Lost(error)
    } else {
        Failure::Weir(error)
    }
}

fn code(e: &tokio_postgres::Error) -> &str {
    e.code().map_or("", |c| c.code())
}

/// One task's part of a take-over: its index, the transactions its restored state prepared
/// (checkpoint, name) and whether this task raises its generation (a task of this run does
/// for its own index, and for old indices no task of this run has).
#[derive(Debug, Clone)]
pub struct TakeOver {
    pub task: usize,
    pub prepared: Vec<(u64, String)>,
    pub fence: bool,
}

pub struct Xa {
    pub prefix: String,
    /// `schema.weir_sink_state`.
    pub state_table: String,
}

impl Xa {
    pub fn new(prefix: &str, schema: &str) -> Self {
        Self { prefix: prefix.to_string(), state_table: format!("{schema}.{STATE_TABLE}") }
    }

    async fn ensure_state_table(&self, client: &Client) -> Result<()> {
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {} (sink text NOT NULL, task integer NOT NULL, generation bigint NOT NULL, \
             PRIMARY KEY (sink, task))",
            self.state_table
        );
        // Two tasks creating it at once: one of them loses the race in the catalog.
        for attempt in 0..3 {
            match client.batch_execute(&sql).await {
                Ok(()) => return Ok(()),
                Err(e) if attempt < 2 && matches!(code(&e), "23505" | "42P07" | "42710") => continue,
                Err(e) => return Err(pg(&format!("cannot create the bookkeeping table {}", self.state_table), e)),
            }
        }
        Ok(())
    }

    /// Commit a prepared transaction; one that is not prepared (any more) was committed.
    pub async fn commit(&self, client: &Client, gid: &str) -> Result<()> {
        match client.batch_execute(&format!("COMMIT PREPARED {}", literal(gid))).await {
            Ok(()) => Ok(()),
            Err(e) if code(&e) == "42704" => Ok(()),
            Err(e) => Err(pg(&format!("COMMIT PREPARED '{gid}'"), e)),
        }
    }

    async fn rollback(&self, client: &Client, gid: &str) -> Result<()> {
        match client.batch_execute(&format!("ROLLBACK PREPARED {}", literal(gid))).await {
            Ok(()) => Ok(()),
            Err(e) if code(&e) == "42704" => Ok(()),
            Err(e) => Err(pg(&format!("ROLLBACK PREPARED '{gid}'"), e)),
        }
    }

    /// This sink's prepared transactions in the database: (name, task, checkpoint).
    async fn prepared(&self, client: &Client) -> Result<Vec<(String, usize, u64)>> {
        let rows = client
            .query(
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND starts_with(gid, $1)",
                &[&format!("{}-", self.prefix)],
            )
            .await
            .map_err(|e| pg("cannot list prepared transactions", e))?;
        let mut out = Vec::new();
        for r in &rows {
            let gid: String = r.try_get(0).map_err(|e| pg("cannot list prepared transactions", e))?;
            if let Some((task, epoch)) = parse_gid(&self.prefix, &gid) {
                out.push((gid, task, epoch));
            }
        }
        Ok(out)
    }

    /// Take over `parts` after a restore from checkpoint `restored` (0: a fresh start); every
    /// prepared transaction of these tasks after it is rolled back, and of tasks at or past
    /// `rollback_from` all of them. Returns the new generation of each fenced task.
    pub async fn take_over(
        &self,
        client: &Client,
        parts: &[TakeOver],
        restored: u64,
        rollback_from: Option<usize>,
    ) -> Result<Vec<(usize, i64)>> {
        if restored > 0 {
            weir_core::fault::pause("postgres_restore");
        }
        self.ensure_state_table(client).await?;
        for attempt in 0.. {
            for part in parts.iter().filter(|p| p.fence) {
                // Sessions of earlier instances; ours is spared. Without the right to end
                // them, the lock wait below still protects correctness.
                let _ = client
                    .execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                         WHERE application_name = $1 AND pid <> pg_backend_pid() AND datname = current_database()",
                        &[&application(&self.prefix, part.task)],
                    )
                    .await;
            }
            for part in parts {
                for (_, gid) in part.prepared.iter().filter(|(e, _)| *e <= restored) {
                    self.commit(client, gid).await?;
                }
            }
            let committed: Vec<&str> = parts
                .iter()
                .flat_map(|p| p.prepared.iter().filter(|(e, _)| *e <= restored).map(|(_, g)| g.as_str()))
                .collect();
            for (gid, task, epoch) in self.prepared(client).await? {
                let ours = parts.iter().any(|p| p.task == task) && epoch > restored;
                let orphan = rollback_from.is_some_and(|f| task >= f);
                if (ours || orphan) && !committed.contains(&gid.as_str()) {
                    log::info!("rolling back '{gid}': its checkpoint never completed");
                    self.rollback(client, &gid).await?;
                }
            }
            match self.raise(client, parts).await {
                Ok(generations) => return Ok(generations),
                // An earlier instance prepared again while we looked: once more.
                Err(e) if code(&e) == "55P03" && attempt < 30 => continue,
                Err(e) => return Err(pg("cannot raise the sink's generation", e)),
            }
        }
        Err(WeirError::internal("take-over loop ended").into())
    }

    async fn raise(&self, client: &Client, parts: &[TakeOver]) -> Result<Vec<(usize, i64)>, tokio_postgres::Error> {
        client.batch_execute(&format!("BEGIN; SET LOCAL lock_timeout = '{LOCK_WAIT}'")).await?;
        let sql = format!(
            "INSERT INTO {0} AS s (sink, task, generation) VALUES ($1, $2, 1) \
             ON CONFLICT (sink, task) DO UPDATE SET generation = s.generation + 1 RETURNING generation",
            self.state_table
        );
        let mut out = Vec::new();
        for part in parts.iter().filter(|p| p.fence) {
            match client
                .query_one(&sql, &[&self.prefix, &(part.task as i32)])
                .await
                .and_then(|r| r.try_get::<_, i64>(0))
            {
                Ok(generation) => out.push((part.task, generation)),
                Err(e) => {
                    let _ = client.batch_execute("ROLLBACK").await;
                    return Err(e);
                }
            }
        }
        client.batch_execute("COMMIT").await?;
        Ok(out)
    }

    /// The first statement of every transaction: a shared lock on the task's row at
    /// `generation`, kept until the transaction ends. `false`: another instance took over.
    pub async fn hold(&self, client: &Client, task: usize, generation: i64) -> Result<bool, tokio_postgres::Error> {
        let sql =
            format!("SELECT 1 FROM {} WHERE sink = $1 AND task = $2 AND generation = $3 FOR SHARE", self.state_table);
        Ok(client.query_opt(&sql, &[&self.prefix, &(task as i32), &generation]).await?.is_some())
    }

    /// Whether transaction `gid` is prepared (its `PREPARE` went through although the reply
    /// was lost).
    pub async fn is_prepared(&self, client: &Client, gid: &str) -> Result<bool, tokio_postgres::Error> {
        Ok(client.query_opt("SELECT 1 FROM pg_prepared_xacts WHERE gid = $1", &[&gid]).await?.is_some())
    }

    pub async fn rollback_one(&self, client: &Client, gid: &str) -> Result<()> {
        self.rollback(client, gid).await
    }
}

/// Backoff before retry `attempt` (1, 2, …): 100 ms doubling, at most 10 s.
pub fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(100u64.saturating_mul(1 << attempt.min(7))).min(Duration::from_secs(10))
}

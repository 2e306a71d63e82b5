//! Changing a job's SQL and keeping its state: `EXPLAIN UPGRADE` and `weir upgrade --check`
//! (what becomes of each part of a checkpoint's state in the new plan), `STOP JOB … WITH
//! SAVEPOINT`, and starting from a savepoint (`execution.savepoint.path`, Flink's key).
//! The verdicts themselves are [`weir_runtime::upgrade`]'s; the same check runs on every
//! restore.

use std::sync::Arc;

use weir_core::{Location, Result, WeirError};
use weir_runtime::checkpoint::Checkpoints;
use weir_runtime::upgrade::Upgrade;
use weir_runtime::{JobState, StreamPlan};
use weir_sql::parser::{ParsedStatement, Statement};
use weir_storage::Storage;

use super::{text_batch, Engine, Outcome, State};

/// What starting one job on a checkpoint would do.
#[derive(Debug, Clone)]
pub struct JobUpgrade {
    pub job: String,
    /// Where the checkpoint was looked for.
    pub at: String,
    /// The checkpoint found, and the verdict on each part; `None`: there is none, and the
    /// job starts from scratch.
    pub found: Option<(u64, Upgrade)>,
}

impl JobUpgrade {
    /// Whether the job would be refused.
    pub fn refused(&self) -> bool {
        self.found.as_ref().is_some_and(|(_, up)| up.refusal().is_some())
    }

    /// A heading, one line per part, and the verdicts counted.
    pub fn describe(&self) -> String {
        let Some((epoch, up)) = &self.found else {
            return format!("Job '{}': no checkpoint in '{}': it starts from scratch\n", self.job, self.at);
        };
        let what = if up.savepoint { "savepoint" } else { "checkpoint" };
        let mut text = format!("Job '{}': from {what} {epoch} in '{}'", self.job, self.at);
        if up.format < weir_runtime::checkpoint::MANIFEST_VERSION {
            // An earlier release's checkpoint: its state restores as it was written.
            text.push_str(&format!(
                " (format version {}, written by an earlier Weir; this one reads it, and the next checkpoint is of \
                 version {})",
                up.format,
                weir_runtime::checkpoint::MANIFEST_VERSION
            ));
        }
        text.push('\n');
        text.push_str(&up.describe());
        let outcome = match up.refusal() {
            Some(_) => "refused: the job would not start",
            None => "the job can start on it",
        };
        text.push_str(&format!("Upgrade: {}; {outcome}\n", up.summary()));
        text
    }
}

impl Engine {
    /// What starting the INSERTs of `plans` as one job would do with the checkpoint at
    /// `from` (a savepoint, or a job's checkpoint storage), else with the one
    /// `execution.savepoint.path` names, else with the job's own latest.
    pub(super) fn upgrade_of(&self, state: &State, plans: Vec<StreamPlan>, from: Option<&str>) -> Result<JobUpgrade> {
        let job = self.prepare(state, plans)?;
        let Some(config) = job.checkpoint else {
            return Err(WeirError::user(format!(
                "job '{}' takes no checkpoints, so it has no state to upgrade: SET 'checkpoint.interval' and \
                 'checkpoint.dir'",
                job.name
            )));
        };
        let storage = match from.or(state.settings.get("execution.savepoint.path")) {
            Some(location) => state.settings.storage_at(location)?,
            None => config.storage.clone(),
        };
        let found = Checkpoints::new(storage.clone()).check(&config.plan)?;
        Ok(JobUpgrade { job: job.name, at: storage.describe(), found })
    }

    /// `EXPLAIN UPGRADE [FROM 'path'] …`: the verdicts, one row per line.
    pub(super) async fn explain_upgrade(
        &self,
        state: &State,
        from: Option<&(String, Location)>,
        inner: &ParsedStatement,
    ) -> Result<Outcome> {
        let plans = self.plans_of(state, inner).await?;
        let from = from.map(|(path, _)| self.resolve_path(path));
        let upgrade = self.upgrade_of(state, plans, from.as_deref()).map_err(|e| e.at(Some(inner.location)))?;
        let lines = upgrade.describe().lines().map(|l| vec![l.to_string()]).collect();
        Ok(Outcome::Table(vec![text_batch(&["upgrade"], lines)?]))
    }

    /// The plans of an INSERT or a statement set's INSERTs.
    async fn plans_of(&self, state: &State, statement: &ParsedStatement) -> Result<Vec<StreamPlan>> {
        match &statement.statement {
            Statement::Insert(q) => Ok(vec![state.planner.plan(q, &statement.tokens, statement.location).await?]),
            Statement::StatementSet(members) => {
                Ok(self.plan_set(state, members).await?.into_iter().map(|(p, _)| p).collect())
            }
            _ => Err(WeirError::user("only an INSERT or a statement set runs as a job")),
        }
    }

    /// `weir upgrade --check`: run a script's statements, except that each job (an INSERT, a
    /// statement set) is checked against its checkpoint instead of started.
    pub async fn check_upgrades(&self, sql: &str, from: Option<&str>) -> Result<Vec<JobUpgrade>> {
        let mut out = Vec::new();
        for statement in self.parse(sql)? {
            match &statement.statement {
                Statement::Insert(_) | Statement::StatementSet(_) => {
                    let state = self.state.lock().await;
                    let at = Some(statement.location);
                    let plans = self.plans_of(&state, &statement).await.map_err(|e| e.at(at))?;
                    out.push(self.upgrade_of(&state, plans, from).map_err(|e| e.at(at))?);
                }
                Statement::Query(_) | Statement::StopJob { .. } => {}
                _ => {
                    self.execute(&statement).await?;
                }
            }
        }
        if from.is_some() && out.len() > 1 {
            return Err(WeirError::user(format!(
                "the script runs {} jobs, and --from names the checkpoint of one: check them one at a time",
                out.len()
            )));
        }
        Ok(out)
    }

    /// `STOP JOB 'name' [WITH SAVEPOINT]`: the job stops after a last checkpoint (its sinks
    /// publish it); with a savepoint, that checkpoint is copied under `state.savepoints.dir`.
    pub(super) async fn stop_job(
        &self,
        state: tokio::sync::MutexGuard<'_, State>,
        name: &str,
        savepoint: bool,
        drain: bool,
    ) -> Result<Outcome> {
        if drain {
            return Err(WeirError::not_supported(
                "STOP JOB … WITH DRAIN (it would end every window with the watermark at its maximum): stop WITH \
                 SAVEPOINT alone",
            ));
        }
        let Some(job) = state.jobs.iter().rev().find(|j| j.name() == name || j.id().to_string() == name).cloned()
        else {
            return Err(WeirError::user(format!("no job '{name}' in this session (SHOW JOBS lists them)")));
        };
        if !matches!(job.state(), JobState::Running) {
            return Err(WeirError::user(format!("job '{name}' is not running ({})", job.state().name())));
        }
        let storage = state.checkpoint_storage.get(&job.id()).cloned();
        let target = match (savepoint, &storage) {
            (false, _) => None,
            (true, None) => {
                return Err(WeirError::user(format!(
                    "job '{name}' takes no checkpoints, and a savepoint is its last one: SET 'checkpoint.interval' \
                     and 'checkpoint.dir' before starting it"
                )))
            }
            (true, Some(_)) => {
                Some(state.settings.get("state.savepoints.dir").map(str::to_string).ok_or_else(|| {
                    WeirError::user("STOP JOB … WITH SAVEPOINT needs a directory: SET 'state.savepoints.dir' = '…'")
                })?)
            }
        };
        let opener = state.settings.clone();
        drop(state);
        job.stop_with_checkpoint();
        job.wait().await?;
        if storage.is_none() {
            // Nothing to stop after: it is cancelled, and a restart starts over.
            return Ok(Outcome::Done(format!("Job '{name}' cancelled (it takes no checkpoints).")));
        }
        if !matches!(job.state(), JobState::Stopped) {
            return Err(WeirError::user(format!(
                "job '{name}' ended before it could stop with a checkpoint ({})",
                job.state().name()
            )));
        }
        let (Some(dir), Some(storage)) = (target, storage) else {
            return Ok(Outcome::Done(format!("Job '{name}' stopped.")));
        };
        let checkpoints = Checkpoints::new(storage);
        let epoch = checkpoints
            .newest_complete()?
            .ok_or_else(|| WeirError::internal(format!("job '{name}' stopped without a checkpoint")))?;
        let location = weir_storage::join(&self.resolve_path(&dir), &format!("savepoint-{}-{epoch}", job.name()));
        let to: Arc<dyn Storage> = opener.storage_at(&location)?;
        checkpoints.export(&to, job.name())?;
        Ok(Outcome::Table(vec![text_batch(&["savepoint path"], vec![vec![location]])?]))
    }

    /// A path of a statement, relative to the script's directory where one is set.
    fn resolve_path(&self, path: &str) -> String {
        match &self.base_dir {
            Some(base) if !weir_storage::is_remote(path) && std::path::Path::new(path).is_relative() => {
                base.join(path).to_string_lossy().into_owned()
            }
            _ => path.to_string(),
        }
    }
}

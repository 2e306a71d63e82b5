//! The embedded engine: a catalog, session settings and the jobs started from it.

use std::path::PathBuf;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use tokio::sync::Mutex;

use weir_connectors::Connectors;
use weir_core::{ConnectorFactory, Location, Result, WeirError};
use weir_runtime::{spawn_job, JobHandle, OperatorSpec, SinkSpec, SinkTarget, StreamPlan};
use weir_sql::parser::{CreateTable, ParsedStatement, Statement};
use weir_sql::types::sql_type_name;
use weir_sql::{parse_script, ObjectKind, Planner};

mod show;
mod state_dir;
mod statement_set;
mod upgrade;
mod web;

use show::{checkpoints_batch, jobs_batch, operators_batch};
use state_dir::job_options;
pub use upgrade::JobUpgrade;

use crate::query::{caller_channel, QueryStream};
use crate::settings::Settings;

/// What running one statement gave.
pub enum Outcome {
    /// A statement that changed the catalog or the settings: a message for the user.
    Done(String),
    /// A complete, small result (`SHOW`, `DESCRIBE`, `EXPLAIN`, `SET`).
    Table(Vec<RecordBatch>),
    /// A bare `SELECT`: its rows as they come.
    Query(QueryStream),
    /// `INSERT INTO`: the job it started.
    Job(JobHandle),
}

struct State {
    planner: Planner,
    settings: Settings,
    jobs: Vec<JobHandle>,
    /// Each job's guarantee, by job id, as `SHOW JOBS` shows it.
    guarantees: std::collections::HashMap<u64, crate::guarantees::Report>,
    queries: u64,
    /// The INSERTs of a statement set begun in the shell (`BEGIN STATEMENT SET`), until `END`.
    pending_set: Option<Vec<ParsedStatement>>,
    /// Each checkpointed job's checkpoint storage, by job id (`STOP JOB … WITH SAVEPOINT`).
    checkpoint_storage: std::collections::HashMap<u64, Arc<dyn weir_storage::Storage>>,
}

/// A Weir engine: run statements, start jobs, read query results.
///
/// Must be used inside a Tokio runtime (jobs run as Tokio tasks).
pub struct Engine {
    state: Mutex<State>,
    connectors: Arc<dyn ConnectorFactory>,
    base_dir: Option<PathBuf>,
    /// Discard existing checkpoints instead of resuming from them.
    from_scratch: bool,
    /// A `weir verify` run: sinks written into scratch copies, sources bounded.
    scratch: Option<crate::scratch::Scratch>,
    /// The jobs the web endpoint shows, and the endpoint once started.
    watched: weir_web::Jobs,
    web: std::sync::Mutex<Option<weir_web::WebServer>>,
}

/// An `INSERT` of a script, planned and not started ([`Engine::plan_inserts`]).
#[derive(Clone)]
pub struct PlannedInsert {
    /// Where the statement starts in the script.
    pub location: weir_core::Location,
    pub sink: Arc<weir_core::TableDef>,
    /// The tables it reads, once each.
    pub sources: Vec<Arc<weir_core::TableDef>>,
    /// The effective guarantee, and what may make its result differ from one run's.
    pub guarantee: crate::guarantees::Report,
    /// Whether the job takes checkpoints.
    pub checkpointed: bool,
}

/// A job ready to run: what [`Engine::prepare_jobs`] gives a worker process (one INSERT
/// each), or the INSERTs of a statement set.
pub struct PreparedJob {
    pub name: String,
    /// Each INSERT's plan, ending in its sink table's schema, and the sink as the job writes
    /// it. In a statement set the tables several INSERTs read are scanned once for all.
    pub branches: Vec<(weir_runtime::Node, Arc<weir_core::TableDef>)>,
    pub options: weir_runtime::JobOptions,
    /// With checkpoints: their settings (`dir` is the job's own directory).
    pub checkpoint: Option<weir_runtime::checkpoint::CheckpointConfig>,
    /// The session's settings when the INSERT ran.
    pub settings: Vec<(String, String)>,
}

impl PreparedJob {
    /// The plan and sink of a job of one INSERT.
    pub fn single(&self) -> Result<(&weir_runtime::Node, &Arc<weir_core::TableDef>)> {
        match self.branches.as_slice() {
            [(root, sink)] => Ok((root, sink)),
            _ => Err(WeirError::internal(format!("job '{}' has {} INSERTs, not one", self.name, self.branches.len()))),
        }
    }
}

impl Default for Engine {
    fn default() -> Self {
        Self::new()
    }
}

fn text_batch(columns: &[&str], rows: Vec<Vec<String>>) -> Result<RecordBatch> {
    let schema =
        Arc::new(Schema::new(columns.iter().map(|c| Field::new(*c, DataType::Utf8, false)).collect::<Vec<_>>()));
    let arrays = (0..columns.len())
        .map(|i| Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r[i].as_str()))) as ArrayRef)
        .collect();
    Ok(RecordBatch::try_new(schema, arrays)?)
}

impl Engine {
    /// An engine with Weir's built-in connectors.
    pub fn new() -> Self {
        Self::with_connectors(Arc::new(Connectors))
    }

    pub fn with_connectors(connectors: Arc<dyn ConnectorFactory>) -> Self {
        Self {
            state: Mutex::new(State {
                planner: Planner::new(connectors.clone()),
                settings: Settings::default(),
                jobs: Vec::new(),
                guarantees: Default::default(),
                queries: 0,
                pending_set: None,
                checkpoint_storage: Default::default(),
            }),
            connectors,
            base_dir: None,
            from_scratch: false,
            scratch: None,
            watched: weir_web::Jobs::default(),
            web: std::sync::Mutex::new(None),
        }
    }

    /// Run the statements that follow against scratch copies of their sinks (`weir verify`).
    pub fn with_scratch(mut self, scratch: crate::scratch::Scratch) -> Self {
        for (key, value) in scratch.pinned_settings() {
            self.state.get_mut().settings.pin(key, &value);
        }
        self.scratch = Some(scratch);
        self
    }

    /// A table of the catalog, as created (a `weir verify` run's scratch copy included).
    pub async fn table(&self, name: &str) -> Option<Arc<weir_core::TableDef>> {
        self.state.lock().await.planner.catalog.tables.get(name).cloned()
    }

    /// Run a script's statements as [`Engine::execute`] does, except that an `INSERT` is
    /// planned and not started, and a bare `SELECT` is skipped: the jobs the script would
    /// start, and what each guarantees.
    pub async fn plan_inserts(&self, sql: &str) -> Result<Vec<PlannedInsert>> {
        self.each_insert(sql, |engine, state, plan, location| {
            let SinkTarget::Table(sink) = &plan.sink else { return Ok(None) };
            Ok(Some(PlannedInsert {
                location,
                sink: sink.clone(),
                sources: plan.root.source_tables(),
                guarantee: engine.guarantee(state, &plan),
                checkpointed: state.settings.checkpoint_config("-", Default::default())?.is_some(),
            }))
        })
        .await
    }

    /// Run a script's statements as [`Engine::execute`] does, except that each `INSERT` is
    /// planned and given to `each` (which may keep something of it), not started, and a bare
    /// `SELECT` is skipped.
    async fn each_insert<T>(
        &self,
        sql: &str,
        mut each: impl FnMut(&Self, &State, StreamPlan, Location) -> Result<Option<T>>,
    ) -> Result<Vec<T>> {
        let mut out = Vec::new();
        for statement in self.parse(sql)? {
            match &statement.statement {
                Statement::Insert(q) => {
                    let state = self.state.lock().await;
                    let at = Some(statement.location);
                    let plan =
                        state.planner.plan(q, &statement.tokens, statement.location).await.map_err(|e| e.at(at))?;
                    if let Some(kept) = each(self, &state, plan, statement.location).map_err(|e| e.at(at))? {
                        out.push(kept);
                    }
                }
                // Each INSERT of a set on its own (a worker runs each as a job of its own).
                Statement::StatementSet(members) => {
                    let state = self.state.lock().await;
                    for m in members {
                        let Statement::Insert(q) = &m.statement else { continue };
                        let at = Some(m.location);
                        let plan = state.planner.plan(q, &m.tokens, m.location).await.map_err(|e| e.at(at))?;
                        if let Some(kept) = each(self, &state, plan, m.location).map_err(|e| e.at(at))? {
                            out.push(kept);
                        }
                    }
                }
                Statement::Query(_) => {}
                _ => {
                    self.execute(&statement).await?;
                }
            }
        }
        Ok(out)
    }

    /// Jobs with checkpoints start over instead of resuming from their latest checkpoint
    /// (`weir run --from-scratch`); their old checkpoints are deleted.
    pub fn with_from_scratch(mut self, from_scratch: bool) -> Self {
        self.from_scratch = from_scratch;
        self
    }

    /// Resolve relative `'path'` options against `dir` instead of the working directory
    /// (test files use their own directory).
    pub fn with_base_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.base_dir = Some(dir.into());
        self
    }

    /// Register a scalar function (a DataFusion `ScalarUDF`) for the statements that follow.
    /// Its signature's volatility declares whether it is deterministic (`Volatility::Volatile`
    /// for one that is not, as `RANDOM()`); `side_effects` whether it acts on the world. The
    /// exactly-once checks of `EXPLAIN INSERT` and `INSERT` read both (`docs/exactly-once.md`).
    pub async fn register_function(&self, udf: datafusion::logical_expr::ScalarUDF, side_effects: bool) {
        self.state.lock().await.planner.register_function(udf, side_effects);
    }

    /// [`Engine::register_function`] while the engine is being made (a program's engines for
    /// `weir verify`, say).
    pub fn with_function(mut self, udf: datafusion::logical_expr::ScalarUDF, side_effects: bool) -> Self {
        self.state.get_mut().planner.register_function(udf, side_effects);
        self
    }

    /// Split a script into statements, with their positions.
    pub fn parse(&self, sql: &str) -> Result<Vec<ParsedStatement>> {
        parse_script(sql)
    }

    /// Run every statement of `sql` in order, stopping at the first error.
    pub async fn execute_all(&self, sql: &str) -> Result<Vec<Outcome>> {
        let mut outcomes = Vec::new();
        for statement in self.parse(sql)? {
            outcomes.push(self.execute(&statement).await?);
        }
        Ok(outcomes)
    }

    /// Run one `SELECT` and stream its rows.
    pub async fn query(&self, sql: &str) -> Result<QueryStream> {
        match self.single(sql).await? {
            Outcome::Query(q) => Ok(q),
            _ => Err(WeirError::user("query() takes a SELECT; use execute_all for other statements")),
        }
    }

    /// Run one `INSERT INTO` and return its job.
    pub async fn submit(&self, sql: &str) -> Result<JobHandle> {
        match self.single(sql).await? {
            Outcome::Job(job) => Ok(job),
            _ => Err(WeirError::user("submit() takes an INSERT INTO; use execute_all for other statements")),
        }
    }

    async fn single(&self, sql: &str) -> Result<Outcome> {
        let mut statements = self.parse(sql)?;
        if statements.len() != 1 {
            return Err(WeirError::user(format!("expected one statement, found {}", statements.len())));
        }
        self.execute(&statements.remove(0)).await
    }

    /// Every job started by this engine, oldest first.
    pub async fn jobs(&self) -> Vec<JobHandle> {
        self.state.lock().await.jobs.clone()
    }

    /// A setting's value now, or its default.
    pub async fn setting(&self, key: &str) -> String {
        self.state.lock().await.settings.value(key)
    }

    /// Run one parsed statement.
    pub async fn execute(&self, statement: &ParsedStatement) -> Result<Outcome> {
        let start = statement.location;
        self.execute_inner(statement).await.map_err(|e| e.at(Some(start)))
    }

    async fn execute_inner(&self, statement: &ParsedStatement) -> Result<Outcome> {
        let mut state = self.state.lock().await;
        state.planner.base_dir = self.base_dir.clone();
        let tokens = &statement.tokens;
        let start = statement.location;
        if let Some(pending) = &mut state.pending_set {
            match &statement.statement {
                Statement::Insert(_) => {
                    pending.push(statement.clone());
                    return Ok(Outcome::Done(
                        "INSERT added to the statement set (END runs the set as one job).".into(),
                    ));
                }
                Statement::EndStatementSet => {}
                _ => {
                    return Err(WeirError::user(
                        "a statement set holds INSERT statements only (END closes it and runs the INSERTs as one job)",
                    ))
                }
            }
        }
        match &statement.statement {
            Statement::BeginStatementSet => {
                state.pending_set = Some(Vec::new());
                Ok(Outcome::Done("Statement set begun: INSERTs are collected until END.".into()))
            }
            Statement::EndStatementSet => {
                let Some(members) = state.pending_set.take() else {
                    return Err(WeirError::user("END without BEGIN STATEMENT SET"));
                };
                if members.is_empty() {
                    return Err(WeirError::user(
                        "this statement set is empty: put INSERT statements between BEGIN and END",
                    ));
                }
                let job = self.start_set(&mut state, &members).await?;
                self.job_outcome(state, job).await
            }
            Statement::StatementSet(members) => {
                let job = self.start_set(&mut state, members).await?;
                self.job_outcome(state, job).await
            }
            Statement::CreateTable(ct) => {
                let ct = self.resolve_paths(ct)?;
                let name = weir_sql::catalog::normalize(&ct.name);
                Ok(Outcome::Done(if state.planner.create_table(&ct, &statement.text)? {
                    format!("Table '{name}' created.")
                } else {
                    format!("Table '{name}' already exists; nothing done.")
                }))
            }
            Statement::CreateTableAs { table, insert } => {
                let ct = self.resolve_paths(table)?;
                let job = self.create_table_as(&mut state, &ct, insert).await?;
                self.job_outcome(state, job).await
            }
            Statement::CreateView { name, query, or_replace, if_not_exists, query_text } => {
                let created = state
                    .planner
                    .create_view(name, query, query_text, *or_replace, *if_not_exists, tokens, start)
                    .await?;
                let name = weir_sql::catalog::normalize(name);
                Ok(Outcome::Done(if created {
                    format!("View '{name}' created.")
                } else {
                    format!("View '{name}' already exists; nothing done.")
                }))
            }
            Statement::Drop { kind, name, if_exists } => {
                let dropped = state.planner.drop(*kind, name, *if_exists)?;
                let what = if *kind == ObjectKind::Table { "Table" } else { "View" };
                let name = weir_sql::catalog::normalize(name);
                Ok(Outcome::Done(if dropped {
                    format!("{what} '{name}' dropped.")
                } else {
                    format!("{what} '{name}' does not exist; nothing done.")
                }))
            }
            Statement::AlterTable { name, if_exists, action } => {
                let action = match action {
                    weir_sql::AlterTable::Set(options) => {
                        let ct = weir_sql::parser::CreateTable {
                            name: name.clone(),
                            if_not_exists: false,
                            columns: Vec::new(),
                            watermark: None,
                            primary_key: Vec::new(),
                            partitioned_by: Vec::new(),
                            options: options.clone(),
                            like: None,
                        };
                        // Relative paths, and a verify run's scratch copies, as in CREATE TABLE.
                        weir_sql::AlterTable::Set(self.resolve_paths(&ct)?.options)
                    }
                    other => other.clone(),
                };
                let altered = state.planner.alter_table(name, *if_exists, &action)?;
                let name = weir_sql::catalog::normalize(name);
                Ok(Outcome::Done(if altered {
                    format!("Table '{name}' altered.")
                } else {
                    format!("Table '{name}' does not exist; nothing done.")
                }))
            }
            Statement::ShowFunctions => {
                let names = state.planner.function_names().into_iter().map(|n| vec![n]).collect();
                Ok(Outcome::Table(vec![text_batch(&["function name"], names)?]))
            }
            Statement::ShowTables | Statement::ShowViews => {
                let catalog = &state.planner.catalog;
                let names: Vec<Vec<String>> = if matches!(statement.statement, Statement::ShowTables) {
                    let mut all: Vec<_> = catalog.tables.keys().chain(catalog.views.keys()).cloned().collect();
                    all.sort();
                    all.into_iter().map(|n| vec![n]).collect()
                } else {
                    catalog.views.keys().map(|n| vec![n.clone()]).collect()
                };
                let column =
                    if matches!(statement.statement, Statement::ShowTables) { "table name" } else { "view name" };
                Ok(Outcome::Table(vec![text_batch(&[column], names)?]))
            }
            Statement::ShowCreate { kind, name } => {
                let (_, table) = state.planner.schema_of(name)?;
                let key = weir_sql::catalog::normalize(name);
                let text = match (kind, table) {
                    (ObjectKind::Table, Some(t)) => t.shown_definition(),
                    (ObjectKind::View, None) => {
                        state.planner.catalog.views.get(&key).map(|v| v.definition.clone()).unwrap_or_default()
                    }
                    (ObjectKind::Table, None) => {
                        return Err(WeirError::user(format!("'{key}' is a view: SHOW CREATE VIEW")))
                    }
                    (ObjectKind::View, Some(_)) => {
                        return Err(WeirError::user(format!("'{key}' is a table: SHOW CREATE TABLE")))
                    }
                };
                // One row per line, as EXPLAIN.
                let lines = text.lines().map(|l| vec![l.to_string()]).collect();
                Ok(Outcome::Table(vec![text_batch(&["statement"], lines)?]))
            }
            Statement::Describe { name } => {
                let (schema, table) = state.planner.schema_of(name)?;
                let rows = schema
                    .fields()
                    .iter()
                    .enumerate()
                    .map(|(i, f)| {
                        let watermark = table
                            .as_ref()
                            .and_then(|t| t.watermark.as_ref())
                            .filter(|w| &w.column == f.name())
                            .map(|w| w.sql.clone())
                            .unwrap_or_default();
                        // As Flink's `extras`: how a virtual column gets its value.
                        let extras = match table.as_ref() {
                            Some(t) if let Some(c) = t.computed_at(i) => format!("AS {}", c.sql),
                            Some(t) if let Some(key) = t.metadata.get(f.name()) => format!("METADATA FROM '{key}'"),
                            _ => String::new(),
                        };
                        vec![
                            f.name().clone(),
                            sql_type_name(f.data_type()),
                            if f.is_nullable() { "true" } else { "false" }.to_string(),
                            extras,
                            watermark,
                        ]
                    })
                    .collect();
                Ok(Outcome::Table(vec![text_batch(&["name", "type", "null", "extras", "watermark"], rows)?]))
            }
            Statement::Set { key: None, .. } => {
                let rows = state.settings.all().into_iter().map(|(k, v)| vec![k, v]).collect();
                Ok(Outcome::Table(vec![text_batch(&["key", "value"], rows)?]))
            }
            Statement::Set { key: Some((key, at)), value } => {
                state.settings.set(key, value.as_deref().unwrap_or_default(), Some(*at))?;
                state.planner.state_ttl = state.settings.state_ttl();
                if key.as_str() == "rest.port" {
                    let host = state.settings.get("rest.bind-address").unwrap_or("127.0.0.1").to_string();
                    let port = value.as_deref().unwrap_or_default();
                    let addr = self.serve_http(&format!("{host}:{port}")).await.map_err(|e| e.at(Some(*at)))?;
                    return Ok(Outcome::Done(format!("Set '{key}': serving http://{addr}/ (metrics at /metrics).")));
                }
                Ok(Outcome::Done(format!("Set '{key}'.")))
            }
            Statement::Reset { key } => {
                state.settings.reset(key.as_deref());
                state.planner.state_ttl = state.settings.state_ttl();
                Ok(Outcome::Done("Reset.".to_string()))
            }
            Statement::ShowJobs => {
                let jobs: Vec<_> = state.jobs.iter().map(|j| j.status()).collect();
                Ok(Outcome::Table(vec![jobs_batch(&jobs, &state.guarantees)?]))
            }
            Statement::ShowJob { job } | Statement::ShowCheckpoints { job } => {
                let found = state.jobs.iter().rev().find(|j| j.name() == job || j.id().to_string() == *job);
                let Some(found) = found else {
                    return Err(WeirError::user(format!("no job '{job}' in this session (SHOW JOBS lists them)")));
                };
                let status = found.status();
                let batch = match &statement.statement {
                    Statement::ShowJob { .. } => {
                        let lines = state.guarantees.get(&found.id()).map(|r| r.lines.as_slice()).unwrap_or_default();
                        operators_batch(&status, lines)?
                    }
                    _ => checkpoints_batch(&status)?,
                };
                Ok(Outcome::Table(vec![batch]))
            }
            Statement::ExplainUpgrade { from, inner } => self.explain_upgrade(&state, from.as_ref(), inner).await,
            Statement::StopJob { job, savepoint, drain } => self.stop_job(state, job, *savepoint, *drain).await,
            Statement::Explain(inner) if let Statement::StatementSet(members) = &inner.statement => {
                let text = self.explain_set(&state, members).await?;
                let lines = text.lines().map(|l| vec![l.to_string()]).collect();
                Ok(Outcome::Table(vec![text_batch(&["plan"], lines)?]))
            }
            Statement::Explain(inner) => {
                let plan = match &inner.statement {
                    Statement::Query(q) | Statement::Insert(q) => {
                        state.planner.plan(q, &inner.tokens, inner.location).await?
                    }
                    _ => return Err(WeirError::not_supported("EXPLAIN of anything but SELECT and INSERT")),
                };
                let mut text = plan.explain();
                for line in self.guarantee(&state, &plan).lines {
                    text.push_str(&line);
                    text.push('\n');
                }
                let lines = text.lines().map(|l| vec![l.to_string()]).collect();
                Ok(Outcome::Table(vec![text_batch(&["plan"], lines)?]))
            }
            // A verify run compares what the jobs' sinks hold; a bare query shows rows to no
            // one there (and over an unbounded source would never end).
            Statement::Query(_) if self.scratch.as_ref().is_some_and(|s| !s.read_back) => {
                Ok(Outcome::Done("Query skipped in a verify run.".to_string()))
            }
            Statement::Query(q) => {
                let plan = state.planner.plan(q, tokens, start).await?;
                state.queries += 1;
                let name = format!("select-{}", state.queries);
                let schema = plan.root.schema();
                let (sink, tx, rx) = caller_channel();
                let mut sink = Some(sink);
                let spec = SinkSpec {
                    name: "caller".into(),
                    connector: "caller".into(),
                    parallel: false,
                    make: Box::new(move |_| {
                        sink.take()
                            .map(|s| Box::new(s) as Box<dyn weir_core::Sink>)
                            .ok_or_else(|| WeirError::internal("the caller's sink was asked for twice"))
                    }),
                };
                let id = state.jobs.len() as u64 + 1;
                let branches = vec![(plan.root.clone(), spec)];
                let options = job_options(&state, &name);
                let job = spawn_job(id, name, branches, self.connectors.clone(), options)?;
                state.jobs.push(job.clone());
                self.watch(&mut state, &job, None);
                Ok(Outcome::Query(QueryStream::new(schema, plan.root.changelog(), tx, rx, job)))
            }
            Statement::Insert(q) => {
                let plan = state.planner.plan(q, tokens, start).await?;
                let report = self.check_insert(&state, &plan).await?;
                let job = self.start_job(&mut state, vec![plan])?;
                self.watch(&mut state, &job, Some(report));
                self.job_outcome(state, job).await
            }
        }
    }

    /// What starting `job` gives the caller: the job, or with `'table.dml-sync'` the rows it
    /// wrote once it has finished.
    async fn job_outcome(&self, state: tokio::sync::MutexGuard<'_, State>, job: JobHandle) -> Result<Outcome> {
        if !state.settings.dml_sync() {
            return Ok(Outcome::Job(job));
        }
        drop(state);
        job.wait().await?;
        let status = job.status();
        Ok(Outcome::Done(format!("Job '{}' finished: {} row(s) written.", status.name, status.rows_written())))
    }

    /// Whether the INSERT of `plan` may start, and what it guarantees: its database table
    /// checked, its exactly-once checks passed (their warnings logged).
    async fn check_insert(&self, state: &State, plan: &StreamPlan) -> Result<crate::guarantees::Report> {
        if let SinkTarget::Table(table) = &plan.sink {
            if table.options.get("connector") == Some("jdbc") {
                // The database table, before any row: a missing table or a column
                // of another type is an error of the INSERT, not of the running job.
                weir_connectors::jdbc::check_table(table).await?;
            }
        }
        let report = self.guarantee(state, plan);
        if let Some(e) = report.refusal() {
            return Err(e);
        }
        for warning in &report.warnings {
            log::warn!("{warning}");
        }
        Ok(report)
    }

    /// What the job of `plan` guarantees, and the pitfalls found in it, in this session.
    fn guarantee(&self, state: &State, plan: &StreamPlan) -> crate::guarantees::Report {
        let tables: Vec<&weir_core::TableDef> = state.planner.catalog.tables.values().map(|t| t.as_ref()).collect();
        let planner = &state.planner;
        let connectors = self.connectors.as_ref();
        crate::guarantees::report(plan, &state.settings, connectors, &tables, &planner.side_effects, &planner.functions)
    }

    /// Start the INSERTs of `plans` as one job (several in a statement set).
    fn start_job(&self, state: &mut State, plans: Vec<StreamPlan>) -> Result<JobHandle> {
        let job = self.prepare(state, plans)?;
        let branches = job
            .branches
            .iter()
            .map(|(root, sink)| {
                let connectors = self.connectors.clone();
                let target = sink.clone();
                let spec = SinkSpec {
                    name: sink.name.clone(),
                    connector: sink.options.get("connector").unwrap_or("?").to_string(),
                    parallel: self.connectors.parallel_sink(sink),
                    make: Box::new(move |split| connectors.sink(&target, target.schema.clone(), split)),
                };
                (root.clone(), spec)
            })
            .collect();
        let mut options = job.options;
        let mut storage = None;
        if let Some(config) = job.checkpoint {
            use weir_runtime::checkpoint::{CheckpointStore, Checkpoints};
            let checkpoints = Checkpoints::new(config.storage.clone());
            if self.from_scratch {
                checkpoints.clear()?;
            }
            if let Some(path) = state.settings.get("execution.savepoint.path") {
                // Its copy replaces the job's checkpoints (once: a restart resumes from
                // the checkpoints taken since).
                checkpoints.import(&state.settings.storage_at(path)?)?;
            }
            storage = Some(config.storage.clone());
            let store: Arc<dyn CheckpointStore> = Arc::new(checkpoints);
            // From here on, an instance of this job still running elsewhere cannot complete
            // a checkpoint into this directory.
            store.claim()?;
            if !self.from_scratch {
                if let Some(restored) = store.latest(&config.plan)? {
                    log::info!(
                        "job '{}' resumes from checkpoint {} in '{}'",
                        job.name,
                        restored.epoch,
                        config.storage.describe()
                    );
                    options.restore = Some(restored);
                }
            }
            options.checkpoint = Some((config, store));
        }
        let id = state.jobs.len() as u64 + 1;
        let handle = spawn_job(id, job.name, branches, self.connectors.clone(), options)?;
        state.jobs.push(handle.clone());
        if let Some(storage) = storage {
            state.checkpoint_storage.insert(id, storage);
        }
        Ok(handle)
    }

    /// What running the INSERTs of `plans` as one job takes, short of starting it: each plan
    /// ending in its sink's schema, the sinks as the job writes them, the tables several read
    /// scanned once, the job's options and checkpoints.
    fn prepare(&self, state: &State, plans: Vec<StreamPlan>) -> Result<PreparedJob> {
        let mut roots = Vec::with_capacity(plans.len());
        let mut sinks = Vec::with_capacity(plans.len());
        for plan in &plans {
            let SinkTarget::Table(table) = &plan.sink else {
                return Err(WeirError::internal("INSERT without a target table"));
            };
            // Batches reach the sink with exactly the table's schema (names and nullability).
            let indices = (0..table.schema.fields().len()).collect();
            roots.push(plan.root.clone().with_operator(OperatorSpec::Select { indices, schema: table.schema.clone() }));
            sinks.push(table.clone());
        }
        let shared = weir_runtime::share_scans(&mut roots)?;
        let name = match state.settings.get("pipeline.name") {
            Some(n) => n.to_string(),
            None => format!("insert-into-{}", sinks.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(",")),
        };
        for sink in &mut sinks {
            if sink.options.get("connector") == Some("jdbc")
                && sink.options.get("sink.transactional-id-prefix").is_none()
            {
                // Prepared transactions are named after the job and the table: stable across
                // its restarts, apart from other jobs' (whose leftovers a start rolls back).
                let prefix = match plans.len() {
                    1 => format!("weir-{name}"),
                    _ => format!("weir-{name}-{}", sink.name),
                };
                let mut named = (**sink).clone();
                named.options.insert("sink.transactional-id-prefix".into(), prefix, None);
                *sink = Arc::new(named);
            }
        }
        let options = job_options(state, &name);
        let mut shape = String::new();
        for (root, plan) in roots.iter().zip(&plans) {
            shape.push_str(&StreamPlan { root: root.clone(), sink: plan.sink.clone() }.state_shape());
        }
        for scan in &shared {
            shape.push_str(&format!("shared scan {} {:?} {:?}\n", scan.table, scan.columns, scan.readers));
        }
        let layout = format!(
            "{} key groups by {}, state in {}",
            options.key_groups.max(),
            weir_runtime::KEY_HASH,
            if options.rocksdb.is_some() { "rocksdb" } else { "memory" }
        );
        let fingerprint = weir_runtime::checkpoint::fingerprint(&format!("{shape}{layout}"));
        let branches: Vec<weir_runtime::identity::Branch<'_>> = roots
            .iter()
            .zip(&sinks)
            .map(|(root, t)| weir_runtime::identity::Branch {
                root,
                sink: &t.name,
                connector: t.options.get("connector").unwrap_or("?"),
            })
            .collect();
        let ids = weir_runtime::identity::Identities::of(&branches);
        // Scans that cannot feed a rebuild by replay, and why.
        let unreplayable = ids.tables().iter();
        let unreplayable =
            unreplayable.filter_map(|(id, t)| self.connectors.source_replays(t).err().map(|why| (id.clone(), why)));
        let plan_state = weir_runtime::checkpoint::PlanState {
            fingerprint,
            layout,
            parts: ids.parts().to_vec(),
            ignore_unclaimed: false,
            rebuild_all: false,
            branches: ids.branches().to_vec(),
            unreplayable: unreplayable.collect(),
        };
        let checkpoint = state.settings.checkpoint_config(&name, plan_state)?;
        let branches = roots.into_iter().zip(sinks).collect();
        Ok(PreparedJob { name, branches, options, checkpoint, settings: state.settings.all() })
    }

    /// Run a script's statements as [`Engine::execute`] does, except that each `INSERT` is
    /// checked and prepared, not started (a bare `SELECT` is skipped): the jobs a worker
    /// process runs its part of.
    pub async fn prepare_jobs(&self, sql: &str) -> Result<Vec<PreparedJob>> {
        self.each_insert(sql, |engine, state, plan, _| {
            let report = engine.guarantee(state, &plan);
            if let Some(e) = report.refusal() {
                return Err(e);
            }
            for warning in &report.warnings {
                log::warn!("{warning}");
            }
            engine.prepare(state, vec![plan]).map(Some)
        })
        .await
    }

    pub fn connectors(&self) -> Arc<dyn ConnectorFactory> {
        self.connectors.clone()
    }

    /// Relative `'path'` options are taken relative to the base directory, if one is set;
    /// in a `weir verify` run, sinks become their scratch copies.
    fn resolve_paths(&self, ct: &CreateTable) -> Result<CreateTable> {
        let mut ct = ct.clone();
        if let Some(base) = &self.base_dir {
            for (key, value, _) in &mut ct.options {
                if key == "path" && weir_core::is_relative_path(value) {
                    *value = base.join(&*value).to_string_lossy().into_owned();
                }
            }
        }
        if let Some(scratch) = &self.scratch {
            scratch.rewrite(&mut ct)?;
        }
        Ok(ct)
    }
}

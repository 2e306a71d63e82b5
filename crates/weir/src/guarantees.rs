//! What an `INSERT` job's sink guarantees, what that rests on, when its rows become visible
//! and to which readers, and the exactly-once pitfalls found in the job, each with its fix.
//! `EXPLAIN INSERT` shows the report; starting the job refuses it when a pitfall would make
//! an exactly-once result not exactly-once (unless a setting accepts it).
//!
//! A pure function of the plan, the settings and what connectors say of their sinks.

use std::sync::Arc;
use std::time::Duration;

use crate::determinism::{self, Nondeterminism};
use weir_core::{ConnectorFactory, Delivered, TableDef, WeirError};
use weir_runtime::{Node, OperatorSpec, SinkTarget, StreamPlan};

use crate::settings::Settings;

/// The setting that accepts non-deterministic values deciding rows in an exactly-once job.
pub const ALLOW_NONDETERMINISM: &str = "execution.allow-nondeterminism";

#[derive(Debug, Default, Clone)]
pub struct Report {
    /// For `EXPLAIN`, after the plan.
    pub lines: Vec<String>,
    /// Warnings for the log when the job starts.
    pub warnings: Vec<String>,
    /// Why the job must not start.
    pub error: Option<String>,
    /// The effective guarantee, in a word or two (`SHOW JOBS`).
    pub delivered: String,
    /// What makes the sink's content differ from that of one run without failures, in a
    /// phrase each: the likely causes `weir verify` names when two runs differ.
    pub causes: Vec<String>,
    /// Columns of the sink whose values depend on when the job runs, though no row, key or
    /// order does: `weir verify` does not compare them.
    pub varying_columns: Vec<String>,
    /// Functions of the embedding program the job calls, declared deterministic: what
    /// `weir verify` suspects when runs differ and nothing else explains it.
    pub program_functions: Vec<String>,
}

impl Report {
    /// A statement set's report: each INSERT's, by its sink table.
    pub fn of_set(reports: Vec<(String, Report)>) -> Report {
        let mut set = Report::default();
        let mut delivered: Vec<String> = Vec::new();
        for (sink, r) in &reports {
            set.lines.push(format!("  INSERT INTO {sink}:"));
            set.lines.extend(r.lines.iter().map(|l| format!("  {l}")));
            set.warnings.extend(r.warnings.iter().map(|w| format!("INSERT INTO {sink}: {w}")));
            set.error = set.error.take().or_else(|| r.error.clone());
            delivered.push(format!("{} ({sink})", r.delivered));
            set.causes.extend(r.causes.iter().cloned());
            set.varying_columns.extend(r.varying_columns.iter().cloned());
            set.program_functions.extend(r.program_functions.iter().cloned());
        }
        let first = reports.first().map(|(_, r)| r.delivered.clone()).unwrap_or_default();
        set.delivered = match reports.iter().all(|(_, r)| r.delivered == first) {
            true => first,
            false => delivered.join(", "),
        };
        set
    }

    fn warn(&mut self, text: String) {
        self.lines.push(format!("  warning: {text}"));
        self.warnings.push(text);
    }

    fn fail(&mut self, text: String) {
        self.lines.push(format!("  error: {text}"));
        self.error.get_or_insert(text);
    }

    /// The refusal, if any, as the error an `INSERT` returns.
    pub fn refusal(&self) -> Option<WeirError> {
        self.error.as_ref().map(|e| WeirError::user(e.clone()))
    }
}

fn interval_of(settings: &Settings) -> Option<Duration> {
    let interval = weir_core::parse_duration(&settings.value("checkpoint.interval")).ok()?;
    (!interval.is_zero() && settings.get("checkpoint.dir").is_some()).then_some(interval)
}

fn human(d: Duration) -> String {
    if d.as_millis().is_multiple_of(1000) {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// Operators whose state has no bound: (what, the operator).
fn unbounded_state(node: &Node, out: &mut Vec<String>) {
    let spec = match node {
        Node::Operator { spec, input } => {
            unbounded_state(input, out);
            Some(spec)
        }
        Node::Exchange { input, .. } => {
            unbounded_state(input, out);
            None
        }
        Node::Union { inputs, .. } => {
            inputs.iter().for_each(|i| unbounded_state(i, out));
            None
        }
        Node::Join { left, right, spec } => {
            unbounded_state(left, out);
            unbounded_state(right, out);
            Some(spec)
        }
        _ => None,
    };
    let unbounded = match spec {
        Some(OperatorSpec::GroupAggregate { spec, .. }) => spec.ttl.is_none(),
        Some(OperatorSpec::Join { spec, .. }) => spec.ttl.is_none() && spec.interval.is_none(),
        Some(OperatorSpec::TopN { spec, .. }) => spec.ttl.is_none(),
        // Each partition's tail of rows (and an unbounded frame's accumulators), forever.
        Some(OperatorSpec::OverAggregate { .. }) => true,
        _ => false,
    };
    if let (true, Some(spec)) = (unbounded, spec) {
        out.push(spec.describe());
    }
}

/// Kafka tables among `sources` that read uncommitted records of a topic an exactly-once
/// Kafka table of the catalog writes: (source table, writing table).
fn dirty_reads(sources: &[Arc<TableDef>], catalog: &[&TableDef]) -> Vec<(String, String)> {
    let kafka = |t: &TableDef| matches!(t.options.get("connector"), Some("kafka" | "upsert-kafka"));
    fn at(t: &TableDef) -> (Option<&str>, Option<&str>) {
        (t.options.get("topic"), t.options.get("properties.bootstrap.servers"))
    }
    let mut out = Vec::new();
    for table in sources {
        if !kafka(table) || table.options.get("properties.isolation.level") != Some("read_uncommitted") {
            continue;
        }
        for writer in catalog {
            let exactly_once = writer.options.get("sink.delivery-guarantee") == Some("exactly-once");
            if writer.name != table.name && kafka(writer) && exactly_once && at(writer) == at(table) {
                out.push((table.name.clone(), writer.name.clone()));
            }
        }
    }
    out
}

/// The report of `plan` under `settings`; `catalog` holds every table of the session.
pub fn report(
    plan: &StreamPlan,
    settings: &Settings,
    connectors: &dyn ConnectorFactory,
    catalog: &[&TableDef],
    side_effects: &std::collections::BTreeSet<String>,
    program_functions: &std::collections::BTreeSet<String>,
) -> Report {
    let mut report = Report::default();
    let SinkTarget::Table(table) = &plan.sink else { return report };
    let guarantee = connectors.sink_guarantee(table);
    let interval = interval_of(settings);
    let aligned = settings.value("checkpoint.mode") != "at-least-once";
    let connector = table.options.get("connector").unwrap_or("?");
    // The tables the plan reads, once each.
    let sources = plan.root.source_tables();
    let read: Vec<String> =
        sources.iter().map(|t| format!("{} '{}'", t.options.get("connector").unwrap_or("?"), t.name)).collect();
    let delivered = match interval {
        None => Delivered::None,
        // Unaligned barriers let rows of the next checkpoint in before one is taken.
        Some(_) if !aligned && !guarantee.by_key && guarantee.delivered != Delivered::None => Delivered::AtLeastOnce,
        Some(_) => guarantee.delivered,
    };
    report.lines.push(format!("Guarantee: {} into '{}' ({connector})", delivered.name(), table.name));
    report.delivered = delivered.name().to_string();
    if interval.is_none() && !matches!(connector, "print" | "blackhole") {
        report.causes.push(
            "no checkpoints: a run started again after a crash starts over from the beginning of its sources and \
             writes its rows again"
                .to_string(),
        );
    }
    match interval {
        // Shown, not logged: most jobs without checkpoints are meant so.
        None => report.lines.push(
            "  warning: no checkpoints: a job that fails stops, and a new run starts over from the beginning of its \
             sources. Set 'checkpoint.interval' and 'checkpoint.dir' for restarts that neither lose nor repeat rows"
                .to_string(),
        ),
        Some(i) => {
            let reads = if read.is_empty() { "literal rows".to_string() } else { read.join(", ") };
            report.lines.push(format!(
                "  rests on: sources that rewind to their position in a checkpoint ({reads}), {} checkpoints every \
                 {}, {}",
                if aligned { "aligned" } else { "unaligned (at-least-once)" },
                human(i),
                guarantee.rests_on
            ));
            if guarantee.transactional {
                report.lines.push(format!(
                    "  visible: when the checkpoint that covers them completes (up to the checkpoint interval, {}, \
                     after they are written)",
                    human(i)
                ));
            }
        }
    }
    if let (Some(readers), Some(_)) = (&guarantee.readers, interval) {
        report.lines.push(format!("  readers: {readers}"));
    }
    let exactly_once = delivered == Delivered::ExactlyOnce;
    if matches!(connector, "kafka" | "upsert-kafka") {
        // The longest a pre-committed transaction waits for a restarted job: the checkpoint
        // timeout, then every restart's backoff (doubling).
        let options = settings.job_options();
        let checkpoint_timeout = match interval {
            Some(_) => weir_core::parse_duration(&settings.value("checkpoint.timeout")).unwrap_or_default(),
            None => Duration::ZERO,
        };
        let restarts = (0..options.restart_attempts).map(|i| options.restart_backoff * 2u32.saturating_pow(i)).sum();
        if let Err(e) = weir_connectors::kafka::check_job(table, checkpoint_timeout, restarts) {
            report.causes.push(format!("the Kafka transaction timeout of table '{}' is too short", table.name));
            report.fail(e.message);
        }
    }
    if interval.is_some() {
        for source in sources.iter().filter(|t| !connectors.source_rewinds(t)).map(|t| &t.name) {
            report.causes.push(format!("table '{source}' is read by a source that cannot rewind"));
            let text = format!(
                "table '{source}' is read by a source that cannot rewind to a checkpoint's position: after a failure \
                 the rows it gave since the last checkpoint are gone, and the job cannot take a checkpoint at all. \
                 Land its records in a log first (a Kafka topic) and read them from there"
            );
            if exactly_once {
                report.fail(text);
            } else {
                report.warn(text);
            }
        }
    }
    for (source, writer) in dirty_reads(&sources, catalog) {
        let text = format!(
            "table '{source}' reads with 'properties.isolation.level' = 'read_uncommitted' the topic that table \
             '{writer}' writes exactly once: it sees records of transactions that are later aborted, and their \
             replays again. Remove the option (Weir reads read_committed by default)"
        );
        if exactly_once {
            report.fail(text);
        } else {
            report.warn(text);
        }
    }
    let found = determinism::analyze_with(&plan.root, side_effects);
    report.program_functions = determinism::called(&plan.root, program_functions)
        .into_iter()
        .filter(|f| !found.functions.contains(f))
        .collect();
    nondeterminism(&mut report, &found, table, guarantee.by_key, exactly_once, settings);
    if interval.is_some() && !found.side_effects.is_empty() {
        report.warn(format!(
            "{} {} side effects: a replay after a failure calls {} again for the rows it replays, so its effects \
             repeat (exactly-once covers the sink's rows only). Make the effect idempotent, or move it behind the \
             sink",
            found.side_effects.iter().cloned().collect::<Vec<_>>().join(", "),
            if found.side_effects.len() == 1 { "has" } else { "have" },
            if found.side_effects.len() == 1 { "it" } else { "them" }
        ));
    }
    if interval.is_some() && delivered == Delivered::AtLeastOnce {
        report.causes.push(format!(
            "an at-least-once sink without a key: table '{}' gets the rows a replay writes again",
            table.name
        ));
        report.warn(format!(
            "table '{}' is written at least once and not by a key: a replay after a failure writes its rows again \
             (duplicates). Set 'sink.delivery-guarantee' = 'exactly-once', or write by a PRIMARY KEY",
            table.name
        ));
    }
    if interval.is_some() && settings.value("state.backend") == "memory" {
        let mut unbounded = Vec::new();
        unbounded_state(&plan.root, &mut unbounded);
        for op in unbounded {
            report.warn(format!(
                "the state of {op} grows without bound, and the memory state backend writes all of it at every \
                 checkpoint: set 'state.backend' = 'rocksdb' (incremental checkpoints) or 'table.exec.state.ttl'"
            ));
        }
    }
    report
}

fn nondeterminism(
    report: &mut Report,
    found: &Nondeterminism,
    table: &TableDef,
    by_key: bool,
    exactly_once: bool,
    settings: &Settings,
) {
    let functions = found.functions.iter().cloned().collect::<Vec<_>>().join(", ");
    let columns: Vec<&str> =
        table.schema.fields().iter().zip(&found.columns).filter(|(_, n)| **n).map(|(f, _)| f.name().as_str()).collect();
    let mut decisions = found.decisions.clone();
    let key_varies = table.primary_key.iter().any(|k| columns.contains(&k.as_str()));
    if by_key && key_varies {
        decisions.push(format!("the key of table '{}'", table.name));
    }
    let allowed = settings.value(ALLOW_NONDETERMINISM) == "true";
    let what = if found.functions.iter().any(|f| f == "PROCTIME()") {
        format!("processing time ({functions})")
    } else {
        format!("a non-deterministic function ({functions})")
    };
    for d in &decisions {
        report.causes.push(format!("{what} decides {d}"));
        let text = format!(
            "{} decides {d}: a replay after a failure decides otherwise than the attempt it replaces, so the result \
             is not that of one run. Compute it from the data (an event-time column instead of processing time), or \
             set '{ALLOW_NONDETERMINISM}' = 'true' to accept it",
            if functions.is_empty() {
                "a value that depends on when the job runs".to_string()
            } else {
                functions.clone()
            }
        );
        if exactly_once && !allowed {
            report.fail(text);
        } else {
            report.warn(text);
        }
    }
    report.varying_columns = columns.iter().map(|c| c.to_string()).collect();
    if decisions.is_empty() && !columns.is_empty() {
        if by_key {
            report.lines.push(format!(
                "  note: column(s) {} of table '{}' take values from {functions}: harmless, the sink writes by its \
                 key, and a replay rewrites them",
                columns.join(", "),
                table.name
            ));
        } else {
            report.warn(format!(
                "column(s) {} of table '{}' take values from {functions}: a replay writes other values than the \
                 attempt it replaces would have (each row still once)",
                columns.join(", "),
                table.name
            ));
        }
    }
}

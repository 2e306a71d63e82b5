//! `weir verify FILE.sql`: is the user's own job exactly-once? The file runs once without
//! failures and again with crashes (SIGKILL) in every phase of its checkpoints and commits,
//! each run a child process writing into scratch copies of its sinks ([`weir::scratch`])
//! over the same bounded input; then each sink's content, the changelog applied, is compared
//! between the runs. A difference, or a pitfall the plan shows that makes one possible, is a
//! failure named with its likely cause.
//!
//! The `weir` command verifies with the built-in functions. An embedding program verifies
//! its own jobs, functions included, by calling [`child`] first thing in its `main` (a run
//! of verify's is that program again) and [`verify`] with its engines.

mod child;
mod content;
mod crashes;

pub use child::child;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use weir::scratch::{Scratch, SCRATCH_CONNECTORS};
use weir::{Engine, PlannedInsert};

use content::Content;
use crashes::{Phase, Plan, Runner};

/// How to verify.
pub struct Options {
    /// Crashes to inject in the second run.
    pub crashes: u32,
    /// Events of a generator without a bound (`'events'`).
    pub events: u64,
    /// Keep the scratch copies even when every sink is exactly-once.
    pub keep: bool,
    /// A new engine as the program makes its own: with its connectors and functions (the
    /// file is planned and read back with it; a child run makes its own with [`child`]).
    pub engines: std::sync::Arc<dyn Fn() -> Engine + Send + Sync>,
    /// The program a run is (it calls [`child`] first): its path, then any arguments.
    pub command: Vec<std::ffi::OsString>,
    /// Where the report's lines go, as they come.
    pub say: std::sync::Arc<dyn Fn(&str) + Send + Sync>,
}

impl Options {
    /// Verify with `weir`'s own engine, this program as the child, the report on stdout.
    pub fn new(crashes: u32, events: u64, keep: bool) -> std::io::Result<Self> {
        Ok(Options {
            crashes,
            events,
            keep,
            engines: std::sync::Arc::new(Engine::new),
            command: vec![std::env::current_exe()?.into_os_string()],
            say: std::sync::Arc::new(|line| println!("{line}")),
        })
    }
}

/// A line of the report.
macro_rules! say {
    ($options:expr, $($arg:tt)*) => {
        ($options.say)(&format!($($arg)*))
    };
}

/// Rows shown of each side of a difference.
const SHOWN: usize = 5;
/// Runs of the file with crashes, at most, beyond one per crash asked (a run that ends
/// before its crashes have all landed leaves its output complete; the next one starts on a
/// new scratch copy).
const EXTRA_RUNS: u32 = 4;
/// A run that has not ended after this long fails verify (an unbounded source it could
/// not bound).
const RUN_LIMIT: Duration = Duration::from_secs(600);

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn rows(n: u64) -> String {
    format!("{} row{}", thousands(n), if n == 1 { "" } else { "s" })
}

/// The fault hook of a sink's connector (`weir_core::fault` names).
fn hook(connector: &str) -> &'static str {
    match connector {
        "kafka" | "upsert-kafka" => "kafka",
        "jdbc" => "postgres",
        _ => "file",
    }
}

fn connector(table: &weir_core::TableDef) -> &str {
    table.options.get("connector").unwrap_or("?")
}

struct Job {
    planned: PlannedInsert,
    /// The run without crashes' content of the sink.
    reference: Content,
}

/// Verify the jobs of `file`: `true` if every sink is exactly-once, `false` if one is not (the
/// report says which and why); an error if the file cannot be verified. Blocks the thread
/// it runs on while child runs go (call it from a multi-threaded runtime).
pub async fn verify(file: &Path, options: &Options) -> Result<bool, String> {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(verify_inner(file, options)))
}

async fn verify_inner(file: &Path, options: &Options) -> Result<bool, String> {
    let sql = std::fs::read_to_string(file).map_err(|e| format!("cannot read it: {e}"))?;
    let base = file.parent().filter(|p| !p.as_os_str().is_empty()).map(Path::to_path_buf);
    let located = |e: weir::WeirError| match e.location {
        Some(at) => format!("{}:{}:{}: {}", file.display(), at.line, at.column, e.message),
        None => e.message,
    };
    let engine = match &base {
        Some(dir) => (options.engines)().with_base_dir(dir),
        None => (options.engines)(),
    };
    let planned = engine.plan_inserts(&sql).await.map_err(located)?;
    if planned.is_empty() {
        return Err("the file has no INSERT INTO: no job to verify".into());
    }
    let sinks: BTreeSet<String> = planned.iter().map(|p| p.sink.name.clone()).collect();
    let mut kafka_ends = BTreeMap::new();
    for p in &planned {
        let c = connector(&p.sink);
        if !SCRATCH_CONNECTORS.contains(&c) {
            return Err(format!(
                "table '{}': verify cannot make a scratch copy of a '{c}' table; it copies {} tables",
                p.sink.name,
                SCRATCH_CONNECTORS.join(", ")
            ));
        }
        for source in &p.sources {
            if sinks.contains(&source.name) {
                return Err(format!(
                    "table '{}' is both written and read by the file's jobs: verify runs them on a bounded \
                     input and cannot bound what another of its jobs writes",
                    source.name
                ));
            }
            let kafka = matches!(connector(source), "kafka" | "upsert-kafka");
            if kafka && source.options.get("scan.bounded.mode") != Some("specific-offsets") {
                // The same prefix in every run, however much is written meanwhile.
                let ends = weir_connectors::kafka::end_offsets(source).map_err(located)?;
                kafka_ends.insert(source.name.clone(), ends);
            }
        }
    }
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros()).unwrap_or(0);
    let id = format!("{}-{}", std::process::id(), stamp % 1_000_000_000);
    let root = std::env::temp_dir().join(format!("weir-verify-{id}"));
    let scratch = |tag: &str| Scratch {
        dir: root.join(tag),
        sinks: sinks.clone(),
        prefix: format!("weir-verify-{id}-{tag}-"),
        schema: format!("weir_verify_{}_{}", id.replace('-', "_"), tag.replace('-', "_")),
        events: options.events,
        kafka_ends: kafka_ends.clone(),
        read_back: false,
    };
    let mut hooks: Vec<&'static str> = planned.iter().map(|p| hook(connector(&p.sink))).collect();
    hooks.sort_unstable();
    hooks.dedup();
    let consoles = planned.iter().all(|p| matches!(connector(&p.sink), "print" | "blackhole") && !p.checkpointed);
    let runner = |tag: &str| Runner {
        file: file.to_path_buf(),
        command: options.command.clone(),
        scratch: scratch(tag),
        hooks: hooks.clone(),
        fresh_each_run: consoles,
    };

    say!(options, "Verifying {}: {} job(s), scratch copies under {}", file.display(), planned.len(), root.display());
    for p in &planned {
        say!(
            options,
            "  line {}: INSERT INTO {} ({}): {}{}",
            p.location.line,
            p.sink.name,
            connector(&p.sink),
            p.guarantee.delivered,
            if p.checkpointed { "" } else { ", no checkpoints (a restart starts over)" }
        );
    }

    let result = verify_runs(file, &sql, options, &planned, &runner).await;
    let keep = options.keep || !matches!(result, Ok(true));
    if keep {
        say!(
            options,
            "Scratch copies kept: files and checkpoints in {}, Kafka topics weir-verify-{id}-*, PostgreSQL schemas \
             weir_verify_{}_*",
            root.display(),
            id.replace('-', "_")
        );
    } else {
        let _ = std::fs::remove_dir_all(&root);
    }
    if !keep {
        // Every run's copies, of the runs there may have been (a copy never made is refused,
        // and that is fine).
        let tags = std::iter::once("reference".to_string())
            .chain((1..=options.crashes + EXTRA_RUNS).map(|n| format!("crashes-{n}")));
        let runs: Vec<Scratch> = tags.map(|tag| scratch(&tag)).collect();
        for p in &planned {
            match connector(&p.sink) {
                "kafka" | "upsert-kafka" => {
                    let topic = p.sink.options.get("topic").unwrap_or_default();
                    let names: Vec<String> = runs.iter().map(|s| format!("{}{topic}", s.prefix)).collect();
                    let _ = weir_connectors::kafka::admin::delete_topics(&p.sink, &names).await;
                }
                "jdbc" => {
                    for s in &runs {
                        let _ = weir_connectors::jdbc::scratch::drop_schema(&p.sink, &s.schema, &s.prefix).await;
                    }
                }
                _ => {}
            }
        }
    }
    result
}

/// The runs and the verdicts: `true` if every sink is exactly-once.
async fn verify_runs(
    file: &Path,
    sql: &str,
    options: &Options,
    planned: &[PlannedInsert],
    runner: &dyn Fn(&str) -> Runner,
) -> Result<bool, String> {
    let reference = runner("reference");
    prepare(&reference.scratch, planned).await?;
    let started = Instant::now();
    reference.run(RUN_LIMIT).map_err(|e| format!("the run without crashes failed: {e}"))?;
    let typical = started.elapsed();
    let mut jobs = Vec::new();
    for p in planned {
        let content =
            content::read(file, sql, &*options.engines, &reference.scratch, &p.sink.name, &p.guarantee.varying_columns)
                .await
                .map_err(|e| format!("cannot read back table '{}': {}", p.sink.name, e.message))?;
        jobs.push(Job { planned: p.clone(), reference: content });
    }
    say!(
        options,
        "Run without crashes: {:.1}s, {}",
        typical.as_secs_f64(),
        jobs.iter()
            .map(|j| format!("{} in {}", rows(j.reference.total()), j.planned.sink.name))
            .collect::<Vec<_>>()
            .join(", ")
    );

    let mut phases = vec![Phase::Processing];
    if planned.iter().any(|p| p.checkpointed) {
        phases.extend([Phase::PreCommitted, Phase::Committing, Phase::Restoring]);
        if planned.iter().any(|p| connector(&p.sink) == "jdbc") {
            phases.push(Phase::BetweenCommits);
        }
    }
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(7, |d| d.as_nanos() as u64);
    let mut plan = Plan::new(&phases, options.crashes, typical, seed);
    let mut differences: BTreeMap<String, (Content, u32)> = BTreeMap::new();
    let mut run = 0;
    while run < options.crashes + EXTRA_RUNS && differences.is_empty() {
        run += 1;
        let crashing = runner(&format!("crashes-{run}"));
        prepare(&crashing.scratch, planned).await?;
        let ended_early = tokio::task::block_in_place(|| plan.inject(&crashing))?;
        if !ended_early {
            crashing.run(RUN_LIMIT).map_err(|e| format!("the run after {} failed: {e}", plan.crashes.describe()))?;
        }
        for job in &jobs {
            let p = &job.planned;
            let content = content::read(
                file,
                sql,
                &*options.engines,
                &crashing.scratch,
                &p.sink.name,
                &p.guarantee.varying_columns,
            )
            .await
            .map_err(|e| format!("cannot read back table '{}': {}", p.sink.name, e.message))?;
            if content != job.reference {
                differences.insert(p.sink.name.clone(), (content, plan.crashes.total()));
            }
        }
        if plan.done() {
            break;
        }
    }
    let crashes = &plan.crashes;
    say!(options, "Runs with crashes: {}", crashes.describe());
    for phase in &crashes.unreached {
        say!(options, "  phase '{}' never came (the sinks have no such step)", phase.name());
    }
    let mut all_good = true;
    for job in &jobs {
        let p = &job.planned;
        let name = &p.sink.name;
        let c = connector(&p.sink);
        let causes = &p.guarantee.causes;
        match differences.get(name) {
            Some((after, at)) => {
                all_good = false;
                say!(
                    options,
                    "table '{name}' ({c}): NOT exactly-once: after {at} crash(es), {} differ: {} without crashes, {} \
                     with",
                    rows(after.excess_over(&job.reference, 0).1 + job.reference.excess_over(after, 0).1),
                    rows(job.reference.total()),
                    rows(after.total())
                );
                show_excess(options, "only with crashes", after, &job.reference);
                show_excess(options, "only without crashes", &job.reference, after);
                let functions = &p.guarantee.program_functions;
                match (causes.is_empty(), functions.is_empty()) {
                    (false, _) => causes.iter().for_each(|c| say!(options, "  likely cause: {c}")),
                    (true, false) => say!(
                        options,
                        "  likely cause: a function of the program, declared deterministic, whose results differ \
                         between runs: {} (declare it Volatility::Volatile, or make it deterministic)",
                        functions.join(", ")
                    ),
                    (true, true) => {
                        say!(options,
                        "  likely cause: none the plan shows: a source that does not give the same records again, or \
                         a function declared deterministic that is not (a UDF?)"
                    )
                    }
                }
            }
            None if !causes.is_empty() => {
                all_good = false;
                say!(
                    options,
                    "table '{name}' ({c}): NOT exactly-once: identical this time ({} crash(es), {}), but a replay can \
                     differ:",
                    crashes.total(),
                    rows(job.reference.total())
                );
                causes.iter().for_each(|c| say!(options, "  cause: {c}"));
            }
            None if crashes.total() == 0 => {
                return Err("no crash landed: the runs ended too soon; give more input (--events)".into());
            }
            None => {
                say!(
                    options,
                    "table '{name}' ({c}): exactly-once: {}, {} identical",
                    crashes.describe(),
                    rows(job.reference.total())
                );
                if !p.guarantee.varying_columns.is_empty() {
                    say!(
                        options,
                        "  not compared: column(s) {} (their values depend on when the job runs; the sink writes them \
                         by key)",
                        p.guarantee.varying_columns.join(", ")
                    );
                }
                if matches!(c, "print" | "blackhole") {
                    say!(
                        options,
                        "  (the rows it is sent, checked in files: a console itself shows rows again after a restart)"
                    );
                }
            }
        }
    }
    Ok(all_good)
}

fn show_excess(options: &Options, what: &str, of: &Content, other: &Content) {
    let (shown, all) = of.excess_over(other, SHOWN);
    if all == 0 {
        return;
    }
    say!(options, "  {what} ({}):", rows(all));
    for (row, n) in shown {
        say!(options, "    {row}{}", if n > 1 { format!(" ×{n}") } else { String::new() });
    }
}

/// Make the scratch copies a run writes into: its Kafka topics.
async fn prepare(scratch: &Scratch, planned: &[PlannedInsert]) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(&scratch.dir);
    std::fs::create_dir_all(&scratch.dir).map_err(|e| format!("cannot create {}: {e}", scratch.dir.display()))?;
    for p in planned.iter().filter(|p| matches!(connector(&p.sink), "kafka" | "upsert-kafka")) {
        let topic = format!("{}{}", scratch.prefix, p.sink.options.get("topic").unwrap_or_default());
        weir_connectors::kafka::admin::copy_topic(&p.sink, &topic).await.map_err(|e| e.message)?;
    }
    for p in planned.iter().filter(|p| connector(&p.sink) == "jdbc") {
        weir_connectors::jdbc::scratch::copy_table(&p.sink, &scratch.schema).await.map_err(|e| e.message)?;
    }
    Ok(())
}

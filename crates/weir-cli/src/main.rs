//! The `weir` command: an interactive SQL shell, `weir run FILE.sql`, `weir test PATH…`,
//! `weir verify FILE.sql`.

mod outcome;
mod print;
mod progress;
mod repl;
mod run;
mod updating;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "weir", version, about = "Weir: continuous SQL over streams, exactly once.")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// History file of the interactive shell (default: ~/.weir_history).
    #[arg(long, global = true)]
    history: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Run every statement of a SQL file; jobs run until their sources end (or Ctrl-C).
    Run {
        /// The SQL file.
        file: PathBuf,
        /// Start jobs over, deleting their checkpoints, instead of resuming from the latest.
        #[arg(long, conflicts_with = "from_savepoint")]
        from_scratch: bool,
        /// Start the file's job from this savepoint (or another job's checkpoint directory):
        /// its copy replaces the job's checkpoints, once; a restart resumes from the
        /// checkpoints taken since. Its state is checked against the job's SQL first, as
        /// `weir upgrade --check` does.
        #[arg(long, value_name = "PATH")]
        from_savepoint: Option<String>,
        /// Serve metrics (/metrics), the REST API and the dashboard on [ADDRESS:]PORT while
        /// the jobs run (a bare port listens on loopback only).
        #[arg(long, value_name = "[ADDR:]PORT")]
        web: Option<String>,
    },
    /// Check that the jobs of a SQL file are exactly-once: run them once without failures and
    /// again with crashes (SIGKILL) in every phase of their checkpoints and commits, into
    /// scratch copies of their sinks, and compare what each sink holds. Exits 1 if a sink
    /// differs, 2 if the file could not be verified.
    Verify {
        /// The SQL file.
        file: PathBuf,
        /// Crashes to inject in the second run.
        #[arg(long, default_value_t = 10)]
        crashes: u32,
        /// Events of a generator without a bound ('events').
        #[arg(long, default_value_t = 10_000)]
        events: u64,
        /// Keep the scratch directory (it is printed) instead of removing it.
        #[arg(long)]
        keep: bool,
    },
    /// Run this process as one worker of a SQL file's jobs. Workers of the same file, on any
    /// machines, share the work through the Kafka cluster (consumer groups, repartition
    /// topics, transactions) and the checkpoint directory; a worker that dies hands its tasks
    /// to the others. Runs until every task has ended (bounded inputs), or Ctrl-C.
    Worker {
        /// The SQL file (the same on every worker).
        file: PathBuf,
        /// A stable name of this worker (a pod's name): a worker restarted under the same id
        /// takes its predecessor's place in the groups at once (Kafka's static membership).
        #[arg(long)]
        id: Option<String>,
        /// Serve this worker's tasks' metrics, REST API and dashboard on [ADDRESS:]PORT.
        #[arg(long, value_name = "[ADDR:]PORT")]
        web: Option<String>,
    },
    /// Show the tasks of a SQL file's jobs run by workers: which worker runs each, the
    /// checkpoint it last committed, its consumer lag. Read from the Kafka cluster.
    Status {
        /// The SQL file.
        file: PathBuf,
        /// Print it as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Tell what becomes of each part of a job's checkpointed state if the job is started with
    /// the SQL of this file: kept, migrated, new, dropped or refused, with the reason. Exits 0
    /// if every job can start, 1 if one would be refused, 2 if the file cannot be checked.
    Upgrade {
        /// Check only (the one mode): nothing runs and no checkpoint is changed.
        #[arg(long, required = true)]
        check: bool,
        /// The SQL file of the new version.
        file: PathBuf,
        /// The checkpoint to check against: a savepoint, or a job's checkpoint directory
        /// (default: each job's own, under 'checkpoint.dir').
        #[arg(long, value_name = "PATH")]
        from: Option<String>,
    },
    /// Run sqllogictest files (.slt), or every .slt file under a directory.
    Test {
        /// Files or directories.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::new().filter_or("WEIR_LOG", "warn")).init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        // A run of `weir verify`'s (this program again): the file into its scratch copies.
        if let Some(code) = weir_verify::child(weir::Engine::new).await {
            return ExitCode::from(code as u8);
        }
        match cli.command {
            None => repl::run(cli.history).await,
            Some(Command::Run { file, from_scratch, from_savepoint, web }) => {
                run::run_file(&file, from_scratch, from_savepoint.as_deref(), web.as_deref()).await
            }
            Some(Command::Upgrade { check: _, file, from }) => run::upgrade_check(&file, from.as_deref()).await,
            Some(Command::Worker { file, id, web }) => run::worker_file(&file, id.as_deref(), web.as_deref()).await,
            Some(Command::Status { file, json }) => run::status_file(&file, json).await,
            Some(Command::Verify { file, crashes, events, keep }) => verify_file(&file, crashes, events, keep).await,
            Some(Command::Test { paths }) => match weir_cli::slt::run_paths(&paths).await {
                Ok(summary) => {
                    println!("{} passed, {} failed", summary.passed, summary.failed);
                    if summary.failed == 0 && summary.passed > 0 {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            },
        }
    })
}

/// `weir verify`: 0 every sink exactly-once, 1 one is not, 2 the file cannot be verified.
async fn verify_file(file: &std::path::Path, crashes: u32, events: u64, keep: bool) -> ExitCode {
    let verdict = match weir_verify::Options::new(crashes, events, keep) {
        Ok(options) => weir_verify::verify(file, &options).await,
        Err(e) => Err(format!("cannot find this program to run it again: {e}")),
    };
    match verdict {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("{}: cannot verify: {e}", file.display());
            ExitCode::from(2)
        }
    }
}

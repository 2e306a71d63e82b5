//! `weir run FILE.sql`.

use std::path::Path;
use std::process::ExitCode;

use weir::{Engine, WeirError};

use crate::outcome::{execute, job_summary, Shown};
use crate::progress::Progress;

fn report(file: &Path, e: &WeirError) {
    match e.location {
        Some(at) => eprintln!("{}:{}:{}: error: {}", file.display(), at.line, at.column, e.message),
        None => eprintln!("{}: error: {}", file.display(), e.message),
    }
}

/// The file's text, and an engine whose relative paths are relative to the file, wherever
/// weir is started from.
fn open(file: &Path) -> Result<(String, Engine), ExitCode> {
    let sql = std::fs::read_to_string(file).map_err(|e| {
        eprintln!("error: cannot read '{}': {e}", file.display());
        ExitCode::FAILURE
    })?;
    let base = file.parent().map(|p| if p.as_os_str().is_empty() { Path::new(".") } else { p });
    let engine = match base {
        Some(dir) => Engine::new().with_base_dir(dir),
        None => Engine::new(),
    };
    Ok((sql, engine))
}

pub async fn run_file(file: &Path, from_scratch: bool, savepoint: Option<&str>, web: Option<&str>) -> ExitCode {
    let (sql, engine) = match open(file) {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    let engine = engine.with_from_scratch(from_scratch);
    if let Some(path) = savepoint {
        let set = format!("SET 'execution.savepoint.path' = '{}'", absolute(path).replace('\'', "''"));
        if let Err(e) = engine.execute_all(&set).await {
            eprintln!("error: --from-savepoint: {}", e.message);
            return ExitCode::FAILURE;
        }
    }
    if let Some(code) = serve(&engine, web).await {
        return code;
    }
    let statements = match engine.parse(&sql) {
        Ok(s) => s,
        Err(e) => {
            report(file, &e);
            return ExitCode::FAILURE;
        }
    };
    let mut jobs = Vec::new();
    let mut failed = false;
    for statement in &statements {
        match execute(&engine, statement).await {
            Ok(Shown::Job(job)) => jobs.push(job),
            Ok(Shown::Done) => {}
            Ok(Shown::Interrupted) => {
                jobs.iter().for_each(|j| j.cancel());
                return ExitCode::from(130);
            }
            Err(e) => {
                report(file, &e);
                failed = true;
                break;
            }
        }
    }
    // Jobs run until their sources end; Ctrl-C cancels them. On a terminal, a progress line
    // meanwhile (piped output stays as it was).
    let progress = Progress::start(&jobs);
    wait_all(&jobs, failed, &progress).await
}

async fn wait_all(jobs: &[weir::JobHandle], mut failed: bool, progress: &Progress) -> ExitCode {
    for job in jobs {
        if failed {
            job.cancel();
        }
        let result = tokio::select! {
            r = job.wait() => r,
            _ = tokio::signal::ctrl_c() => {
                // Checkpointed jobs stop after a last checkpoint, so that running the file
                // again resumes exactly there; a second Ctrl-C does not wait for it.
                progress.say("Stopping (a last checkpoint first; Ctrl-C again to stop at once)…");
                jobs.iter().for_each(|j| j.stop_with_checkpoint());
                for job in jobs {
                    tokio::select! {
                        _ = job.wait() => {}
                        _ = tokio::signal::ctrl_c() => {
                            jobs.iter().for_each(|j| j.cancel());
                            break;
                        }
                    }
                    progress.say(&job_summary(job));
                }
                return ExitCode::from(130);
            }
        };
        match result {
            Ok(()) => progress.say(&job_summary(job)),
            Err(e) => {
                progress.say(&format!("error: job '{}' failed: {e}", job.name()));
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// `--web`: start the endpoint before any job, so that a port in use fails the command at
/// once; the address goes to stderr.
async fn serve(engine: &Engine, web: Option<&str>) -> Option<ExitCode> {
    let web = web?;
    match engine.serve_http(web).await {
        Ok(addr) => {
            eprintln!("Web endpoint: http://{addr}/ (metrics at http://{addr}/metrics)");
            None
        }
        Err(e) => {
            eprintln!("error: {e}");
            Some(ExitCode::FAILURE)
        }
    }
}

/// `weir worker`: this process as one worker of the file's jobs (see `weir_workers`);
/// `weir status`: what the workers of the file's jobs are doing.
pub async fn worker_file(file: &Path, id: Option<&str>, web: Option<&str>) -> ExitCode {
    let (sql, engine) = match open(file) {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    if let Some(code) = serve(&engine, web).await {
        return code;
    }
    finish(file, weir_workers::run(&engine, &sql, id).await)
}

/// `weir status [--json]`.
pub async fn status_file(file: &Path, json: bool) -> ExitCode {
    let (sql, engine) = match open(file) {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    finish(file, weir_workers::status(&engine, &sql, json).await.map(|text| print!("{text}")))
}

fn finish(file: &Path, outcome: weir::Result<()>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            report(file, &e);
            ExitCode::FAILURE
        }
    }
}

/// A local path made absolute (the script's own paths are relative to its directory, this
/// one to where weir was started); an object store's location as it is.
fn absolute(path: &str) -> String {
    if weir::storage_is_remote(path) || Path::new(path).is_absolute() {
        return path.to_string();
    }
    std::env::current_dir().map(|d| d.join(path).to_string_lossy().into_owned()).unwrap_or_else(|_| path.to_string())
}

/// `weir upgrade --check FILE [--from PATH]`: 0 every job can start, 1 one would be refused,
/// 2 the file cannot be checked.
pub async fn upgrade_check(file: &Path, from: Option<&str>) -> ExitCode {
    let (sql, engine) = match open(file) {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    let from = from.map(absolute);
    match engine.check_upgrades(&sql, from.as_deref()).await {
        Ok(jobs) if jobs.is_empty() => {
            eprintln!("{}: no job (INSERT or statement set) to check", file.display());
            ExitCode::from(2)
        }
        Ok(jobs) => {
            for job in &jobs {
                print!("{}", job.describe());
            }
            match jobs.iter().any(|j| j.refused()) {
                true => ExitCode::from(1),
                false => ExitCode::SUCCESS,
            }
        }
        Err(e) => {
            report(file, &e);
            ExitCode::from(2)
        }
    }
}

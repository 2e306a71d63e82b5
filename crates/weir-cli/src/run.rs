//! `weir run FILE.sql`.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;

use weir::{Engine, WeirError};

use crate::outcome::{execute, job_summary, Shown};

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

pub async fn run_file(file: &Path, from_scratch: bool, web: Option<&str>) -> ExitCode {
    let (sql, engine) = match open(file) {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    let engine = engine.with_from_scratch(from_scratch);
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
    let progress = (!jobs.is_empty() && std::io::stderr().is_terminal()).then(|| Progress::start(jobs.clone()));
    let outcome = wait_all(&jobs, failed).await;
    drop(progress);
    outcome
}

/// A line on stderr, redrawn twice a second: rows read and written, the read rate, and how
/// far the sources that know their size are. Cleared when dropped.
struct Progress(tokio::task::JoinHandle<()>);

impl Progress {
    fn start(jobs: Vec<weir::JobHandle>) -> Self {
        Self(tokio::spawn(async move {
            let began = std::time::Instant::now();
            let mut last = (began, 0u64);
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(500));
            loop {
                tick.tick().await;
                let statuses: Vec<_> = jobs.iter().map(|j| j.status()).collect();
                let read: u64 = statuses.iter().map(|s| s.rows_read()).sum();
                let written: u64 = statuses.iter().map(|s| s.rows_written()).sum();
                let now = std::time::Instant::now();
                let secs = now.duration_since(last.0).as_secs_f64();
                let rate = if secs > 0.0 { read.saturating_sub(last.1) as f64 / secs } else { 0.0 };
                last = (now, read);
                let (done, total) =
                    statuses.iter().filter_map(|s| s.input_progress()).fold((0, 0), |a, p| (a.0 + p.0, a.1 + p.1));
                let percent = match total {
                    0 => String::new(),
                    t => format!(" · {:.0}%", done as f64 * 100.0 / t as f64),
                };
                eprint!(
                    "\r\x1b[2K{} rows read · {} written · {}/s{percent} · {:.0}s",
                    thousands(read),
                    thousands(written),
                    thousands(rate as u64),
                    began.elapsed().as_secs_f64()
                );
            }
        }))
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.0.abort();
        eprint!("\r\x1b[2K");
    }
}

/// 1234567 → `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

async fn wait_all(jobs: &[weir::JobHandle], mut failed: bool) -> ExitCode {
    for job in jobs {
        if failed {
            job.cancel();
        }
        let result = tokio::select! {
            r = job.wait() => r,
            _ = tokio::signal::ctrl_c() => {
                // Checkpointed jobs stop after a last checkpoint, so that running the file
                // again resumes exactly there; a second Ctrl-C does not wait for it.
                eprintln!("Stopping (a last checkpoint first; Ctrl-C again to stop at once)…");
                jobs.iter().for_each(|j| j.stop_with_checkpoint());
                for job in jobs {
                    tokio::select! {
                        _ = job.wait() => {}
                        _ = tokio::signal::ctrl_c() => {
                            jobs.iter().for_each(|j| j.cancel());
                            break;
                        }
                    }
                    eprintln!("{}", job_summary(job));
                }
                return ExitCode::from(130);
            }
        };
        match result {
            Ok(()) => eprintln!("{}", job_summary(job)),
            Err(e) => {
                eprintln!("error: job '{}' failed: {e}", job.name());
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
pub async fn worker_file(file: &Path, status_only: bool, id: Option<&str>, web: Option<&str>) -> ExitCode {
    let (sql, engine) = match open(file) {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    if let Some(code) = serve(&engine, web).await {
        return code;
    }
    let outcome = match status_only {
        true => weir_workers::status(&engine, &sql).await.map(|text| print!("{text}")),
        false => weir_workers::run(&engine, &sql, id).await,
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            report(file, &e);
            ExitCode::FAILURE
        }
    }
}

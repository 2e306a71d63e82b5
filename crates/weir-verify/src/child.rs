//! A run of `verify`'s: the program started again, with the file and the description of its
//! scratch copies in its environment.

use std::path::{Path, PathBuf};

use weir::scratch::Scratch;
use weir::{Engine, Outcome, WeirError};

/// The description of the run's scratch copies ([`Scratch::to_text`]).
pub(super) const SCRATCH: &str = "WEIR_VERIFY_SCRATCH";
/// The SQL file the run runs.
pub(super) const FILE: &str = "WEIR_VERIFY_FILE";

/// If this process is a run of [`super::verify`]'s, run the file into its scratch copies with
/// an engine of `make` (the program's connectors and functions), to the end of its jobs, and
/// give the exit code; `None` if it is not one. Call it first thing in `main`.
pub async fn child(make: impl Fn() -> Engine) -> Option<i32> {
    let spec = PathBuf::from(std::env::var_os(SCRATCH)?);
    let file = PathBuf::from(std::env::var_os(FILE)?);
    Some(match run(&file, &spec, make).await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{e}");
            1
        }
    })
}

async fn run(file: &Path, spec: &Path, make: impl Fn() -> Engine) -> Result<(), String> {
    let text = std::fs::read_to_string(spec).map_err(|e| format!("cannot read '{}': {e}", spec.display()))?;
    let scratch = Scratch::parse(&text).map_err(|e| e.message)?;
    let sql = std::fs::read_to_string(file).map_err(|e| format!("cannot read '{}': {e}", file.display()))?;
    let mut engine = make().with_scratch(scratch);
    // Relative paths in the file are relative to the file, as in `weir run`.
    if let Some(dir) = file.parent().filter(|p| !p.as_os_str().is_empty()) {
        engine = engine.with_base_dir(dir);
    }
    let located = |e: WeirError| match e.location {
        Some(at) => format!("{}:{}:{}: error: {}", file.display(), at.line, at.column, e.message),
        None => format!("{}: error: {}", file.display(), e.message),
    };
    let mut jobs = Vec::new();
    for statement in engine.parse(&sql).map_err(located)? {
        if let Outcome::Job(job) = engine.execute(&statement).await.map_err(located)? {
            jobs.push(job);
        }
    }
    for job in jobs {
        job.wait().await.map_err(|e| format!("error: job '{}' failed: {e}", job.name()))?;
    }
    Ok(())
}

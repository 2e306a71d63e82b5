//! Showing what a statement gave, shared by the shell and `weir run`.

use std::time::Instant;

use weir::{JobHandle, Outcome, Result};

use crate::print::{rows_text, TablePrinter};

pub enum Shown {
    Done,
    /// An INSERT started this job.
    Job(JobHandle),
    /// Ctrl-C stopped a query.
    Interrupted,
}

/// Run one statement and show what it gave.
pub async fn execute(engine: &weir::Engine, statement: &weir::ParsedStatement) -> Result<Shown> {
    let started = Instant::now();
    let outcome = engine.execute(statement).await?;
    let mode = crate::updating::Mode::of(&engine.setting("sql-client.execution.result-mode").await);
    show(outcome, started, mode).await
}

/// Print an outcome: messages, tables, streaming query rows (Ctrl-C cancels the query).
pub async fn show(outcome: Outcome, started: Instant, mode: crate::updating::Mode) -> Result<Shown> {
    let mut out = std::io::stdout();
    match outcome {
        Outcome::Done(message) => {
            println!("{message}");
            Ok(Shown::Done)
        }
        Outcome::Table(batches) => {
            let Some(first) = batches.first() else { return Ok(Shown::Done) };
            let mut printer = TablePrinter::new(&first.schema());
            for batch in &batches {
                printer.batch(batch, &mut out)?;
            }
            printer.finish(&mut out);
            println!("{} in {:.3}s", rows_text(printer.rows), started.elapsed().as_secs_f64());
            Ok(Shown::Done)
        }
        Outcome::Query(mut stream) if !stream.changelog().is_append_only() => {
            let (rows, changes, interrupted) = crate::updating::show(&mut stream, mode).await?;
            drop(stream);
            let took = started.elapsed().as_secs_f64();
            if interrupted {
                println!("Query cancelled: {} after {changes} change(s).", rows_text(rows));
                return Ok(Shown::Interrupted);
            }
            println!("{} in {took:.3}s ({changes} change(s) applied)", rows_text(rows));
            Ok(Shown::Done)
        }
        Outcome::Query(mut stream) => {
            let mut printer = TablePrinter::new(&stream.schema());
            let interrupted = match crate::updating::drive(&mut stream, |c| printer.batch(&c.batch, &mut out)).await {
                Ok(interrupted) => interrupted,
                Err(e) => {
                    printer.finish(&mut out);
                    return Err(e);
                }
            };
            printer.finish(&mut out);
            let skipped = stream.job().status().records_skipped();
            drop(stream);
            if skipped > 0 {
                println!("{skipped} malformed record(s) skipped ('format.ignore-parse-errors').");
            }
            if interrupted {
                println!("Query cancelled after {}.", rows_text(printer.rows));
                return Ok(Shown::Interrupted);
            }
            println!("{} in {:.3}s", rows_text(printer.rows), started.elapsed().as_secs_f64());
            Ok(Shown::Done)
        }
        Outcome::Job(job) => {
            println!("Job '{}' (id {}) submitted.", job.name(), job.id());
            Ok(Shown::Job(job))
        }
    }
}

/// One line about a finished job: rows and skipped records.
pub fn job_summary(job: &JobHandle) -> String {
    let status = job.status();
    let written = status.rows_written();
    let mut line = format!(
        "Job '{}' {}: {} written in {:.3}s",
        status.name,
        status.state.name().to_lowercase(),
        rows_text(written as usize),
        status.elapsed.as_secs_f64()
    );
    let skipped = status.records_skipped();
    if skipped > 0 {
        line.push_str(&format!("; {skipped} malformed record(s) skipped"));
    }
    line
}

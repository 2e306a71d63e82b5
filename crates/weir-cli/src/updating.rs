//! An updating query's results in the shell: a table kept up to date in place (Flink's SQL
//! client "table" result mode), or every change as it comes with its op first ("changelog").

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use weir::arrow::array::{ArrayRef, StringArray};
use weir::arrow::datatypes::{DataType, Field, Schema};
use weir::arrow::record_batch::RecordBatch;
use weir::{Chunk, Materialized, QueryStream, Result};

use crate::print::{rows_text, TablePrinter};

/// Rows a refreshed table shows on a terminal before it says how many more there are.
const SHOWN_ROWS: usize = 40;
/// How often a terminal's table is redrawn at most: a screen, not a correctness matter.
const REDRAW: Duration = Duration::from_millis(250);

pub enum Mode {
    Table,
    Changelog,
}

impl Mode {
    pub fn of(setting: &str) -> Mode {
        match setting {
            "changelog" | "tableau" => Mode::Changelog,
            _ => Mode::Table,
        }
    }
}

/// The chunk's rows with an `op` column first (`+I`, `-U`, `+U`, `-D`).
pub fn with_ops(chunk: &Chunk) -> Result<RecordBatch> {
    let ops: StringArray = (0..chunk.num_rows()).map(|i| Some(chunk.op(i).short())).collect();
    let mut fields = vec![Arc::new(Field::new("op", DataType::Utf8, false))];
    fields.extend(chunk.schema().fields().iter().cloned());
    let mut columns: Vec<ArrayRef> = vec![Arc::new(ops)];
    columns.extend(chunk.batch.columns().iter().cloned());
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?)
}

/// Draw `table` (at most `limit` rows), returning the lines drawn.
fn draw(table: &RecordBatch, limit: usize, out: &mut impl Write) -> Result<usize> {
    let mut text = Vec::new();
    let mut printer = TablePrinter::new(&table.schema());
    let shown = table.num_rows().min(limit);
    printer.batch(&table.slice(0, shown), &mut text)?;
    printer.finish(&mut text);
    if shown < table.num_rows() {
        let _ = writeln!(text, "… and {} more", rows_text(table.num_rows() - shown));
    }
    let _ = out.write_all(&text);
    let _ = out.flush();
    Ok(text.iter().filter(|b| **b == b'\n').count())
}

/// Hand each chunk of the stream to `each` until it ends (`false`) or Ctrl-C (`true`).
pub async fn drive(stream: &mut QueryStream, mut each: impl FnMut(Chunk) -> Result<()>) -> Result<bool> {
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(true),
            next = stream.next() => match next {
                None => return Ok(false),
                Some(chunk) => each(chunk?)?,
            }
        }
    }
}

/// Show the stream until it ends or Ctrl-C; returns (rows now, changes seen, interrupted).
pub async fn show(stream: &mut QueryStream, mode: Mode) -> Result<(usize, usize, bool)> {
    let mut out = std::io::stdout();
    let mut changes = 0usize;
    match mode {
        Mode::Changelog => {
            let mut printer: Option<TablePrinter> = None;
            let interrupted = drive(stream, |chunk| {
                let batch = with_ops(&chunk)?;
                changes += batch.num_rows();
                printer.get_or_insert_with(|| TablePrinter::new(&batch.schema())).batch(&batch, &mut out)
            })
            .await?;
            match &mut printer {
                Some(p) => p.finish(&mut out),
                None => {
                    let empty = with_ops(&Chunk::inserts(RecordBatch::new_empty(stream.schema())))?;
                    TablePrinter::new(&empty.schema()).finish(&mut out);
                }
            }
            Ok((changes, changes, interrupted))
        }
        Mode::Table => {
            let mut table = Materialized::new(stream.schema())?;
            let live = out.is_terminal();
            let mut drawn = 0usize;
            let mut last = Instant::now();
            let mut redraw = |table: &Materialized, limit: usize, out: &mut std::io::Stdout| -> Result<()> {
                if drawn > 0 {
                    // Up over the last drawing, and clear it.
                    let _ = write!(out, "\x1b[{drawn}A\x1b[J");
                }
                drawn = draw(&table.table()?, limit, out)?;
                Ok(())
            };
            let interrupted = drive(stream, |chunk| {
                changes += chunk.num_rows();
                table.apply(&chunk)?;
                if live && last.elapsed() >= REDRAW {
                    redraw(&table, SHOWN_ROWS, &mut out)?;
                    last = Instant::now();
                }
                Ok(())
            })
            .await?;
            redraw(&table, usize::MAX, &mut out)?;
            Ok((table.len(), changes, interrupted))
        }
    }
}

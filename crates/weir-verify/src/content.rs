//! What a sink holds after a run, read back through Weir's own sources from the run's
//! scratch copy, as a multiset of rows (the changelog applied) to compare with another run's.

use std::collections::BTreeMap;
use std::path::Path;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::ArrayFormatter;
use weir_core::{Result, WeirError};

use weir::scratch::Scratch;
use weir::Engine;

/// Between the values of a row's key (a character no value shows).
const SEPARATOR: char = '\u{1f}';

/// A sink's final rows: each row's text (its compared columns), and how often it is there.
#[derive(Debug, Default, PartialEq)]
pub struct Content {
    pub rows: BTreeMap<String, u64>,
}

impl Content {
    pub fn total(&self) -> u64 {
        self.rows.values().sum()
    }

    /// Rows `self` has more of than `other`: (row as shown, how many more), at most `limit`
    /// of them, and how many differ in all.
    pub fn excess_over(&self, other: &Content, limit: usize) -> (Vec<(String, u64)>, u64) {
        let mut shown = Vec::new();
        let mut all = 0;
        for (row, n) in &self.rows {
            let there = other.rows.get(row).copied().unwrap_or(0);
            if *n > there {
                all += n - there;
                if shown.len() < limit {
                    shown.push((format!("[{}]", row.replace(SEPARATOR, ", ")), n - there));
                }
            }
        }
        (shown, all)
    }

    fn add(&mut self, batch: &RecordBatch, compared: &[usize]) -> Result<()> {
        let options = weir_core::display_options();
        let formatters = compared
            .iter()
            .map(|i| ArrayFormatter::try_new(batch.column(*i).as_ref(), &options))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        for row in 0..batch.num_rows() {
            let text: Vec<String> = formatters.iter().map(|f| f.value(row).to_string()).collect();
            *self.rows.entry(text.join(&SEPARATOR.to_string())).or_default() += 1;
        }
        Ok(())
    }
}

/// What table `sink` holds after the run that wrote into `scratch`: the file's tables created
/// again by a fresh engine (of `engines`), the sink as its scratch copy, and read whole (every committed
/// record, the changelog applied). Columns named in `skipped` are not compared.
pub async fn read(
    file: &Path,
    sql: &str,
    engines: &(dyn Fn() -> Engine + Send + Sync),
    scratch: &Scratch,
    sink: &str,
    skipped: &[String],
) -> Result<Content> {
    let mut reading = scratch.clone();
    reading.read_back = true;
    let engine = engines().with_scratch(reading);
    let engine = match file.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) => engine.with_base_dir(dir),
        None => engine,
    };
    engine.plan_inserts(sql).await?;
    let table = engine.table(sink).await.ok_or_else(|| WeirError::internal(format!("no table '{sink}'")))?;
    let mut content = Content::default();
    if table.options.get("connector") == Some("jdbc") {
        // Weir reads no PostgreSQL table whole: ask PostgreSQL, each value as its text.
        for row in weir_connectors::jdbc::scratch::read_rows(&table, skipped).await? {
            *content.rows.entry(row.join(&SEPARATOR.to_string())).or_default() += 1;
        }
        return Ok(content);
    }
    let stream = engine.query(&format!("SELECT * FROM `{}`", sink.replace('`', "``"))).await?;
    let batches = stream.collect().await?;
    for batch in &batches {
        let schema = batch.schema();
        let compared: Vec<usize> =
            (0..schema.fields().len()).filter(|i| !skipped.contains(schema.field(*i).name())).collect();
        if compared.is_empty() {
            return Err(WeirError::user(format!("table '{sink}': no column left to compare")));
        }
        content.add(batch, &compared)?;
    }
    Ok(content)
}

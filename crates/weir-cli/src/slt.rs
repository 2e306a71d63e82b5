//! sqllogictest (`.slt`) support: the same runner serves `weir test` and `cargo test`.
//!
//! Each file runs against a fresh [`Engine`] whose relative paths resolve against the file's
//! directory; `__TEST_DIR__` (after `control substitution on`) is a scratch directory for the
//! file's outputs. An `INSERT` waits for its job, so the next record sees what it wrote.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::ArrayFormatter;
use sqllogictest::{DBOutput, DefaultColumnType, Record, Runner};
use weir::{Engine, Outcome, Result, WeirError};

pub struct WeirDb {
    engine: Engine,
}

impl WeirDb {
    pub fn new(base_dir: &Path) -> Self {
        Self { engine: Engine::new().with_base_dir(base_dir) }
    }
}

fn column_type(t: &DataType) -> DefaultColumnType {
    if t.is_integer() {
        DefaultColumnType::Integer
    } else if t.is_floating() || matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..)) {
        DefaultColumnType::FloatingPoint
    } else {
        DefaultColumnType::Text
    }
}

fn rows(batches: &[RecordBatch]) -> Result<DBOutput<DefaultColumnType>> {
    let options = weir::display_options();
    let mut types = Vec::new();
    let mut rows = Vec::new();
    for batch in batches {
        types = batch.schema().fields().iter().map(|f| column_type(f.data_type())).collect();
        let formatters = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        for row in 0..batch.num_rows() {
            rows.push(
                formatters
                    .iter()
                    .map(|f| match f.value(row).to_string() {
                        s if s.is_empty() => "(empty)".to_string(),
                        s => s,
                    })
                    .collect(),
            );
        }
    }
    Ok(DBOutput::Rows { types, rows })
}

#[async_trait]
impl sqllogictest::AsyncDB for WeirDb {
    type Error = WeirError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>> {
        let mut output = DBOutput::StatementComplete(0);
        for statement in self.engine.parse(sql)? {
            output = match self.engine.execute(&statement).await? {
                Outcome::Done(_) => DBOutput::StatementComplete(0),
                Outcome::Table(batches) => rows(&batches)?,
                Outcome::Query(q) => {
                    let schema = q.schema();
                    let batches = q.collect().await?;
                    match rows(&batches)? {
                        DBOutput::Rows { rows, .. } => DBOutput::Rows {
                            types: schema.fields().iter().map(|f| column_type(f.data_type())).collect(),
                            rows,
                        },
                        other => other,
                    }
                }
                Outcome::Job(job) => {
                    job.wait().await?;
                    let written = job.status().rows_written();
                    DBOutput::StatementComplete(written)
                }
            };
        }
        Ok(output)
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "weir"
    }
}

/// Records that passed and failed in one run.
/// Rows compared one by one, as many as expected. A `<slt:ignore>` skips a volatile part of
/// its own row only: sqllogictest's default matching looks for the fragments anywhere further
/// in the whole result, so a result with extra rows or columns around them passed.
fn row_validator(normalizer: sqllogictest::Normalizer, actual: &[Vec<String>], expected: &[String]) -> bool {
    const IGNORE: &str = "<slt:ignore>";
    actual.len() == expected.len()
        && actual.iter().zip(expected).all(|(row, want)| {
            let got = row.iter().map(normalizer).collect::<Vec<_>>().join(" ");
            let want = normalizer(want);
            if !want.contains(IGNORE) {
                return got == want;
            }
            let fragments: Vec<&str> = want.split(IGNORE).collect();
            let (first, last) = (fragments[0], fragments[fragments.len() - 1]);
            if !got.starts_with(first) || got.len() < first.len() + last.len() || !got.ends_with(last) {
                return false;
            }
            let mut rest = &got[first.len()..got.len() - last.len()];
            for fragment in &fragments[1..fragments.len() - 1] {
                match rest.find(fragment) {
                    Some(at) => rest = &rest[at + fragment.len()..],
                    None => return false,
                }
            }
            true
        })
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
}

/// `.slt` files under `path` (itself, if it is a file), in name order.
pub fn slt_files(path: &Path) -> Result<Vec<PathBuf>> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries =
        std::fs::read_dir(path).map_err(|e| WeirError::user(format!("cannot read '{}': {e}", path.display())))?;
    let mut files = Vec::new();
    for entry in entries {
        let p = entry.map_err(|e| WeirError::external(e.to_string()))?.path();
        if p.is_dir() {
            files.extend(slt_files(&p)?);
        } else if p.extension().is_some_and(|e| e == "slt") {
            files.push(p);
        }
    }
    files.sort();
    Ok(files)
}

/// Run one file record by record, printing each failure; every record runs even after one
/// fails, so a run shows all failures at once.
pub async fn run_file(path: &Path) -> Result<Summary> {
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let records = sqllogictest::parse_file::<DefaultColumnType>(path)
        .map_err(|e| WeirError::user(format!("{}: {e}", path.display())))?;
    let mut runner = Runner::new(move || {
        let base = base.clone();
        async move { Ok(WeirDb::new(&base)) }
    });
    runner.with_column_validator(sqllogictest::strict_column_validator);
    runner.with_validator(row_validator);
    let mut summary = Summary::default();
    for record in records {
        let counts = matches!(record, Record::Statement { .. } | Record::Query { .. });
        match runner.run_async(record).await {
            Ok(_) if counts => summary.passed += 1,
            Ok(_) => {}
            Err(e) => {
                summary.failed += 1;
                eprintln!("{}", e.display(false));
            }
        }
    }
    Ok(summary)
}

/// Run every `.slt` file under each path; prints a line per file and returns the totals.
pub async fn run_paths(paths: &[PathBuf]) -> Result<Summary> {
    let mut total = Summary::default();
    for path in paths {
        for file in slt_files(path)? {
            let s = run_file(&file).await?;
            println!("{}: {} passed, {} failed", file.display(), s.passed, s.failed);
            total.passed += s.passed;
            total.failed += s.failed;
        }
    }
    Ok(total)
}

//! CSV records to batches. The `csv` crate splits records (quotes, escapes, embedded newlines)
//! and knows each record's line; typing is vectorized per column (see `text`).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{StringArray, StringBuilder};
use datafusion::arrow::compute::{filter_record_batch, not};
use datafusion::arrow::csv::WriterBuilder;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use weir_core::{Result, WeirError};

use super::text::to_typed_columns;
use super::{io_error, line_of, BatchReader, BatchWriter, ParsePolicy, TextRange};

pub struct CsvOptions {
    pub delimiter: u8,
    pub quote: u8,
    pub header: bool,
}

pub struct CsvReader {
    reader: csv::Reader<File>,
    path: PathBuf,
    policy: ParsePolicy,
    file_columns: usize,
    projection: Vec<usize>,
    schema: SchemaRef,
    batch_size: usize,
    record: csv::StringRecord,
    skipped: u64,
    done: bool,
    /// The part of the file this reader reads (`None`: all of it).
    range: Option<TextRange>,
    /// Under `ParsePolicy::Fail`: a structural error found while splitting, reported once the
    /// records before it have been typed (one of them may hold an earlier error).
    pending_error: Option<WeirError>,
}

impl CsvReader {
    pub fn new(
        file: File,
        path: &Path,
        range: Option<TextRange>,
        options: CsvOptions,
        policy: ParsePolicy,
        table_schema: &SchemaRef,
        projection: &[usize],
        batch_size: usize,
    ) -> Self {
        let reader = csv::ReaderBuilder::new()
            .delimiter(options.delimiter)
            .quote(options.quote)
            // Only the range at the start of the file has the header.
            .has_headers(options.header && range.is_none_or(|r| r.start == 0))
            .flexible(true)
            .buffer_capacity(256 * 1024)
            .from_reader(file);
        Self {
            reader,
            path: path.to_path_buf(),
            policy,
            file_columns: table_schema.fields().len(),
            projection: projection.to_vec(),
            schema: Arc::new(table_schema.project(projection).unwrap_or_else(|_| Schema::empty())),
            batch_size,
            record: csv::StringRecord::new(),
            skipped: 0,
            done: false,
            range,
            pending_error: None,
        }
    }

    fn error(&self, line: u64, reason: impl std::fmt::Display) -> WeirError {
        // Lines count from the start of this reader's range; make them lines of the file.
        let line = match self.range {
            Some(r) if r.start > 0 => line + line_of(&self.path, r.start) - 1,
            _ => line,
        };
        WeirError::user(format!(
            "malformed CSV record in '{}' at line {line}: {reason} \
             (set 'format.ignore-parse-errors' = 'true' to skip such records)",
            self.path.display()
        ))
    }

    /// A record that cannot be split into the table's fields: skipped and counted, or, under
    /// `Fail`, kept as the pending error and the batch ends here. Returns whether to go on.
    fn malformed(&mut self, line: u64, reason: impl std::fmt::Display) -> bool {
        match self.policy {
            ParsePolicy::Skip => {
                self.skipped += 1;
                true
            }
            ParsePolicy::Fail => {
                self.pending_error = Some(self.error(line, reason));
                false
            }
        }
    }

    /// Split up to `batch_size` records into string columns, with each record's line.
    fn read_strings(&mut self) -> Result<(Vec<StringArray>, Vec<u64>)> {
        let mut builders: Vec<StringBuilder> =
            self.projection.iter().map(|_| StringBuilder::new()).collect();
        let mut lines = Vec::new();
        while lines.len() < self.batch_size {
            let line = self.reader.position().line();
            if let Some(r) = self.range {
                if r.start + self.reader.position().byte() >= r.end {
                    self.done = true;
                    break;
                }
            }
            match self.reader.read_record(&mut self.record) {
                Ok(false) => {
                    self.done = true;
                    break;
                }
                Ok(true) => {
                    let line = self.record.position().map_or(line, |p| p.line());
                    if self.record.len() != self.file_columns {
                        let found = self.record.len();
                        let reason = format!("expected {} fields, found {found}", self.file_columns);
                        if self.malformed(line, reason) {
                            continue;
                        }
                        break;
                    }
                    for (builder, &i) in builders.iter_mut().zip(&self.projection) {
                        builder.append_value(&self.record[i]);
                    }
                    lines.push(line);
                }
                Err(e) => match e.kind() {
                    csv::ErrorKind::Io(_) => return Err(io_error(&self.path, e)),
                    _ => {
                        let line = e.position().map_or(line, |p| p.line());
                        if !self.malformed(line, e) {
                            break;
                        }
                    }
                },
            }
        }
        Ok((builders.iter_mut().map(|b| b.finish()).collect(), lines))
    }
}

impl BatchReader for CsvReader {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            if let Some(e) = self.pending_error.take() {
                return Err(e);
            }
            if self.done {
                return Ok(None);
            }
            let (strings, lines) = self.read_strings()?;
            if lines.is_empty() {
                continue;
            }
            let (columns, bad_rows, first_bad) = to_typed_columns(strings, &self.schema)?;
            let options = RecordBatchOptions::new().with_row_count(Some(lines.len()));
            let batch = RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)?;
            if let (ParsePolicy::Fail, Some(bad)) = (self.policy, first_bad) {
                let reason = format!("cannot parse '{}' as {} for column '{}'", bad.text, bad.data_type, bad.column);
                return Err(self.error(lines[bad.row], reason));
            }
            // The records before a structural error are good; the error comes next time.
            let Some(bad_rows) = bad_rows else { return Ok(Some(batch)) };
            self.skipped += bad_rows.true_count() as u64;
            let kept = filter_record_batch(&batch, &not(&bad_rows)?)?;
            if kept.num_rows() > 0 {
                return Ok(Some(kept));
            }
        }
    }

    fn records_skipped(&self) -> u64 {
        self.skipped
    }
}

pub struct CsvWriter(datafusion::arrow::csv::Writer<File>);

pub fn csv_writer(file: File, delimiter: u8, header: bool) -> CsvWriter {
    CsvWriter(
        WriterBuilder::new()
            .with_header(header)
            .with_delimiter(delimiter)
            .with_timestamp_format("%Y-%m-%d %H:%M:%S%.f".to_string())
            .with_datetime_format("%Y-%m-%d %H:%M:%S%.f".to_string())
            .with_null(String::new())
            .build(file),
    )
}

impl BatchWriter for CsvWriter {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        Ok(self.0.write(batch)?)
    }

    fn close(self: Box<Self>) -> Result<()> {
        let file = self.0.into_inner();
        file.sync_all().map_err(|e| WeirError::external(format!("fsync: {e}")))
    }
}

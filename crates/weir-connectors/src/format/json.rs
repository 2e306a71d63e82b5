//! JSON lines to batches with arrow-json's decoder, a whole batch of lines at a time. Only when
//! a batch fails to decode are its lines decoded one by one, to find the malformed ones.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::json::reader::ReaderBuilder;
use datafusion::arrow::json::LineDelimitedWriter;
use datafusion::arrow::record_batch::RecordBatch;
use weir_core::{Result, WeirError};

use super::{io_error, BatchReader, BatchWriter, ParsePolicy};

pub struct JsonReader {
    lines: std::io::Lines<BufReader<File>>,
    line_no: u64,
    path: PathBuf,
    policy: ParsePolicy,
    schema: SchemaRef,
    batch_size: usize,
    skipped: u64,
    done: bool,
}

impl JsonReader {
    pub fn new(
        file: File,
        path: &Path,
        policy: ParsePolicy,
        table_schema: &SchemaRef,
        projection: &[usize],
        batch_size: usize,
    ) -> Result<Self> {
        Ok(Self {
            lines: BufReader::with_capacity(256 * 1024, file).lines(),
            line_no: 0,
            path: path.to_path_buf(),
            policy,
            schema: Arc::new(table_schema.project(projection)?),
            batch_size,
            skipped: 0,
            done: false,
        })
    }

    fn decode(&self, text: &[u8], rows: usize) -> Result<Option<RecordBatch>> {
        let mut decoder = ReaderBuilder::new(self.schema.clone())
            .with_batch_size(rows.max(1))
            .build_decoder()?;
        let mut offset = 0;
        while offset < text.len() {
            let read = decoder.decode(&text[offset..])?;
            if read == 0 {
                break;
            }
            offset += read;
        }
        Ok(decoder.flush()?)
    }

    /// The batch failed as a whole: find the bad lines, apply the policy, decode the rest.
    fn decode_line_by_line(&mut self, lines: Vec<(u64, String)>) -> Result<Option<RecordBatch>> {
        let mut good = String::new();
        let mut rows = 0;
        for (line_no, line) in lines {
            // A line must decode to exactly one row on its own: an unfinished object is an
            // error here, not a prefix of the next line.
            let one = self.decode(line.as_bytes(), 1).and_then(|b| match b.map_or(0, |b| b.num_rows()) {
                1 => Ok(()),
                _ => Err(WeirError::user("not a complete JSON object")),
            });
            match one {
                Ok(()) => {
                    good.push_str(&line);
                    good.push('\n');
                    rows += 1;
                }
                Err(e) if self.policy == ParsePolicy::Skip => {
                    log::debug!("skipping malformed JSON at {}:{line_no}: {e}", self.path.display());
                    self.skipped += 1;
                }
                Err(e) => {
                    return Err(WeirError::user(format!(
                        "malformed JSON record in '{}' at line {line_no}: {} \
                         (set 'format.ignore-parse-errors' = 'true' to skip such records)",
                        self.path.display(),
                        e.message.trim_start_matches("Json error: ")
                    )))
                }
            }
        }
        if rows == 0 {
            return Ok(None);
        }
        self.decode(good.as_bytes(), rows)
    }
}

impl BatchReader for JsonReader {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        while !self.done {
            let mut text = String::new();
            let mut lines = Vec::new();
            while lines.len() < self.batch_size {
                match self.lines.next() {
                    None => {
                        self.done = true;
                        break;
                    }
                    Some(Err(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
                        self.line_no += 1;
                        let line = self.line_no;
                        if self.policy == ParsePolicy::Fail {
                            return Err(WeirError::user(format!(
                                "malformed JSON record in '{}' at line {line}: not valid UTF-8",
                                self.path.display()
                            )));
                        }
                        self.skipped += 1;
                    }
                    Some(Err(e)) => return Err(io_error(&self.path, e)),
                    Some(Ok(line)) => {
                        self.line_no += 1;
                        if line.trim().is_empty() {
                            continue;
                        }
                        text.push_str(&line);
                        text.push('\n');
                        lines.push((self.line_no, line));
                    }
                }
            }
            if lines.is_empty() {
                continue;
            }
            let batch = match self.decode(text.as_bytes(), lines.len()) {
                Ok(batch) => batch,
                Err(_) => self.decode_line_by_line(lines)?,
            };
            if let Some(batch) = batch.filter(|b| b.num_rows() > 0) {
                return Ok(Some(batch));
            }
        }
        Ok(None)
    }

    fn records_skipped(&self) -> u64 {
        self.skipped
    }
}

pub struct JsonWriter(LineDelimitedWriter<File>);

pub fn json_writer(file: File) -> JsonWriter {
    JsonWriter(LineDelimitedWriter::new(file))
}

impl BatchWriter for JsonWriter {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        Ok(self.0.write(batch)?)
    }

    fn close(mut self: Box<Self>) -> Result<()> {
        self.0.finish()?;
        let file = self.0.into_inner();
        file.sync_all().map_err(|e| WeirError::external(format!("fsync: {e}")))
    }
}

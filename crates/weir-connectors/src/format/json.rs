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

use super::{io_error, line_of, BatchReader, BatchWriter, ParsePolicy, TextRange};

pub struct JsonReader {
    reader: BufReader<File>,
    /// Line number of the last line read, within the file.
    line_no: u64,
    /// Offset of the next line in the file, and where this reader's range ends.
    offset: u64,
    end: Option<u64>,
    /// Where the first line of the range is in the file, counted only if an error needs it.
    range_start: u64,
    line_base: Option<u64>,
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
        range: Option<TextRange>,
        policy: ParsePolicy,
        table_schema: &SchemaRef,
        projection: &[usize],
        batch_size: usize,
    ) -> Result<Self> {
        Ok(Self {
            reader: BufReader::with_capacity(256 * 1024, file),
            line_no: 0,
            offset: range.map_or(0, |r| r.start),
            end: range.map(|r| r.end),
            range_start: range.map_or(0, |r| r.start),
            line_base: None,
            path: path.to_path_buf(),
            policy,
            schema: Arc::new(table_schema.project(projection)?),
            batch_size,
            skipped: 0,
            done: false,
        })
    }

    /// The line number in the file of line `n` of this reader's range.
    fn file_line(&mut self, n: u64) -> u64 {
        if self.range_start == 0 {
            return n;
        }
        let base = *self.line_base.get_or_insert_with(|| line_of(&self.path, self.range_start) - 1);
        base + n
    }

    /// The next line, without its terminator, or `None` at the end of the range.
    fn next_line(&mut self, buf: &mut Vec<u8>) -> Result<Option<()>> {
        if self.end.is_some_and(|end| self.offset >= end) {
            return Ok(None);
        }
        buf.clear();
        let n = self.reader.read_until(b'\n', buf).map_err(|e| io_error(&self.path, e))?;
        if n == 0 {
            return Ok(None);
        }
        self.offset += n as u64;
        self.line_no += 1;
        while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            buf.pop();
        }
        Ok(Some(()))
    }

    fn decode(&self, text: &[u8], rows: usize) -> Result<Option<RecordBatch>> {
        let mut decoder = ReaderBuilder::new(self.schema.clone()).with_batch_size(rows.max(1)).build_decoder()?;
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
                    let line_no = self.file_line(line_no);
                    return Err(WeirError::user(format!(
                        "malformed JSON record in '{}' at line {line_no}: {} \
                         (set 'format.ignore-parse-errors' = 'true' to skip such records)",
                        self.path.display(),
                        e.message.trim_start_matches("Json error: ")
                    )));
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
    fn position(&self) -> u64 {
        self.offset
    }

    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        let mut buf = Vec::new();
        while !self.done {
            let mut text = String::new();
            let mut lines = Vec::new();
            while lines.len() < self.batch_size {
                if self.next_line(&mut buf)?.is_none() {
                    self.done = true;
                    break;
                }
                let line_no = self.line_no;
                match std::str::from_utf8(&buf) {
                    Err(_) => {
                        if self.policy == ParsePolicy::Fail {
                            let line = self.file_line(line_no);
                            return Err(WeirError::user(format!(
                                "malformed JSON record in '{}' at line {line}: not valid UTF-8",
                                self.path.display()
                            )));
                        }
                        self.skipped += 1;
                    }
                    Ok(line) if line.trim().is_empty() => {}
                    Ok(line) => {
                        text.push_str(line);
                        text.push('\n');
                        lines.push((line_no, line.to_string()));
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

//! CSV records to batches.
//!
//! Three paths. The quickest, for quote-free records, is the splitter of `csv_split`: memchr
//! finds lines and fields, and only the projected fields are copied and typed. At the first
//! batch it cannot decode it steps aside for good, and arrow-csv's decoder takes over from
//! that batch: it splits and types whole batches at once. Neither can skip a bad record or
//! say which line it was on, so when a batch fails, the file is
//! re-read from the start of that batch by the careful path: the `csv` crate splits records
//! and knows each record's line, and typing is vectorized per column (see `text`), so every
//! bad record is found, with its line, and skipped or reported by the parse policy. All paths
//! give the same rows for the same input.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{StringArray, StringBuilder};
use datafusion::arrow::compute::{filter_record_batch, not};
use datafusion::arrow::csv::WriterBuilder;
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use weir_core::{Result, WeirError};

use super::text::to_typed_columns;
use super::{io_error, line_of, BatchReader, BatchWriter, ParsePolicy, TextRange};

#[derive(Debug, Clone, Copy)]
pub struct CsvOptions {
    pub delimiter: u8,
    pub quote: u8,
    pub header: bool,
}

/// The careful path: record by record.
pub struct RecordReader {
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
    /// Reader offset of the first record not handed out yet: where a restart continues. A
    /// malformed record that fails the job is not consumed.
    consumed: u64,
    /// Under `ParsePolicy::Fail`: a structural error found while splitting, reported once the
    /// records before it have been typed (one of them may hold an earlier error).
    pending_error: Option<WeirError>,
}

impl RecordReader {
    #[allow(clippy::too_many_arguments)]
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
            consumed: 0,
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
        let mut builders: Vec<StringBuilder> = self.projection.iter().map(|_| StringBuilder::new()).collect();
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
                    self.consumed = self.reader.position().byte();
                    self.done = true;
                    break;
                }
                Ok(true) => {
                    let line = self.record.position().map_or(line, |p| p.line());
                    if self.record.len() != self.file_columns {
                        let found = self.record.len();
                        let reason = format!("expected {} fields, found {found}", self.file_columns);
                        if self.malformed(line, reason) {
                            self.consumed = self.reader.position().byte();
                            continue;
                        }
                        break;
                    }
                    for (builder, &i) in builders.iter_mut().zip(&self.projection) {
                        builder.append_value(&self.record[i]);
                    }
                    lines.push(line);
                    self.consumed = self.reader.position().byte();
                }
                Err(e) => match e.kind() {
                    csv::ErrorKind::Io(_) => return Err(io_error(&self.path, e)),
                    _ => {
                        let line = e.position().map_or(line, |p| p.line());
                        if !self.malformed(line, e) {
                            break;
                        }
                        self.consumed = self.reader.position().byte();
                    }
                },
            }
        }
        Ok((builders.iter_mut().map(|b| b.finish()).collect(), lines))
    }
}

impl RecordReader {
    fn offset(&self) -> u64 {
        self.range.map_or(0, |r| r.start) + self.consumed
    }
}

impl BatchReader for RecordReader {
    fn position(&self) -> u64 {
        self.offset()
    }

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

/// Reads a CSV file (or a byte range of it) by the fast path until a batch fails, then by the
/// careful path from the start of that batch.
pub struct CsvReader {
    path: PathBuf,
    options: CsvOptions,
    policy: ParsePolicy,
    table_schema: SchemaRef,
    projection: Vec<usize>,
    batch_size: usize,
    state: State,
}

/// Boxed: a reader holds one, and the two differ much in size.
enum State {
    Fast(Box<Fast>),
    Careful(Box<RecordReader>),
}

struct Fast {
    /// Quote-free records, split by memchr; given up for the rest of the input at the first
    /// batch it cannot decode (the decoder below takes it from the same offset).
    splitter: Option<super::csv_split::Splitter>,
    decoder: datafusion::arrow::csv::reader::Decoder,
    /// The projected schema; the decoder reads its timestamp columns as text, which
    /// [`super::text::cast_text`] converts.
    schema: SchemaRef,
    file: File,
    buf: Vec<u8>,
    pos: usize,
    /// File offset of `buf[0]`.
    buf_offset: u64,
    /// Bytes at or after this offset belong to the next range.
    stop: u64,
    /// File offset where the batch being decoded begins.
    batch_start: u64,
    eof: bool,
}

const READ_SIZE: usize = 1 << 20;

impl Fast {
    fn offset(&self) -> u64 {
        self.buf_offset + self.pos as u64
    }

    /// Make unread bytes available; false at the end of the range.
    fn fill(&mut self) -> std::io::Result<bool> {
        use std::io::Read;
        if self.pos < self.buf.len() {
            return Ok(true);
        }
        if self.eof || self.offset() >= self.stop {
            return Ok(false);
        }
        self.buf_offset += self.buf.len() as u64;
        self.pos = 0;
        let want = READ_SIZE.min((self.stop - self.buf_offset).min(READ_SIZE as u64) as usize);
        self.buf.resize(want, 0);
        let mut filled = 0;
        while filled < want {
            match self.file.read(&mut self.buf[filled..])? {
                0 => {
                    self.eof = true;
                    break;
                }
                n => filled += n,
            }
        }
        self.buf.truncate(filled);
        Ok(filled > 0)
    }

    /// Unread bytes holding a complete line (or the rest of the range): read more, keeping
    /// the unread ones. False at the end of the range.
    fn fill_lines(&mut self) -> std::io::Result<bool> {
        use std::io::Read;
        while memchr::memchr(b'\n', &self.buf[self.pos..]).is_none() {
            let end = self.buf_offset + self.buf.len() as u64;
            if self.eof || end >= self.stop {
                return Ok(self.pos < self.buf.len());
            }
            self.buf.drain(..self.pos);
            self.buf_offset += self.pos as u64;
            self.pos = 0;
            let have = self.buf.len();
            let want = READ_SIZE.min((self.stop - end).min(READ_SIZE as u64) as usize);
            self.buf.resize(have + want, 0);
            let mut filled = 0;
            while filled < want {
                match self.file.read(&mut self.buf[have + filled..])? {
                    0 => {
                        self.eof = true;
                        break;
                    }
                    n => filled += n,
                }
            }
            self.buf.truncate(have + filled);
        }
        Ok(true)
    }

    /// The next batch by the splitter; `None` when it steps aside (for good).
    fn split_batch(&mut self, path: &Path, batch_size: usize) -> Result<Option<Option<RecordBatch>>> {
        if self.splitter.is_none() {
            return Ok(None);
        }
        if !self.fill_lines().map_err(|e| io_error(path, e))? {
            return Ok(Some(None));
        }
        let at_end = self.eof || self.buf_offset + self.buf.len() as u64 >= self.stop;
        let Some(splitter) = &self.splitter else { return Ok(None) };
        match splitter.decode(&self.buf[self.pos..], batch_size, at_end) {
            Some((batch, used)) => {
                self.pos += used;
                self.batch_start = self.offset();
                Ok(Some(Some(batch)))
            }
            None => {
                self.splitter = None;
                Ok(None)
            }
        }
    }

    /// The next batch, or `Err(())` if the decoder refused it (the careful path takes over).
    fn next_batch(&mut self, path: &Path, batch_size: usize) -> Result<std::result::Result<Option<RecordBatch>, ()>> {
        if let Some(batch) = self.split_batch(path, batch_size)? {
            return Ok(Ok(batch));
        }
        loop {
            if !self.fill().map_err(|e| io_error(path, e))? {
                // An empty buffer tells the decoder the input ended (a last line without '\n').
                if self.decoder.decode(&[]).is_err() {
                    return Ok(Err(()));
                }
                break;
            }
            match self.decoder.decode(&self.buf[self.pos..]) {
                Ok(n) => self.pos += n,
                Err(_) => return Ok(Err(())),
            }
            if self.decoder.capacity() == 0 {
                break;
            }
        }
        let batch = match self.decoder.flush() {
            Ok(Some(batch)) if batch.num_rows() > 0 => batch,
            Ok(_) => {
                self.batch_start = self.offset();
                return Ok(Ok(None));
            }
            Err(_) => return Ok(Err(())),
        };
        let strict = datafusion::arrow::compute::CastOptions { safe: false, ..Default::default() };
        let mut columns = Vec::with_capacity(batch.num_columns());
        for (column, field) in batch.columns().iter().zip(self.schema.fields()) {
            if column.data_type() == field.data_type() {
                columns.push(column.clone());
                continue;
            }
            match super::text::cast_text(column, field.data_type(), &strict) {
                Ok(typed) => columns.push(typed),
                Err(_) => return Ok(Err(())),
            }
        }
        self.batch_start = self.offset();
        Ok(Ok(Some(RecordBatch::try_new(self.schema.clone(), columns)?)))
    }
}

impl CsvReader {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        mut file: File,
        path: &Path,
        range: Option<TextRange>,
        options: CsvOptions,
        policy: ParsePolicy,
        table_schema: &SchemaRef,
        projection: &[usize],
        batch_size: usize,
    ) -> Result<Self> {
        use std::io::{BufRead, BufReader, Seek, SeekFrom};
        let (mut start, stop) = match range {
            None => (0, u64::MAX),
            Some(r) if r.end == u64::MAX => (r.start, u64::MAX),
            // No record starts in an empty range at the start of the file (a tiny file split
            // over more tasks than it has bytes); `end - 1` below would be the first record's.
            Some(r) if r.end == 0 => (0, 0),
            Some(r) => {
                // The last record of the range is the one that starts before `end`: it ends
                // at the first newline at or after `end - 1`.
                let mut stop_file = File::open(path).map_err(|e| io_error(path, e))?;
                stop_file.seek(SeekFrom::Start(r.end.saturating_sub(1))).map_err(|e| io_error(path, e))?;
                let mut line = Vec::new();
                let n = BufReader::new(stop_file).read_until(b'\n', &mut line).map_err(|e| io_error(path, e))?;
                (r.start, r.end.saturating_sub(1) + n as u64)
            }
        };
        if options.header && start == 0 {
            let mut line = Vec::new();
            let n = BufReader::new(&mut file).read_until(b'\n', &mut line).map_err(|e| io_error(path, e))?;
            start = n as u64;
        }
        file.seek(SeekFrom::Start(start)).map_err(|e| io_error(path, e))?;
        // Timestamps without a zone are read as text and converted by Weir (much faster).
        let text_timestamps = Arc::new(Schema::new(
            table_schema
                .fields()
                .iter()
                .map(|f| match f.data_type() {
                    DataType::Timestamp(_, None) => Arc::new(f.as_ref().clone().with_data_type(DataType::Utf8)),
                    _ => f.clone(),
                })
                .collect::<Vec<_>>(),
        ));
        let decoder = datafusion::arrow::csv::ReaderBuilder::new(text_timestamps)
            .with_header(false)
            .with_delimiter(options.delimiter)
            .with_quote(options.quote)
            .with_projection(projection.to_vec())
            .with_batch_size(batch_size)
            .build_decoder();
        Ok(Self {
            path: path.to_path_buf(),
            options,
            policy,
            table_schema: table_schema.clone(),
            projection: projection.to_vec(),
            batch_size,
            state: State::Fast(Box::new(Fast {
                splitter: super::csv_split::Splitter::new(
                    options.delimiter,
                    options.quote,
                    table_schema.fields().len(),
                    projection,
                    Arc::new(table_schema.project(projection)?),
                ),
                decoder,
                schema: Arc::new(table_schema.project(projection)?),
                file,
                buf: Vec::new(),
                pos: 0,
                buf_offset: start,
                stop,
                batch_start: start,
                eof: false,
            })),
        })
    }

    /// Continue by the careful path from the start of the batch that failed.
    fn switch_to_careful(&mut self, batch_start: u64, stop: u64) -> Result<()> {
        use std::io::{Seek, SeekFrom};
        let mut file = File::open(&self.path).map_err(|e| io_error(&self.path, e))?;
        file.seek(SeekFrom::Start(batch_start)).map_err(|e| io_error(&self.path, e))?;
        let range = TextRange { start: batch_start, end: stop };
        let options = CsvOptions { header: false, ..self.options };
        self.state = State::Careful(Box::new(RecordReader::new(
            file,
            &self.path,
            Some(range),
            options,
            self.policy,
            &self.table_schema,
            &self.projection,
            self.batch_size,
        )));
        Ok(())
    }
}

impl BatchReader for CsvReader {
    fn position(&self) -> u64 {
        match &self.state {
            State::Fast(f) => f.batch_start,
            State::Careful(c) => c.position(),
        }
    }

    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if let State::Fast(fast) = &mut self.state {
            match fast.next_batch(&self.path, self.batch_size)? {
                Ok(batch) => return Ok(batch),
                Err(()) => {
                    let (start, stop) = (fast.batch_start, fast.stop);
                    self.switch_to_careful(start, stop)?;
                }
            }
        }
        match &mut self.state {
            State::Careful(careful) => careful.next_batch(),
            State::Fast(_) => Err(WeirError::internal("CSV reader did not switch paths")),
        }
    }

    fn records_skipped(&self) -> u64 {
        match &self.state {
            State::Fast(_) => 0,
            State::Careful(c) => c.records_skipped(),
        }
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
        match super::timestamp_text::timestamps_as_text(batch)? {
            Some(text) => Ok(self.0.write(&text)?),
            None => Ok(self.0.write(batch)?),
        }
    }

    fn close(self: Box<Self>) -> Result<()> {
        let file = self.0.into_inner();
        file.sync_all().map_err(|e| WeirError::external(format!("fsync: {e}")))
    }
}

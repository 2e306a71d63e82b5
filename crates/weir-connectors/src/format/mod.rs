//! File formats: options, readers that turn a file into batches, writers that do the reverse.
//!
//! Malformed records follow one policy for every format (`ParsePolicy`): by default the job
//! fails naming the file, line and reason; with `'format.ignore-parse-errors' = 'true'` the
//! record is skipped and counted in the source's `records_skipped` metric.

pub mod avro;
mod avro_file;
mod csv;
mod csv_split;
#[cfg(test)]
mod csv_tests;
mod json;
mod parquet;
#[cfg(test)]
mod range_tests;
pub mod registry;
mod text;
mod timestamp_text;

use std::fs::File;
use std::path::Path;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use weir_core::{Result, TableDef, WeirError};

/// Which part of a file one source task reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Portion {
    Whole,
    /// The records that start in `[start, end)` (text formats; a record belongs to the range
    /// where it starts, so adjacent ranges read every record exactly once).
    Bytes {
        start: u64,
        end: u64,
    },
    /// Row groups `g` with `g % count == index` (Parquet).
    RowGroups {
        index: usize,
        count: usize,
    },
}

/// What to do with a record that does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParsePolicy {
    Fail,
    Skip,
}

#[derive(Debug, Clone)]
pub enum Format {
    Csv {
        delimiter: u8,
        quote: u8,
        header: bool,
        policy: ParsePolicy,
    },
    Json {
        policy: ParsePolicy,
    },
    Parquet {
        compression: ::parquet::basic::Compression,
        row_group_rows: usize,
    },
    /// Avro object container files; `codec` as `avro.codec` names it (checked).
    Avro {
        codec: String,
    },
}

const CSV_KEYS: &[&str] = &[
    "csv.field-delimiter",
    "csv.quote-character",
    "csv.header",
    "format.ignore-parse-errors",
    "csv.ignore-parse-errors",
];
const JSON_KEYS: &[&str] = &["format.ignore-parse-errors", "json.ignore-parse-errors"];
const PARQUET_KEYS: &[&str] = &["parquet.compression", "parquet.row-group-size"];
const AVRO_KEYS: &[&str] = &["avro.codec"];

impl Format {
    pub fn from_options(table: &TableDef) -> Result<Format> {
        let opts = &table.options;
        let name = &table.name;
        let policy = || -> Result<ParsePolicy> {
            let mut skip = opts.bool(name, "format.ignore-parse-errors", false)?;
            for alias in ["csv.ignore-parse-errors", "json.ignore-parse-errors"] {
                skip |= opts.bool(name, alias, false)?;
            }
            Ok(if skip { ParsePolicy::Skip } else { ParsePolicy::Fail })
        };
        let single_byte = |key: &str, default: u8| -> Result<u8> {
            match opts.get(key) {
                None => Ok(default),
                Some("\\t") => Ok(b'\t'),
                Some(v) if v.len() == 1 => Ok(v.as_bytes()[0]),
                Some(v) => Err(WeirError::user(format!(
                    "table '{name}': option '{key}' must be a single character, not '{v}'"
                ))
                .at(opts.location(key))),
            }
        };
        match opts.required(name, "format")? {
            "csv" => Ok(Format::Csv {
                delimiter: single_byte("csv.field-delimiter", b',')?,
                quote: single_byte("csv.quote-character", b'"')?,
                header: opts.bool(name, "csv.header", false)?,
                policy: policy()?,
            }),
            "json" => Ok(Format::Json { policy: policy()? }),
            "parquet" => {
                use ::parquet::basic::{BrotliLevel, Compression as C, GzipLevel, ZstdLevel};
                let compression = match opts.get("parquet.compression").map(|c| c.to_ascii_lowercase()).as_deref() {
                    None | Some("snappy") => C::SNAPPY,
                    Some("uncompressed") | Some("none") => C::UNCOMPRESSED,
                    Some("zstd") => C::ZSTD(ZstdLevel::default()),
                    Some("gzip") => C::GZIP(GzipLevel::default()),
                    Some("brotli") => C::BROTLI(BrotliLevel::default()),
                    Some("lz4_raw") | Some("lz4") => C::LZ4_RAW,
                    Some(c) => {
                        return Err(WeirError::user(format!(
                            "table '{name}': unknown parquet.compression '{c}' \
                             (uncompressed, snappy, zstd, gzip, brotli, lz4_raw)"
                        ))
                        .at(opts.location("parquet.compression")))
                    }
                };
                let row_group_rows = match opts.get("parquet.row-group-size") {
                    None => 1 << 20,
                    Some(v) => v.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
                        WeirError::user(format!(
                            "table '{name}': parquet.row-group-size must be a positive number of rows, not '{v}'"
                        ))
                        .at(opts.location("parquet.row-group-size"))
                    })?,
                };
                Ok(Format::Parquet { compression, row_group_rows })
            }
            "avro" => {
                avro::table_schema(name, &table.schema)?;
                // Flink writes snappy-compressed blocks unless told otherwise.
                let codec = opts.get("avro.codec").unwrap_or("snappy").to_string();
                avro_file::codec(&codec).map_err(|why| {
                    WeirError::user(format!("table '{name}': 'avro.codec' = {why}")).at(opts.location("avro.codec"))
                })?;
                Ok(Format::Avro { codec })
            }
            other => Err(WeirError::user(format!(
                "table '{name}': unknown format '{other}'; formats are: csv, json, parquet, avro"
            ))
            .at(opts.location("format"))),
        }
    }

    pub fn option_keys(&self) -> &'static [&'static str] {
        match self {
            Format::Csv { .. } => CSV_KEYS,
            Format::Json { .. } => JSON_KEYS,
            Format::Parquet { .. } => PARQUET_KEYS,
            Format::Avro { .. } => AVRO_KEYS,
        }
    }

    pub fn extension(&self) -> &'static str {
        match self {
            Format::Csv { .. } => "csv",
            Format::Json { .. } => "json",
            Format::Parquet { .. } => "parquet",
            Format::Avro { .. } => "avro",
        }
    }

    /// A reader of `path` producing batches of `schema` (the table's columns after projection;
    /// `file_columns` is how many columns a CSV record has).
    /// `resume`: continue at this position of the portion (what the reader's `position`
    /// said), instead of its start.
    pub fn reader(
        &self,
        path: &Path,
        portion: Portion,
        resume: Option<u64>,
        table_schema: &SchemaRef,
        projection: &[usize],
        batch_size: usize,
    ) -> Result<Box<dyn BatchReader>> {
        let mut file =
            File::open(path).map_err(|e| WeirError::external(format!("cannot open '{}': {e}", path.display())))?;
        let range = match (portion, resume) {
            // Resuming: the offset is a record start already.
            (Portion::Bytes { end, .. }, Some(at)) => Some(resume_range(&mut file, path, at, end)?),
            (_, Some(at)) if !matches!(self, Format::Parquet { .. } | Format::Avro { .. }) => {
                Some(resume_range(&mut file, path, at, u64::MAX)?)
            }
            (Portion::Bytes { start, end }, None) => Some(text_range(&mut file, path, start, end)?),
            _ => None,
        };
        Ok(match self {
            Format::Csv { delimiter, quote, header, policy } => Box::new(csv::CsvReader::new(
                file,
                path,
                range,
                csv::CsvOptions { delimiter: *delimiter, quote: *quote, header: *header },
                *policy,
                table_schema,
                projection,
                batch_size,
            )?),
            Format::Json { policy } => {
                Box::new(json::JsonReader::new(file, path, range, *policy, table_schema, projection, batch_size)?)
            }
            Format::Parquet { .. } => Box::new(parquet::ParquetReader::new(
                file,
                path,
                portion,
                resume,
                table_schema,
                projection,
                batch_size,
            )?),
            Format::Avro { .. } => {
                Box::new(avro_file::AvroFileReader::new(file, path, resume, table_schema, projection, batch_size)?)
            }
        })
    }

    pub fn writer(&self, file: File, schema: &SchemaRef) -> Result<Box<dyn BatchWriter>> {
        Ok(match self {
            Format::Csv { delimiter, header, .. } => Box::new(csv::csv_writer(file, *delimiter, *header)),
            Format::Json { .. } => Box::new(json::json_writer(file)),
            Format::Parquet { compression, row_group_rows } => {
                Box::new(parquet::ParquetFileWriter::new(file, schema, *compression, *row_group_rows)?)
            }
            Format::Avro { codec } => Box::new(avro_file::AvroFileWriter::new(
                file,
                "avro",
                schema,
                avro_file::codec(codec).map_err(WeirError::user)?,
            )?),
        })
    }
}

/// Reads one file, batch by batch. Blocking: the source calls it off the async threads.
pub trait BatchReader: Send {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>>;
    fn records_skipped(&self) -> u64;
    /// Where the next batch starts: a file offset (text), rows into the portion (Parquet).
    fn position(&self) -> u64;
}

/// Writes one file. `close` flushes and syncs it to disk.
pub trait BatchWriter: Send {
    fn write(&mut self, batch: &RecordBatch) -> Result<()>;
    fn close(self: Box<Self>) -> Result<()>;
}

/// A file's `batch` as rows of `schema`: its columns by name, in the schema's order and cast
/// to its types (`file` names the file in errors: "Parquet file '/x'").
pub(crate) fn by_name(batch: &RecordBatch, schema: &SchemaRef, file: &str) -> Result<RecordBatch> {
    use datafusion::arrow::record_batch::RecordBatchOptions;
    let mut columns = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let column = batch
            .column_by_name(field.name())
            .ok_or_else(|| WeirError::internal(format!("projected column '{}' missing", field.name())))?;
        columns.push(match column.data_type() == field.data_type() {
            true => column.clone(),
            false => datafusion::arrow::compute::cast(column, field.data_type()).map_err(|e| {
                WeirError::user(format!(
                    "{file}: column '{}' of type {} cannot be read as {}: {e}",
                    field.name(),
                    column.data_type(),
                    field.data_type()
                ))
            })?,
        });
    }
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(schema.clone(), columns, &options)?)
}

pub(crate) fn io_error(path: &Path, e: impl std::fmt::Display) -> WeirError {
    WeirError::external(format!("'{}': {e}", path.display()))
}

/// A byte range of a text file, adjusted to record boundaries: reading starts at the first
/// record that starts at or after `start` (the file is positioned there) and stops before
/// the first record that starts at or after `end`.
#[derive(Debug, Clone, Copy)]
pub struct TextRange {
    /// File offset where reading starts.
    pub start: u64,
    /// Records starting at or after this offset belong to the next range.
    pub end: u64,
}

fn text_range(file: &mut File, path: &Path, start: u64, end: u64) -> Result<TextRange> {
    use std::io::{BufRead, BufReader, Seek, SeekFrom};
    if start == 0 {
        return Ok(TextRange { start, end });
    }
    // The record containing byte `start - 1` belongs to the previous range: skip through the
    // end of its line. (Records are lines: quoted fields spanning lines cannot be split.)
    file.seek(SeekFrom::Start(start - 1)).map_err(|e| io_error(path, e))?;
    let mut reader = BufReader::new(&mut *file);
    let mut skipped = Vec::new();
    let n = reader.read_until(b'\n', &mut skipped).map_err(|e| io_error(path, e))?;
    let begin = start - 1 + n as u64;
    file.seek(SeekFrom::Start(begin)).map_err(|e| io_error(path, e))?;
    Ok(TextRange { start: begin, end })
}

/// Continue exactly at `at`, a record start recorded in a checkpoint.
fn resume_range(file: &mut File, path: &Path, at: u64, end: u64) -> Result<TextRange> {
    use std::io::{Seek, SeekFrom};
    file.seek(SeekFrom::Start(at)).map_err(|e| io_error(path, e))?;
    Ok(TextRange { start: at, end })
}

/// The line number of byte `offset` of a file: counted only when an error needs it.
pub(crate) fn line_of(path: &Path, offset: u64) -> u64 {
    use std::io::Read;
    let Ok(file) = File::open(path) else { return 0 };
    let mut lines = 1;
    let mut buf = vec![0u8; 1 << 16];
    let mut left = offset;
    let mut reader = file.take(offset);
    while left > 0 {
        match reader.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                lines += buf[..n].iter().filter(|b| **b == b'\n').count() as u64;
                left -= n as u64;
            }
        }
    }
    lines
}

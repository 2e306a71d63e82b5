//! File formats: options, readers that turn a file into batches, writers that do the reverse.
//!
//! Malformed records follow one policy for every format (`ParsePolicy`): by default the job
//! fails naming the file, line and reason; with `'format.ignore-parse-errors' = 'true'` the
//! record is skipped and counted in the source's `records_skipped` metric.

mod csv;
mod json;
mod parquet;
mod text;

use std::fs::File;
use std::path::Path;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use weir_core::{Result, TableDef, WeirError};

/// What to do with a record that does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParsePolicy {
    Fail,
    Skip,
}

#[derive(Debug, Clone)]
pub enum Format {
    Csv { delimiter: u8, quote: u8, header: bool, policy: ParsePolicy },
    Json { policy: ParsePolicy },
    Parquet { compression: ::parquet::basic::Compression },
}

const CSV_KEYS: &[&str] = &[
    "csv.field-delimiter",
    "csv.quote-character",
    "csv.header",
    "format.ignore-parse-errors",
    "csv.ignore-parse-errors",
];
const JSON_KEYS: &[&str] = &["format.ignore-parse-errors", "json.ignore-parse-errors"];
const PARQUET_KEYS: &[&str] = &["parquet.compression"];

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
                Some(v) if v == "\\t" => Ok(b'\t'),
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
                Ok(Format::Parquet { compression })
            }
            other => Err(WeirError::user(format!(
                "table '{name}': unknown format '{other}'; formats are: csv, json, parquet"
            ))
            .at(opts.location("format"))),
        }
    }

    pub fn option_keys(&self) -> &'static [&'static str] {
        match self {
            Format::Csv { .. } => CSV_KEYS,
            Format::Json { .. } => JSON_KEYS,
            Format::Parquet { .. } => PARQUET_KEYS,
        }
    }

    pub fn extension(&self) -> &'static str {
        match self {
            Format::Csv { .. } => "csv",
            Format::Json { .. } => "json",
            Format::Parquet { .. } => "parquet",
        }
    }

    /// A reader of `path` producing batches of `schema` (the table's columns after projection;
    /// `file_columns` is how many columns a CSV record has).
    pub fn reader(
        &self,
        path: &Path,
        table_schema: &SchemaRef,
        projection: &[usize],
        batch_size: usize,
    ) -> Result<Box<dyn BatchReader>> {
        let file = File::open(path).map_err(|e| {
            WeirError::external(format!("cannot open '{}': {e}", path.display()))
        })?;
        Ok(match self {
            Format::Csv { delimiter, quote, header, policy } => Box::new(csv::CsvReader::new(
                file,
                path,
                csv::CsvOptions { delimiter: *delimiter, quote: *quote, header: *header },
                *policy,
                table_schema,
                projection,
                batch_size,
            )),
            Format::Json { policy } => Box::new(json::JsonReader::new(
                file,
                path,
                *policy,
                table_schema,
                projection,
                batch_size,
            )?),
            Format::Parquet { .. } => {
                Box::new(parquet::ParquetReader::new(file, path, table_schema, projection, batch_size)?)
            }
        })
    }

    pub fn writer(&self, file: File, schema: &SchemaRef) -> Result<Box<dyn BatchWriter>> {
        Ok(match self {
            Format::Csv { delimiter, header, .. } => {
                Box::new(csv::csv_writer(file, *delimiter, *header))
            }
            Format::Json { .. } => Box::new(json::json_writer(file)),
            Format::Parquet { compression } => {
                Box::new(parquet::ParquetFileWriter::new(file, schema, *compression)?)
            }
        })
    }
}

/// Reads one file, batch by batch. Blocking: the source calls it off the async threads.
pub trait BatchReader: Send {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>>;
    fn records_skipped(&self) -> u64;
}

/// Writes one file. `close` flushes and syncs it to disk.
pub trait BatchWriter: Send {
    fn write(&mut self, batch: &RecordBatch) -> Result<()>;
    fn close(self: Box<Self>) -> Result<()>;
}

pub(crate) fn io_error(path: &Path, e: impl std::fmt::Display) -> WeirError {
    WeirError::external(format!("'{}': {e}", path.display()))
}

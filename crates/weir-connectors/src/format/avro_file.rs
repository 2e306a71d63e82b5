//! Avro object container files, Flink's `avro` format in the filesystem connector, through
//! arrow-avro: read with the writer schema each file's header carries, columns matched by
//! name and cast to the table's (a file of another schema version reads as long as it has the
//! columns); written with the schema Flink derives from the table, in blocks compressed by
//! `avro.codec`.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_avro::compression::CompressionCodec;
use arrow_avro::reader::{Reader, ReaderBuilder};
use arrow_avro::writer::format::AvroOcfFormat;
use arrow_avro::writer::{Writer, WriterBuilder};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use weir_core::{Result, WeirError};

use super::avro::{arrow_schema_of, conform, table_schema};
use super::{BatchReader, BatchWriter};

/// `avro.codec`: Flink's names; `None` writes blocks uncompressed (`null`).
pub fn codec(name: &str) -> std::result::Result<Option<CompressionCodec>, String> {
    Ok(match name.to_ascii_lowercase().as_str() {
        "null" => None,
        "snappy" => Some(CompressionCodec::Snappy),
        "deflate" => Some(CompressionCodec::Deflate),
        "zstandard" | "zstd" => Some(CompressionCodec::ZStandard),
        other => return Err(format!("'{other}' is not a codec Weir writes (null, snappy, deflate, zstandard)")),
    })
}

fn avro_file_error(path: &Path, e: impl std::fmt::Display) -> WeirError {
    WeirError::user(format!("cannot read Avro file '{}': {e}", path.display()))
}

pub struct AvroFileReader {
    reader: Reader<BufReader<File>>,
    /// Records of the file returned so far; on resume, those still to pass over first.
    records: u64,
    skip: u64,
    path: PathBuf,
    schema: SchemaRef,
}

impl AvroFileReader {
    /// `resume`: records of the file already read (what [`BatchReader::position`] said).
    pub fn new(
        file: File,
        path: &Path,
        resume: Option<u64>,
        table_schema: &SchemaRef,
        projection: &[usize],
        batch_size: usize,
    ) -> Result<Self> {
        let schema = Arc::new(table_schema.project(projection)?);
        let reader = ReaderBuilder::new()
            .with_batch_size(batch_size)
            .build(BufReader::new(file))
            .map_err(|e| avro_file_error(path, e))?;
        let file_schema = reader.schema();
        if let Some(missing) = schema.fields().iter().find(|f| file_schema.index_of(f.name()).is_err()) {
            return Err(WeirError::user(format!(
                "Avro file '{}' has no column '{}' (its schema has {})",
                path.display(),
                missing.name(),
                file_schema.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>().join(", ")
            )));
        }
        let skip = resume.unwrap_or(0);
        Ok(Self { reader, records: skip, skip, path: path.to_path_buf(), schema })
    }
}

impl BatchReader for AvroFileReader {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            let Some(batch) = self.reader.next() else { return Ok(None) };
            let mut batch = batch.map_err(|e| avro_file_error(&self.path, e))?;
            // Resuming: pass over the records read before the checkpoint.
            if self.skip > 0 {
                let n = (batch.num_rows() as u64).min(self.skip);
                self.skip -= n;
                batch = batch.slice(n as usize, batch.num_rows() - n as usize);
                if batch.num_rows() == 0 {
                    continue;
                }
            }
            self.records += batch.num_rows() as u64;
            return super::by_name(&batch, &self.schema, &format!("Avro file '{}'", self.path.display())).map(Some);
        }
    }

    fn records_skipped(&self) -> u64 {
        0
    }

    fn position(&self) -> u64 {
        self.records
    }
}

pub struct AvroFileWriter {
    writer: Writer<Advertise, AvroOcfFormat>,
    avro: String,
    arrow: SchemaRef,
}

impl AvroFileWriter {
    pub fn new(file: File, table: &str, schema: &SchemaRef, codec: Option<CompressionCodec>) -> Result<Self> {
        let avro = table_schema(table, schema)?;
        let arrow = arrow_schema_of(&avro)?;
        // The writer takes its schema from the first batch's shape: an empty one.
        let empty = conform(&avro, &arrow, &RecordBatch::new_empty(schema.clone()))?;
        let advertise = Advertise { file, schema: avro.clone(), header: Some(Vec::new()) };
        let writer = WriterBuilder::new(empty.schema().as_ref().clone())
            .with_compression(codec)
            .build::<_, AvroOcfFormat>(advertise)
            .map_err(|e| WeirError::external(format!("Avro writer: {e}")))?;
        Ok(Self { writer, avro, arrow })
    }
}

impl BatchWriter for AvroFileWriter {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let batch = conform(&self.avro, &self.arrow, batch)?;
        self.writer.write(&batch).map_err(|e| WeirError::external(format!("Avro write: {e}")))
    }

    fn close(self: Box<Self>) -> Result<()> {
        let mut writer = self.writer;
        writer.finish().map_err(|e| WeirError::external(format!("Avro close: {e}")))?;
        let advertise = writer.into_inner();
        if advertise.header.is_some() {
            return Err(WeirError::internal("an Avro file closed before its header was written"));
        }
        advertise.file.sync_all().map_err(|e| WeirError::external(format!("fsync: {e}")))
    }
}

/// The file under arrow-avro's container writer, whose header advertises a schema derived
/// again from the Arrow types (without the record names and logical types of the schema its
/// encoder writes by): the header's `avro.schema` is replaced by that schema, which readers
/// must decode the blocks with. Everything after the header passes through.
pub struct Advertise {
    file: File,
    schema: String,
    /// The header's bytes until they are complete; then `None`.
    header: Option<Vec<u8>>,
}

impl std::io::Write for Advertise {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let Some(header) = &mut self.header else { return self.file.write(buf) };
        header.extend_from_slice(buf);
        if let Some(rewritten) = with_schema(header, &self.schema)? {
            self.file.write_all(&rewritten)?;
            self.header = None;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// A container file's header (magic, metadata map, sync marker) with `avro.schema` set to
/// `schema`, and whatever followed it; `None` while the header is incomplete.
fn with_schema(header: &[u8], schema: &str) -> std::io::Result<Option<Vec<u8>>> {
    fn long(b: &[u8], at: &mut usize) -> Option<i64> {
        let (mut n, mut shift) = (0u64, 0);
        loop {
            let byte = *b.get(*at)?;
            *at += 1;
            n |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some((n >> 1) as i64 ^ -((n & 1) as i64));
            }
            shift += 7;
            if shift > 63 {
                return None;
            }
        }
    }
    // The writer of Iceberg's manifests encodes Avro longs too.
    use crate::iceberg::avro::long as put_long;
    fn string<'a>(b: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
        let n = usize::try_from(long(b, at)?).ok()?;
        let v = b.get(*at..*at + n)?;
        *at += n;
        Some(v)
    }
    if header.len() < 4 {
        return Ok(None);
    }
    if &header[..4] != b"Obj\x01" {
        return Err(std::io::Error::other("not an Avro container header"));
    }
    let mut at = 4;
    let mut entries: Vec<(&[u8], &[u8])> = Vec::new();
    loop {
        let Some(mut count) = long(header, &mut at) else { return Ok(None) };
        if count == 0 {
            break;
        }
        if count < 0 {
            count = -count;
            if long(header, &mut at).is_none() {
                return Ok(None);
            }
        }
        for _ in 0..count {
            let (Some(k), Some(v)) = (string(header, &mut at), string(header, &mut at)) else { return Ok(None) };
            entries.push((k, v));
        }
    }
    let Some(rest) = header.get(at..).filter(|r| r.len() >= 16) else { return Ok(None) };
    let mut out = b"Obj\x01".to_vec();
    put_long(&mut out, entries.len() as i64);
    for (k, v) in entries {
        let v = if k == b"avro.schema" { schema.as_bytes() } else { v };
        for part in [k, v] {
            put_long(&mut out, part.len() as i64);
            out.extend_from_slice(part);
        }
    }
    put_long(&mut out, 0);
    out.extend_from_slice(rest);
    Ok(Some(out))
}

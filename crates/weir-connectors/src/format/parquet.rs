//! Parquet files through the parquet crate's Arrow reader and writer. Columns are matched by
//! name and cast to the declared types; a missing column or an impossible cast is an error
//! naming the file and the column.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use weir_core::{Result, WeirError};

use super::{BatchReader, BatchWriter, Portion};

pub struct ParquetReader {
    reader: ParquetRecordBatchReader,
    /// Rows of the portion returned so far (including those skipped on resume).
    rows: u64,
    path: PathBuf,
    schema: SchemaRef,
}

fn parquet_error(path: &Path, e: impl std::fmt::Display) -> WeirError {
    WeirError::user(format!("cannot read Parquet file '{}': {e}", path.display()))
}

impl ParquetReader {
    pub fn new(
        file: File,
        path: &Path,
        portion: Portion,
        resume: Option<u64>,
        table_schema: &SchemaRef,
        projection: &[usize],
        batch_size: usize,
    ) -> Result<Self> {
        let schema = Arc::new(table_schema.project(projection)?);
        let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| parquet_error(path, e))?;
        let file_schema = builder.schema().clone();
        let mut roots = Vec::with_capacity(schema.fields().len());
        for field in schema.fields() {
            let index = file_schema.index_of(field.name()).map_err(|_| {
                WeirError::user(format!("Parquet file '{}' has no column '{}'", path.display(), field.name()))
            })?;
            roots.push(index);
        }
        let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
        let builder = match portion {
            Portion::RowGroups { index, count } => {
                let groups = (0..builder.metadata().num_row_groups()).filter(|g| g % count == index).collect();
                builder.with_row_groups(groups)
            }
            _ => builder,
        };
        let builder = match resume {
            Some(rows) => builder.with_offset(rows as usize),
            None => builder,
        };
        let reader =
            builder.with_projection(mask).with_batch_size(batch_size).build().map_err(|e| parquet_error(path, e))?;
        Ok(Self { reader, rows: resume.unwrap_or(0), path: path.to_path_buf(), schema })
    }
}

impl BatchReader for ParquetReader {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        let Some(batch) = self.reader.next() else { return Ok(None) };
        let batch = batch.map_err(|e| parquet_error(&self.path, e))?;
        self.rows += batch.num_rows() as u64;
        // The reader returns columns in file order; put them in table order and types.
        super::by_name(&batch, &self.schema, &format!("Parquet file '{}'", self.path.display())).map(Some)
    }

    fn records_skipped(&self) -> u64 {
        0
    }

    fn position(&self) -> u64 {
        self.rows
    }
}

pub struct ParquetFileWriter(ArrowWriter<File>);

impl ParquetFileWriter {
    pub fn new(file: File, schema: &SchemaRef, compression: Compression, row_group_rows: usize) -> Result<Self> {
        let props = WriterProperties::builder()
            .set_compression(compression)
            .set_max_row_group_row_count(Some(row_group_rows))
            .build();
        let writer = ArrowWriter::try_new(file, schema.clone(), Some(props))
            .map_err(|e| WeirError::external(format!("Parquet writer: {e}")))?;
        Ok(Self(writer))
    }
}

impl BatchWriter for ParquetFileWriter {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        self.0.write(batch).map_err(|e| WeirError::external(format!("Parquet write: {e}")))
    }

    fn close(self: Box<Self>) -> Result<()> {
        let file = self.0.into_inner().map_err(|e| WeirError::external(format!("Parquet close: {e}")))?;
        file.sync_all().map_err(|e| WeirError::external(format!("fsync: {e}")))
    }
}

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use weir_core::{Result, Source, TableDef, WeirError};

use super::is_hidden;
use crate::format::{BatchReader, Format};
use crate::DEFAULT_BATCH_SIZE;

pub struct FileSource {
    format: Format,
    table_schema: SchemaRef,
    projection: Vec<usize>,
    schema: SchemaRef,
    /// Files still to read, in reverse order so that `pop` takes the next one.
    pending: Vec<PathBuf>,
    /// The reader of the current file; moved into the blocking task while it reads.
    current: Option<Box<dyn BatchReader>>,
    skipped_in_done_files: u64,
    skipped_current: u64,
}

/// The files that make up a table: `path` itself, or the visible files of the directory.
fn list_files(table: &str, path: &Path) -> Result<Vec<PathBuf>> {
    let meta = std::fs::metadata(path).map_err(|e| {
        WeirError::user(format!("table '{table}': cannot read path '{}': {e}", path.display()))
    })?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    let entries = std::fs::read_dir(path)
        .map_err(|e| WeirError::external(format!("cannot list '{}': {e}", path.display())))?;
    for entry in entries {
        let entry = entry.map_err(|e| WeirError::external(format!("cannot list '{}': {e}", path.display())))?;
        let name = entry.file_name();
        if is_hidden(&name.to_string_lossy()) {
            continue;
        }
        let kind = entry.file_type().map_err(|e| WeirError::external(e.to_string()))?;
        if kind.is_file() {
            files.push(entry.path());
        } else if kind.is_dir() {
            files.extend(list_files(table, &entry.path())?);
        }
    }
    files.sort();
    Ok(files)
}

impl FileSource {
    pub fn new(table: &TableDef, projection: Option<Vec<usize>>) -> Result<Self> {
        let format = Format::from_options(table)?;
        let path = table.options.required(&table.name, "path")?;
        let mut pending = list_files(&table.name, Path::new(path))?;
        pending.reverse();
        let projection = projection.unwrap_or_else(|| (0..table.schema.fields().len()).collect());
        Ok(Self {
            format,
            table_schema: table.schema.clone(),
            schema: std::sync::Arc::new(table.schema.project(&projection)?),
            projection,
            pending,
            current: None,
            skipped_in_done_files: 0,
            skipped_current: 0,
        })
    }
}

#[async_trait]
impl Source for FileSource {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            let mut reader = match self.current.take() {
                Some(r) => r,
                None => {
                    let Some(path) = self.pending.pop() else { return Ok(None) };
                    self.skipped_in_done_files += self.skipped_current;
                    self.skipped_current = 0;
                    self.format.reader(&path, &self.table_schema, &self.projection, DEFAULT_BATCH_SIZE)?
                }
            };
            // File reads block; keep them off the async worker threads.
            let (reader, batch) = tokio::task::spawn_blocking(move || {
                let batch = reader.next_batch();
                (reader, batch)
            })
            .await
            .map_err(|e| WeirError::internal(format!("file reader task failed: {e}")))?;
            self.skipped_current = reader.records_skipped();
            if let Some(batch) = batch? {
                self.current = Some(reader);
                return Ok(Some(batch));
            }
        }
    }

    fn records_skipped(&self) -> u64 {
        self.skipped_in_done_files + self.skipped_current
    }
}

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use weir_core::{Chunk, Result, Sink, Split, TableDef, WeirError};

use crate::format::{BatchWriter, Format};

pub struct FileSink {
    table: String,
    dir: PathBuf,
    format: Format,
    schema: SchemaRef,
    /// Open in-progress file and its hidden path; created on the first row.
    open: Option<(Box<dyn BatchWriter>, PathBuf)>,
    file_name: String,
}

/// Distinguishes the files of sinks started in the same process at the same millisecond.
static SINK_COUNTER: AtomicU64 = AtomicU64::new(0);

impl FileSink {
    pub fn new(table: &TableDef, schema: SchemaRef, split: Split) -> Result<Self> {
        let format = Format::from_options(table)?;
        let dir = PathBuf::from(table.options.required(&table.name, "path")?);
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let n = SINK_COUNTER.fetch_add(1, Ordering::Relaxed);
        let file_name =
            format!("part-{millis}-{}-{n}-{}.{}", std::process::id(), split.index, format.extension());
        Ok(Self { table: table.name.clone(), dir, format, schema, open: None, file_name })
    }

    fn open_file(&mut self) -> Result<&mut Box<dyn BatchWriter>> {
        if self.open.is_none() {
            std::fs::create_dir_all(&self.dir).map_err(|e| {
                WeirError::external(format!(
                    "table '{}': cannot create directory '{}': {e}",
                    self.table,
                    self.dir.display()
                ))
            })?;
            let path = self.dir.join(format!(".{}.inprogress", self.file_name));
            let file = File::create(&path).map_err(|e| {
                WeirError::external(format!("cannot create '{}': {e}", path.display()))
            })?;
            self.open = Some((self.format.writer(file, &self.schema)?, path));
        }
        match &mut self.open {
            Some((writer, _)) => Ok(writer),
            None => Err(WeirError::internal("sink file not open")),
        }
    }
}

#[async_trait]
impl Sink for FileSink {
    async fn write_chunk(&mut self, chunk: Chunk) -> Result<()> {
        if !chunk.is_append_only() {
            return Err(WeirError::not_supported(format!(
                "writing updates or deletes to the filesystem table '{}'",
                self.table
            )));
        }
        if chunk.num_rows() == 0 {
            return Ok(());
        }
        self.open_file()?.write(&chunk.batch)
    }

    async fn finish(&mut self) -> Result<()> {
        let Some((writer, hidden)) = self.open.take() else { return Ok(()) };
        writer.close()?;
        let target = self.dir.join(&self.file_name);
        std::fs::rename(&hidden, &target).map_err(|e| {
            WeirError::external(format!("cannot publish '{}': {e}", target.display()))
        })
    }
}

impl Drop for FileSink {
    /// A job that stops without finishing (failure, cancellation) publishes nothing and leaves
    /// no in-progress file behind.
    fn drop(&mut self) {
        if let Some((_, hidden)) = self.open.take() {
            let _ = std::fs::remove_file(hidden);
        }
    }
}

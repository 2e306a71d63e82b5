//! The filesystem sink. Rows go to a hidden in-progress file. Without checkpoints, the file
//! is published (renamed into place) when the job finishes. With checkpoints it is a
//! two-phase commit: at barrier `n` the file is closed, synced and renamed to a hidden
//! pending name `.part-<task>-<n>.<ext>.pending`, which goes into checkpoint `n`; when `n`
//! completes, pending files are renamed to `part-<task>-<n>.<ext>`. Names depend only on
//! the task and the checkpoint, so a restart that publishes again writes the same names
//! with the same rows: publishing is idempotent.

use std::fs::File;
use std::path::{Path, PathBuf};
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
    task: usize,
    /// Open in-progress file and its hidden path; created on the first row.
    open: Option<(Box<dyn BatchWriter>, PathBuf)>,
    /// Checkpointed: names are per checkpoint; `epoch` is the one the open file belongs to.
    transactional: bool,
    epoch: u64,
    /// Pre-committed files not published yet: (epoch, pending name).
    pending: Vec<(u64, String)>,
}

/// Distinguishes the in-progress files of sinks started in the same process.
static SINK_COUNTER: AtomicU64 = AtomicU64::new(0);

fn io(what: &str, path: &Path, e: std::io::Error) -> WeirError {
    WeirError::external(format!("cannot {what} '{}': {e}", path.display()))
}

impl FileSink {
    pub fn new(table: &TableDef, schema: SchemaRef, split: Split) -> Result<Self> {
        let format = Format::from_options(table)?;
        let dir = PathBuf::from(table.options.required(&table.name, "path")?);
        Ok(Self {
            table: table.name.clone(),
            dir,
            format,
            schema,
            task: split.index,
            open: None,
            transactional: false,
            epoch: 1,
            pending: Vec::new(),
        })
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
            let unique = format!(
                "{}-{}-{}",
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0),
                std::process::id(),
                SINK_COUNTER.fetch_add(1, Ordering::Relaxed)
            );
            let path = self.dir.join(format!(".part-{}-inprogress-{unique}.{}", self.task, self.format.extension()));
            let file = File::create(&path).map_err(|e| io("create", &path, e))?;
            self.open = Some((self.format.writer(file, &self.schema)?, path));
        }
        match &mut self.open {
            Some((writer, _)) => Ok(writer),
            None => Err(WeirError::internal("sink file not open")),
        }
    }

    fn visible_name(&self, epoch: u64) -> String {
        format!("part-{}-{epoch:08}.{}", self.task, self.format.extension())
    }

    fn pending_name(&self, epoch: u64) -> String {
        format!(".{}.pending", self.visible_name(epoch))
    }

    /// Close the open file, synced, under `name` (hidden or not).
    fn close_as(&mut self, name: &str) -> Result<bool> {
        let Some((writer, hidden)) = self.open.take() else { return Ok(false) };
        writer.close()?;
        let target = self.dir.join(name);
        std::fs::rename(&hidden, &target).map_err(|e| io("rename", &hidden, e))?;
        Ok(true)
    }

    /// Publish a pending file; done already if the pending file is gone.
    fn publish(&self, epoch: u64) -> Result<()> {
        let from = self.dir.join(self.pending_name(epoch));
        let to = self.dir.join(self.visible_name(epoch));
        match std::fs::rename(&from, &to) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("publish", &from, e)),
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

    async fn pre_commit(&mut self, epoch: u64) -> Result<Option<Vec<u8>>> {
        self.transactional = true;
        let name = self.pending_name(epoch);
        if self.close_as(&name)? {
            self.pending.push((epoch, name));
        }
        self.epoch = epoch + 1;
        let epochs: Vec<u64> = self.pending.iter().map(|(e, _)| *e).collect();
        Ok(Some(serde_json::json!({ "pending": epochs }).to_string().into_bytes()))
    }

    async fn commit(&mut self, epoch: u64) -> Result<()> {
        let due: Vec<u64> = self.pending.iter().filter(|(e, _)| *e <= epoch).map(|(e, _)| *e).collect();
        for e in &due {
            self.publish(*e)?;
        }
        self.pending.retain(|(e, _)| *e > epoch);
        Ok(())
    }

    async fn restore(&mut self, epoch: u64, state: Option<&[u8]>) -> Result<()> {
        self.transactional = true;
        self.epoch = epoch + 1;
        // Publish what checkpoint `epoch` pre-committed…
        if let Some(state) = state {
            let value: serde_json::Value = serde_json::from_slice(state)
                .map_err(|_| WeirError::internal("a file sink state in a checkpoint is damaged"))?;
            for e in value["pending"].as_array().into_iter().flatten().filter_map(|e| e.as_u64()) {
                if e <= epoch {
                    self.publish(e)?;
                }
            }
        }
        // …and remove every hidden file this task left after it.
        let prefix = format!(".part-{}-", self.task);
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for entry in entries.flatten() {
                if entry.file_name().to_string_lossy().starts_with(&prefix) {
                    let path = entry.path();
                    std::fs::remove_file(&path).map_err(|e| io("remove", &path, e))?;
                }
            }
        }
        Ok(())
    }

    async fn finish(&mut self) -> Result<()> {
        if self.transactional {
            // The rows after the last checkpoint: the same name a replay would give them.
            let name = self.visible_name(self.epoch);
            self.close_as(&name)?;
            let pending: Vec<u64> = self.pending.iter().map(|(e, _)| *e).collect();
            for e in pending {
                self.publish(e)?;
            }
            self.pending.clear();
        } else {
            let unique = format!(
                "part-{}-{}-{}-{}.{}",
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0),
                std::process::id(),
                SINK_COUNTER.fetch_add(1, Ordering::Relaxed),
                self.task,
                self.format.extension()
            );
            self.close_as(&unique)?;
        }
        Ok(())
    }
}

impl Drop for FileSink {
    /// A job that stops without finishing (failure, cancellation) leaves no in-progress file.
    fn drop(&mut self) {
        if let Some((_, hidden)) = self.open.take() {
            let _ = std::fs::remove_file(hidden);
        }
    }
}

//! The filesystem sink: a table directory of CSV, JSON, Parquet or Avro files, optionally
//! partitioned into Hive-style directories (`PARTITIONED BY (col)` -> `col=value/`), that
//! Spark, DuckDB, pyarrow and DataFusion read as is.
//!
//! Rows go to hidden in-progress files (`.part-<task>-inprogress-….<ext>`), one per partition
//! directory, rolled by size (`'sink.rolling-policy.file-size'`) and age
//! (`'sink.rolling-policy.rollover-interval'`). Without checkpoints, files are published
//! (renamed into place) when they roll and when the job finishes. With checkpoints it is a
//! two-phase commit: at barrier `n` every open file is closed, synced and renamed to a hidden
//! pending name (`.part-<task>-<n>-<seq>.<ext>.pending`); the checkpoint records the pending
//! files; when `n` completes they are renamed to `part-<task>-<n>-<seq>.<ext>` and a commit
//! record `_weir_log/<task>-<n>.json` is written. A restart from checkpoint `n` publishes what
//! `n` recorded (renames are idempotent: a file already published stays as it is), then
//! deletes every hidden file this task left and every file it published for a later
//! checkpoint (possible only when a damaged checkpoint made the restart go back further):
//! the replay writes those rows again.
//!
//! With `'sink.partition-commit.policy.kind'` = `'success-file'`, a complete partition gets a
//! `_SUCCESS` file ([`super::commit`]).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, UInt32Array};
use datafusion::arrow::compute::take_record_batch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::logical_expr::EmitTo;
use datafusion::physical_plan::aggregates::group_values::new_group_values;
use datafusion::physical_plan::aggregates::order::GroupOrdering;
use serde::{Deserialize, Serialize};
use weir_core::two_phase::{Committer, Earlier};
use weir_core::{parse_duration, Chunk, Result, Split, TableDef, WeirError};

use super::commit::{mark, PartitionCommit};
use super::partition;
use crate::format::{BatchWriter, Format};

/// What checkpoint `n` leaves to publish: its files (pending names, relative), and the
/// watermark at its barrier, which completes partitions once they are published.
#[derive(Serialize, Deserialize)]
pub struct PreCommit {
    files: Vec<String>,
    watermark: i64,
}

/// Partitions written but not yet complete at the checkpoint.
#[derive(Serialize, Deserialize, Default)]
pub struct Recovery {
    uncommitted_partitions: Vec<String>,
}

/// The directory of commit records, skipped by readers (leading `_`).
pub const LOG_DIR: &str = "_weir_log";
const DEFAULT_ROLL_BYTES: u64 = 128 << 20;

struct OpenFile {
    writer: Box<dyn BatchWriter>,
    /// Hidden in-progress path, relative to the table directory.
    hidden: String,
    opened: Instant,
}

pub struct FileSink {
    table: String,
    dir: PathBuf,
    format: Format,
    /// What the files hold: the table's columns but the partition columns.
    file_schema: SchemaRef,
    file_columns: Vec<usize>,
    partition_columns: Vec<(String, usize)>,
    partition_schema: SchemaRef,
    task: usize,
    roll_bytes: u64,
    roll_interval: Option<Duration>,
    /// Open in-progress files by partition directory (`""` unpartitioned).
    open: BTreeMap<String, OpenFile>,
    /// Checkpointed: names carry the checkpoint `epoch` the rows belong to.
    transactional: bool,
    epoch: u64,
    /// Files of `epoch` closed so far (pending names, relative).
    closed: Vec<String>,
    /// Sequence number of the next file of `epoch`.
    seq: u64,
    /// Partition commit, if the table has one, and the watermark.
    commit: Option<PartitionCommit>,
    watermark: i64,
    /// Without checkpoints: names unique to this run (`run<ms>x<pid>x<n>`), so that another
    /// run into the same directory adds files instead of replacing them.
    run: String,
}

/// Distinguishes the in-progress files of sinks started in the same process.
static SINK_COUNTER: AtomicU64 = AtomicU64::new(0);

fn io(what: &str, path: &Path, e: std::io::Error) -> WeirError {
    WeirError::external(format!("cannot {what} '{}': {e}", path.display()))
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// `.a/b/.name.pending` -> `a/b/name`.
fn visible_of(pending: &str) -> String {
    let (dir, name) = pending.rsplit_once('/').map_or(("", pending), |(d, n)| (d, n));
    let name = name.trim_start_matches('.').trim_end_matches(".pending");
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

impl FileSink {
    pub fn new(table: &TableDef, _schema: SchemaRef, split: Split) -> Result<Self> {
        if let Some(column) = table.metadata.keys().next() {
            return Err(WeirError::not_supported(format!(
                "writing into filesystem table '{}': its metadata column '{column}' is read-only",
                table.name
            )));
        }
        let format = Format::from_options(table)?;
        let dir = super::local_path(table)?;
        let schema = &table.schema;
        let partition_columns =
            table.partition_keys.iter().map(|k| Ok((k.clone(), schema.index_of(k)?))).collect::<Result<Vec<_>>>()?;
        let file_columns: Vec<usize> =
            (0..schema.fields().len()).filter(|i| !partition_columns.iter().any(|(_, p)| p == i)).collect();
        if file_columns.is_empty() {
            return Err(WeirError::user(format!("table '{}': every column is a partition column", table.name)));
        }
        let (roll_bytes, roll_interval) = rolling_policy(table)?;
        Ok(Self {
            table: table.name.clone(),
            dir,
            format,
            file_schema: std::sync::Arc::new(schema.project(&file_columns)?),
            file_columns,
            partition_schema: std::sync::Arc::new(
                schema.project(&partition_columns.iter().map(|(_, i)| *i).collect::<Vec<_>>())?,
            ),
            partition_columns,
            task: split.index,
            roll_bytes,
            roll_interval,
            open: BTreeMap::new(),
            transactional: false,
            epoch: 1,
            closed: Vec::new(),
            seq: 0,
            commit: PartitionCommit::from_table(table)?,
            watermark: i64::MIN,
            run: format!(
                "run{}x{}x{}",
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0),
                std::process::id(),
                SINK_COUNTER.fetch_add(1, Ordering::Relaxed)
            ),
        })
    }

    fn join(&self, relative: &str) -> PathBuf {
        if relative.is_empty() {
            self.dir.clone()
        } else {
            self.dir.join(relative)
        }
    }

    fn open_file(&mut self, partition: &str) -> Result<&mut OpenFile> {
        if !self.open.contains_key(partition) {
            let dir = self.join(partition);
            std::fs::create_dir_all(&dir).map_err(|e| {
                WeirError::external(format!("table '{}': cannot create directory '{}': {e}", self.table, dir.display()))
            })?;
            let unique = format!(
                "{}-{}-{}",
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0),
                std::process::id(),
                SINK_COUNTER.fetch_add(1, Ordering::Relaxed)
            );
            let name = format!(".part-{}-inprogress-{unique}.{}", self.task, self.format.extension());
            let hidden = if partition.is_empty() { name.clone() } else { format!("{partition}/{name}") };
            let path = self.dir.join(&hidden);
            let file = File::create(&path).map_err(|e| io("create", &path, e))?;
            let writer = self.format.writer(file, &self.file_schema)?;
            self.open.insert(partition.to_string(), OpenFile { writer, hidden, opened: Instant::now() });
        }
        self.open.get_mut(partition).ok_or_else(|| WeirError::internal("sink file not open"))
    }

    /// Close an open file, synced, under its next name: pending (checkpointed) or published.
    fn roll(&mut self, partition: &str) -> Result<()> {
        let Some(file) = self.open.remove(partition) else { return Ok(()) };
        file.writer.close()?;
        let name = match self.transactional {
            true => format!("part-{}-{:08}-{:04}.{}", self.task, self.epoch, self.seq, self.format.extension()),
            false => format!("part-{}-{}-{:04}.{}", self.task, self.run, self.seq, self.format.extension()),
        };
        self.seq += 1;
        let hidden_name = if self.transactional { format!(".{name}.pending") } else { name.clone() };
        let target = if partition.is_empty() { hidden_name } else { format!("{partition}/{hidden_name}") };
        let from = self.dir.join(&file.hidden);
        std::fs::rename(&from, self.dir.join(&target)).map_err(|e| io("rename", &from, e))?;
        sync_dir(&self.join(partition));
        if self.transactional {
            self.closed.push(target);
        }
        Ok(())
    }

    fn roll_all(&mut self) -> Result<()> {
        let partitions: Vec<String> = self.open.keys().cloned().collect();
        for p in partitions {
            self.roll(&p)?;
        }
        Ok(())
    }

    /// Publish checkpoint `epoch`'s files, then its commit record. Idempotent.
    fn publish(&self, epoch: u64, files: &[String]) -> Result<()> {
        let mut dirs = std::collections::BTreeSet::new();
        for pending in files {
            let visible = visible_of(pending);
            let (from, to) = (self.dir.join(pending), self.dir.join(&visible));
            match std::fs::rename(&from, &to) {
                Ok(()) => {}
                // Published before (a restart after a partial publish).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && to.exists() => {}
                Err(e) => return Err(io("publish", &from, e)),
            }
            dirs.insert(to.parent().map(Path::to_path_buf).unwrap_or_default());
        }
        for d in dirs {
            sync_dir(&d);
        }
        let log = self.dir.join(LOG_DIR);
        std::fs::create_dir_all(&log).map_err(|e| io("create", &log, e))?;
        let record = log.join(format!("{}-{epoch:08}.json", self.task));
        let tmp = log.join(format!(".{}-{epoch:08}.json.tmp", self.task));
        let body = serde_json::json!({ "task": self.task, "checkpoint": epoch, "files": files.iter().map(|f| visible_of(f)).collect::<Vec<_>>() });
        std::fs::write(&tmp, body.to_string()).map_err(|e| io("write", &tmp, e))?;
        File::open(&tmp).and_then(|f| f.sync_all()).map_err(|e| io("sync", &tmp, e))?;
        std::fs::rename(&tmp, &record).map_err(|e| io("rename", &tmp, e))?;
        sync_dir(&log);
        Ok(())
    }

    /// Mark the partitions complete at `watermark` (all of them at the end).
    fn mark_due(&mut self, watermark: Option<i64>) -> Result<()> {
        let Some(commit) = &mut self.commit else { return Ok(()) };
        let due = match watermark {
            Some(w) => commit.take_due(w)?,
            None => commit.take_all(),
        };
        for dir in due {
            if !self.transactional {
                // Its rows first: the open file of the partition is published now.
                self.roll(&dir)?;
            }
            mark(&self.join(&dir))?;
        }
        Ok(())
    }

    /// Hidden files of this task, and files it published for checkpoints after `epoch`
    /// (with their commit records), anywhere under the table directory.
    fn clean_after(&self, epoch: u64) -> Result<()> {
        self.clean_after_of(self.task, epoch)
    }

    /// Remove what task `task` (of this run or an earlier one) left after checkpoint `epoch`.
    fn clean_after_of(&self, task: usize, epoch: u64) -> Result<()> {
        let hidden_prefix = format!(".part-{task}-");
        let visible_prefix = format!("part-{task}-");
        let later = |name: &str| -> bool {
            name.strip_prefix(&visible_prefix)
                .and_then(|rest| rest.split('-').next())
                .and_then(|e| e.parse::<u64>().ok())
                .is_some_and(|e| e > epoch)
        };
        let mut stack = vec![self.dir.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().to_string();
                let path = entry.path();
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    if name == LOG_DIR {
                        for record in std::fs::read_dir(&path).into_iter().flatten().flatten() {
                            let r = record.file_name().to_string_lossy().to_string();
                            let stale = r
                                .strip_prefix(&format!("{task}-"))
                                .and_then(|rest| rest.trim_end_matches(".json").parse::<u64>().ok())
                                .is_some_and(|e| e > epoch)
                                || r.starts_with(&format!(".{task}-"));
                            if stale {
                                let _ = std::fs::remove_file(record.path());
                            }
                        }
                    } else {
                        stack.push(path);
                    }
                } else if name.starts_with(&hidden_prefix) || later(&name) {
                    std::fs::remove_file(&path).map_err(|e| io("remove", &path, e))?;
                }
            }
        }
        Ok(())
    }
}

/// `'sink.rolling-policy.file-size'` and `'sink.rolling-policy.rollover-interval'`, checked
/// when the table is created.
pub fn rolling_policy(table: &TableDef) -> Result<(u64, Option<Duration>)> {
    let roll_bytes = match table.options.get("sink.rolling-policy.file-size") {
        None => DEFAULT_ROLL_BYTES,
        Some(v) => parse_size(v).ok_or_else(|| {
            WeirError::user(format!(
                "table '{}': 'sink.rolling-policy.file-size' must be a size like '128MB', not '{v}'",
                table.name
            ))
            .at(table.options.location("sink.rolling-policy.file-size"))
        })?,
    };
    let roll_interval = match table.options.get("sink.rolling-policy.rollover-interval") {
        None => None,
        Some(v) => Some(parse_duration(v).map_err(|e| {
            e.context(format!("table '{}': 'sink.rolling-policy.rollover-interval'", table.name))
                .at(table.options.location("sink.rolling-policy.rollover-interval"))
        })?),
    };
    Ok((roll_bytes, roll_interval))
}

/// `128MB`, `1GB`, `512kb`, `1000` (bytes).
fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim().to_ascii_lowercase();
    let digits: String = t.chars().take_while(|c| c.is_ascii_digit()).collect();
    let n: u64 = digits.parse().ok()?;
    let unit = t[digits.len()..].trim();
    let factor = match unit {
        "" | "b" => 1,
        "kb" | "k" => 1 << 10,
        "mb" | "m" => 1 << 20,
        "gb" | "g" => 1 << 30,
        _ => return None,
    };
    (n > 0).then_some(n * factor)
}

#[async_trait]
impl Committer for FileSink {
    type PreCommit = PreCommit;
    type Recovery = Recovery;
    const KIND: &'static str = "file";
    const VERSION: u32 = 1;

    fn describe(&self) -> String {
        format!("the filesystem sink of table '{}' (task {})", self.table, self.task)
    }

    async fn write(&mut self, chunk: Chunk) -> Result<()> {
        if !chunk.is_append_only() {
            return Err(WeirError::not_supported(format!(
                "writing updates or deletes to the filesystem table '{}'",
                self.table
            )));
        }
        if chunk.num_rows() == 0 {
            return Ok(());
        }
        let batch = &chunk.batch;
        // Rows by partition: the key columns interned a batch at a time, a directory name
        // formatted once per distinct key.
        let parts: Vec<(String, Option<UInt32Array>)> = if self.partition_columns.is_empty() {
            vec![(String::new(), None)]
        } else {
            let keys: Vec<ArrayRef> = self.partition_columns.iter().map(|(_, i)| batch.column(*i).clone()).collect();
            let mut values = new_group_values(self.partition_schema.clone(), &GroupOrdering::None)?;
            let mut groups = Vec::with_capacity(batch.num_rows());
            values.intern(&keys, &mut groups)?;
            let distinct = values.emit(EmitTo::All)?;
            let named: Vec<(&str, &ArrayRef)> =
                self.partition_columns.iter().zip(&distinct).map(|((name, _), c)| (name.as_str(), c)).collect();
            let dirs = partition::directories(&named)?;
            if dirs.len() == 1 {
                vec![(dirs[0].clone(), None)]
            } else {
                let mut rows: Vec<Vec<u32>> = vec![Vec::new(); dirs.len()];
                for (i, g) in groups.iter().enumerate() {
                    rows[*g].push(i as u32);
                }
                dirs.into_iter().zip(rows).map(|(d, r)| (d, Some(UInt32Array::from(r)))).collect()
            }
        };
        let file_batch = batch.project(&self.file_columns)?;
        for (partition, rows) in parts {
            if let Some(commit) = &mut self.commit {
                commit.written(&partition);
            }
            let part = match &rows {
                None => file_batch.clone(),
                Some(rows) => take_record_batch(&file_batch, rows)?,
            };
            let (roll_bytes, roll_interval) = (self.roll_bytes, self.roll_interval);
            let dir = self.dir.clone();
            let file = self.open_file(&partition)?;
            file.writer.write(&part)?;
            let size = std::fs::metadata(dir.join(&file.hidden)).map(|m| m.len()).unwrap_or(0);
            if size >= roll_bytes || roll_interval.is_some_and(|i| file.opened.elapsed() >= i) {
                self.roll(&partition)?;
            }
        }
        Ok(())
    }

    async fn on_watermark(&mut self, watermark: weir_core::Watermark) -> Result<()> {
        self.watermark = self.watermark.max(watermark.0);
        // With checkpoints, partitions are marked when their rows are published (commit).
        if !self.transactional {
            self.mark_due(Some(self.watermark))?;
        }
        Ok(())
    }

    async fn pre_commit(&mut self, epoch: u64) -> Result<Option<PreCommit>> {
        self.transactional = true;
        self.roll_all()?;
        let files = std::mem::take(&mut self.closed);
        self.epoch = epoch + 1;
        self.seq = 0;
        // Even without files: the barrier's watermark completes partitions when it commits.
        Ok(Some(PreCommit { files, watermark: self.watermark }))
    }

    fn recovery(&self) -> Recovery {
        Recovery { uncommitted_partitions: self.commit.as_ref().map(|c| c.open()).unwrap_or_default() }
    }

    async fn commit(&mut self, epoch: u64, pre_commit: &PreCommit) -> Result<()> {
        if !pre_commit.files.is_empty() {
            self.publish(epoch, &pre_commit.files)?;
        }
        // Every row before the barrier's watermark is published now.
        self.mark_due(Some(pre_commit.watermark))
    }

    /// Every earlier task's pre-commits are published by the one task they fall to, which
    /// also removes what that task left after the checkpoint (and what this task left, if an
    /// earlier run had a task of its index).
    async fn recover(&mut self, epoch: u64, earlier: Vec<Earlier<PreCommit, Recovery>>) -> Result<()> {
        self.transactional = true;
        self.epoch = epoch + 1;
        self.seq = 0;
        for old in earlier {
            if let Some(commit) = &mut self.commit {
                commit.restore(old.recovery.uncommitted_partitions.into_iter());
            }
            for (e, pre_commit) in &old.pre_commits {
                if !pre_commit.files.is_empty() {
                    self.publish(*e, &pre_commit.files)?;
                }
            }
            self.clean_after_of(old.task, epoch)?;
        }
        self.clean_after(epoch)
    }

    async fn finish(&mut self) -> Result<()> {
        if self.transactional {
            // The final checkpoint has committed everything (`pre_commit_final`).
            return Ok(());
        }
        self.roll_all()?;
        self.mark_due(None)
    }
}

impl Drop for FileSink {
    /// A job that stops without finishing (failure, cancellation) leaves no in-progress file.
    fn drop(&mut self) {
        for file in self.open.values() {
            let _ = std::fs::remove_file(self.dir.join(&file.hidden));
        }
    }
}

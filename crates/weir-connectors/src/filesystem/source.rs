use std::path::{Path, PathBuf};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use weir_core::{Result, Source, Split, TableDef, WeirError};

use super::is_hidden;
use crate::format::{BatchReader, Format, Portion};
use crate::DEFAULT_BATCH_SIZE;

pub struct FileSource {
    format: Format,
    table_schema: SchemaRef,
    projection: Vec<usize>,
    schema: SchemaRef,
    /// This task's parts of the files, in reading order.
    parts: Vec<(PathBuf, Portion)>,
    /// The part to open next, and where in it to start (after a restore).
    next_part: usize,
    resume_at: Option<u64>,
    /// The reader of the current part and its index; the reader moves into the blocking
    /// task while it reads.
    current: Option<(usize, Box<dyn BatchReader>)>,
    skipped_in_done_files: u64,
    skipped_current: u64,
    /// A partitioned table (`PARTITIONED BY`) or one with metadata columns: how output
    /// columns come from the files, from the `col=value` directories and from each file.
    derived: Option<Derived>,
    split: Split,
    /// Replaying ([`Source::replay_to`]): `parts` are cut at the replay's bound; these are
    /// all of them, put back when it ends.
    replaying: Option<Vec<(PathBuf, Portion)>>,
}

struct Derived {
    root: PathBuf,
    keys: Vec<String>,
    columns: Vec<Derive>,
}

/// Where an output column comes from.
enum Derive {
    /// Column `i` of what the reader returns.
    File(usize),
    /// Partition key `k` of the file's directories.
    Partition(usize),
    /// The file's metadata.
    Metadata(FileMetadata),
}

/// The metadata a filesystem column can hold (`METADATA FROM 'file.path'`), as Flink's.
#[derive(Debug, Clone, Copy)]
enum FileMetadata {
    Path,
    Name,
    Size,
}

const METADATA_KEYS: &str = "file.path, file.name, file.size";

fn file_metadata(table: &TableDef, key: &str) -> Result<FileMetadata> {
    match key {
        "file.path" => Ok(FileMetadata::Path),
        "file.name" => Ok(FileMetadata::Name),
        "file.size" => Ok(FileMetadata::Size),
        other => Err(WeirError::user(format!(
            "table '{}': the filesystem connector has no metadata '{other}'; metadata keys are: {METADATA_KEYS}",
            table.name
        ))),
    }
}

/// Check a filesystem table's metadata columns: known keys, declared with their types.
pub fn validate_metadata(table: &TableDef) -> Result<()> {
    for (column, key) in &table.metadata {
        let declared = table.schema.field_with_name(column)?.data_type();
        let fits = match file_metadata(table, key)? {
            FileMetadata::Path | FileMetadata::Name => *declared == datafusion::arrow::datatypes::DataType::Utf8,
            FileMetadata::Size => declared.is_integer(),
        };
        if !fits {
            let wanted = if key == "file.size" { "BIGINT" } else { "STRING" };
            return Err(WeirError::user(format!(
                "table '{}': metadata column '{column}' ('{key}') is {wanted}, not {declared}",
                table.name
            )));
        }
    }
    Ok(())
}

/// The files that make up a table: `path` itself, or the visible files of the directory.
fn list_files(table: &str, path: &Path) -> Result<Vec<PathBuf>> {
    let meta = std::fs::metadata(path)
        .map_err(|e| WeirError::user(format!("table '{table}': cannot read path '{}': {e}", path.display())))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    let entries =
        std::fs::read_dir(path).map_err(|e| WeirError::external(format!("cannot list '{}': {e}", path.display())))?;
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

/// Text files at least this large are split by byte range between the source tasks; smaller
/// ones are read whole, by one task each.
const MIN_SPLIT_BYTES: u64 = 1 << 20;

/// What task `split` reads of each file: every task reads a byte range of a large text file,
/// or some row groups of each Parquet file; a small text file, or an Avro file, is read by one
/// task.
fn assign(format: &Format, files: Vec<PathBuf>, split: Split) -> Result<Vec<(PathBuf, Portion)>> {
    if split.count == 1 {
        return Ok(files.into_iter().map(|f| (f, Portion::Whole)).collect());
    }
    let mut parts = Vec::new();
    for (f, path) in files.into_iter().enumerate() {
        if matches!(format, Format::Parquet { .. }) {
            // Rotating by the file's index spreads files with few row groups over the tasks.
            let index = (split.index + split.count - f % split.count) % split.count;
            parts.push((path, Portion::RowGroups { index, count: split.count }));
            continue;
        }
        // An Avro file is read whole, by one task (splitting at its sync markers is not built).
        let size = match format {
            Format::Avro { .. } => 0,
            _ => std::fs::metadata(&path)
                .map_err(|e| WeirError::external(format!("cannot read '{}': {e}", path.display())))?
                .len(),
        };
        if size >= MIN_SPLIT_BYTES {
            let (i, n) = (split.index as u64, split.count as u64);
            parts.push((path, Portion::Bytes { start: size * i / n, end: size * (i + 1) / n }));
        } else if f % split.count == split.index {
            parts.push((path, Portion::Whole));
        }
    }
    Ok(parts)
}

impl FileSource {
    pub fn new(table: &TableDef, projection: Option<Vec<usize>>, split: Split) -> Result<Self> {
        let format = Format::from_options(table)?;
        let path = super::local_path(table)?;
        let files = list_files(&table.name, &path)?;
        let parts = assign(&format, files, split)?;
        let projection = projection.unwrap_or_else(|| (0..table.schema.fields().len()).collect());
        let schema = std::sync::Arc::new(table.schema.project(&projection)?);
        // Partition and metadata columns are not in the files: the reader reads the others.
        // A query that reads no column (`count(*)`) still needs the rows: read one, keep none.
        let plain = table.partition_keys.is_empty() && table.metadata.is_empty() && !projection.is_empty();
        let (table_schema, projection, derived) = if plain {
            (table.schema.clone(), projection, None)
        } else {
            let derived = |name: &String| table.partition_keys.contains(name) || table.metadata.contains_key(name);
            let file_columns: Vec<usize> =
                (0..table.schema.fields().len()).filter(|i| !derived(table.schema.field(*i).name())).collect();
            let file_schema = std::sync::Arc::new(table.schema.project(&file_columns)?);
            let mut read: Vec<usize> = Vec::new();
            let mut columns = Vec::with_capacity(projection.len());
            for i in &projection {
                let name = table.schema.field(*i).name();
                if let Some(key) = table.metadata.get(name) {
                    columns.push(Derive::Metadata(file_metadata(table, key)?));
                } else if let Some(k) = table.partition_keys.iter().position(|k| k == name) {
                    columns.push(Derive::Partition(k));
                } else {
                    columns.push(Derive::File(read.len()));
                    read.push(file_schema.index_of(name)?);
                }
            }
            // Row counts come with columns: read one even if the query wants none.
            if read.is_empty() {
                if file_schema.fields().is_empty() {
                    return Err(WeirError::user(format!("table '{}' has no column stored in its files", table.name)));
                }
                read.push(0);
            }
            let derived = Derived { root: PathBuf::from(path), keys: table.partition_keys.clone(), columns };
            (file_schema, read, Some(derived))
        };
        Ok(Self {
            format,
            table_schema,
            schema,
            projection,
            derived,
            parts,
            next_part: 0,
            resume_at: None,
            current: None,
            skipped_in_done_files: 0,
            skipped_current: 0,
            split,
            replaying: None,
        })
    }
}

impl FileSource {
    /// A batch of part `index` with the partition columns its directories give and the
    /// file's metadata.
    fn with_derived_columns(&self, index: usize, batch: RecordBatch) -> Result<RecordBatch> {
        let Some(d) = &self.derived else { return Ok(batch) };
        let path = &self.parts[index].0;
        let relative = path.strip_prefix(&d.root).unwrap_or(path);
        let values = super::partition::values_of(relative, &d.keys);
        let rows = batch.num_rows();
        let metadata = |m: FileMetadata| -> Result<Option<String>> {
            Ok(match m {
                FileMetadata::Path => Some(path.display().to_string()),
                FileMetadata::Name => path.file_name().map(|n| n.to_string_lossy().into_owned()),
                FileMetadata::Size => Some(
                    std::fs::metadata(path)
                        .map_err(|e| WeirError::external(format!("cannot read '{}': {e}", path.display())))?
                        .len()
                        .to_string(),
                ),
            })
        };
        let columns = d
            .columns
            .iter()
            .zip(self.schema.fields())
            .map(|(c, field)| match c {
                Derive::File(i) => Ok(batch.column(*i).clone()),
                Derive::Partition(k) => {
                    super::partition::constant(values[*k].as_deref(), field.data_type(), rows, field.name())
                        .map_err(|e| e.context(format!("'{}'", path.display())))
                }
                Derive::Metadata(m) => {
                    super::partition::constant(metadata(*m)?.as_deref(), field.data_type(), rows, field.name())
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let options = datafusion::arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(rows));
        Ok(RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)?)
    }
}

#[async_trait]
impl Source for FileSource {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            let (index, mut reader) = match self.current.take() {
                Some(r) => r,
                None => {
                    let Some((path, portion)) = self.parts.get(self.next_part).cloned() else { return Ok(None) };
                    let index = self.next_part;
                    self.next_part += 1;
                    self.skipped_in_done_files += self.skipped_current;
                    self.skipped_current = 0;
                    let resume = self.resume_at.take();
                    let reader = self.format.reader(
                        &path,
                        portion,
                        resume,
                        &self.table_schema,
                        &self.projection,
                        DEFAULT_BATCH_SIZE,
                    )?;
                    (index, reader)
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
                self.current = Some((index, reader));
                return Ok(Some(self.with_derived_columns(index, batch)?));
            }
        }
    }

    fn records_skipped(&self) -> u64 {
        self.skipped_in_done_files + self.skipped_current
    }

    /// Parts done, in thousandths, with the current byte range's share read.
    fn progress(&self) -> Option<(u64, u64)> {
        let total = self.parts.len() as u64 * 1000;
        let done = match &self.current {
            Some((index, reader)) => {
                let share = match self.parts.get(*index).map(|(_, p)| p) {
                    Some(Portion::Bytes { start, end }) if end > start => {
                        reader.position().saturating_sub(*start).min(end - start) * 1000 / (end - start)
                    }
                    _ => 0,
                };
                *index as u64 * 1000 + share
            }
            None => self.next_part as u64 * 1000,
        };
        Some((done.min(total), total))
    }

    /// `{"part": k, "at": n}`: parts before `k` are done; part `k` continues at `n` (a byte
    /// offset of a text file, rows into a Parquet portion).
    fn position(&self) -> Option<Vec<u8>> {
        let (part, at) = match &self.current {
            Some((index, reader)) => (*index, reader.position()),
            None => (self.next_part, self.resume_at.unwrap_or(0)),
        };
        Some(serde_json::json!({ "part": part, "at": at }).to_string().into_bytes())
    }

    fn seek(&mut self, position: &[u8]) -> Result<()> {
        if let Some(parts) = self.replaying.take() {
            self.parts = parts;
        }
        let (part, at) = part_and_offset(position)?;
        if part > self.parts.len() {
            return Err(WeirError::user(
                "the files of a table changed since the checkpoint was taken (fewer parts to read); start with --from-scratch",
            ));
        }
        self.next_part = part;
        self.resume_at = Some(at).filter(|a| *a > 0);
        self.current = None;
        Ok(())
    }

    /// The same parallelism only (a task's parts depend on it): this task's own position.
    /// No position at all (a scan the checkpoint lacks, after its replay of nothing): from
    /// the start.
    fn seek_rescaled(&mut self, positions: &[&[u8]]) -> Result<()> {
        if positions.is_empty() {
            return self.seek(br#"{"part": 0, "at": 0}"#);
        }
        let own = self.own(positions)?;
        self.seek(own)
    }

    /// Parts before the bound's are read whole, its own up to the bound's byte, none after
    /// (none at all without positions: nothing was read).
    fn replay_to(&mut self, positions: &[&[u8]]) -> Result<()> {
        let (part, at) = match positions {
            [] => (0, 0),
            _ => part_and_offset(self.own(positions)?)?,
        };
        if part > self.parts.len() {
            return Err(WeirError::user(
                "the files of the table changed since the checkpoint was taken (fewer parts to read), so the state \
                 built from them cannot be rebuilt by reading them again",
            ));
        }
        let mut bounded = self.parts[..part].to_vec();
        if at > 0 {
            let Some((path, portion)) = self.parts.get(part) else {
                return Err(WeirError::internal("a file source position past its parts"));
            };
            let start = match (portion, &self.format) {
                (_, crate::format::Format::Parquet { .. } | crate::format::Format::Avro { .. }) => {
                    return Err(WeirError::not_supported(format!(
                        "reading '{}' again up to a row inside it (Parquet and Avro files are read again whole \
                         parts only)",
                        path.display()
                    )))
                }
                (Portion::Bytes { start, .. }, _) => *start,
                _ => 0,
            };
            bounded.push((path.clone(), Portion::Bytes { start, end: at }));
        }
        self.replaying = Some(std::mem::replace(&mut self.parts, bounded));
        self.next_part = 0;
        self.resume_at = None;
        self.current = None;
        Ok(())
    }

    fn replayed(&self) -> bool {
        self.replaying.is_none() || (self.current.is_none() && self.next_part >= self.parts.len())
    }
}

impl FileSource {
    /// This task's position among every task's of an earlier run at the same parallelism.
    fn own<'a>(&self, positions: &[&'a [u8]]) -> Result<&'a [u8]> {
        match positions.get(self.split.index) {
            Some(p) if positions.len() == self.split.count => Ok(p),
            _ => Err(WeirError::not_supported(format!(
                "restoring a file source at another parallelism than its checkpoint's ({} tasks then, {} now)",
                positions.len(),
                self.split.count
            ))),
        }
    }
}

/// A position of [`FileSource`]: the part and the offset in it.
fn part_and_offset(position: &[u8]) -> Result<(usize, u64)> {
    let bad = || WeirError::internal("a file source position in a checkpoint is damaged");
    let value: serde_json::Value = serde_json::from_slice(position).map_err(|_| bad())?;
    let part = value["part"].as_u64().ok_or_else(bad)? as usize;
    let at = value["at"].as_u64().ok_or_else(bad)?;
    Ok((part, at))
}

#[cfg(test)]
mod replay_tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{AsArray, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use weir_core::{Options, Source, Split, TableDef};

    use super::FileSource;

    fn source(dir: &std::path::Path) -> FileSource {
        let mut options = Options::default();
        for (k, v) in [("connector", "filesystem"), ("format", "csv"), ("path", dir.to_str().unwrap_or(""))] {
            options.insert(k.into(), v.into(), None);
        }
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]));
        FileSource::new(&TableDef::new("t", schema, options), None, Split { index: 0, count: 1 }).expect("a source")
    }

    fn values(batches: &[RecordBatch]) -> Vec<i64> {
        batches.iter().flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec()).collect()
    }

    /// Read until the source ends, or until it has replayed what it was given.
    async fn read(s: &mut FileSource) -> Vec<i64> {
        let mut batches = Vec::new();
        while !s.replayed() || s.replaying.is_none() {
            match s.next_batch().await.expect("a batch") {
                Some(b) => batches.push(b),
                None => break,
            }
        }
        values(&batches)
    }

    #[tokio::test]
    async fn a_replay_reads_up_to_the_byte_a_position_names_and_then_goes_on_from_it() {
        let dir = std::env::temp_dir().join(format!("weir-file-replay-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("a.csv"), "1\n2\n").expect("a");
        std::fs::write(dir.join("b.csv"), "3\n4\n5\n").expect("b");
        // An earlier run stopped in b.csv after "3\n": part 1, byte 2.
        let position = br#"{"part": 1, "at": 2}"#;
        let mut s = source(&dir);
        s.replay_to(&[position]).expect("replay");
        assert_eq!(read(&mut s).await, [1, 2, 3]);
        assert!(s.replayed());
        s.seek_rescaled(&[position]).expect("go on");
        assert_eq!(read(&mut s).await, [4, 5]);
        // Nothing read before (a scan the checkpoint lacks): nothing to replay, then all of it.
        let mut s = source(&dir);
        s.replay_to(&[]).expect("replay nothing");
        assert!(s.replayed());
        s.seek_rescaled(&[]).expect("from the start");
        assert_eq!(read(&mut s).await, [1, 2, 3, 4, 5]);
        // Another parallelism is refused, saying so.
        let err = source(&dir).replay_to(&[position, position]).expect_err("two tasks then");
        assert!(err.message.contains("another parallelism"), "{}", err.message);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

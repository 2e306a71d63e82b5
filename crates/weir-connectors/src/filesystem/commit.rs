//! Partition commit (Flink's `sink.partition-commit.*`): once a partition of a table sink is
//! complete, a `_SUCCESS` file in its directory tells batch readers they can read it.
//!
//! `'sink.partition-commit.trigger'` = `partition-time` (the default): a partition is complete
//! when the watermark has passed its time (from its values by
//! `'partition.time-extractor.timestamp-pattern'`, e.g. `'$dt $hm:00'`) plus
//! `'sink.partition-commit.delay'`; `process-time`: when the delay has passed on the wall clock
//! since its first row (Flink's; it depends on when the job runs). With checkpoints, a
//! partition is marked only when the checkpoint that publishes its rows completes, judged by
//! the watermark at that checkpoint's barrier, so `_SUCCESS` never comes before a row of its
//! partition. The partitions not yet marked are in each checkpoint. A table with partition
//! commit is written by one sink task: it sees every row and the job's watermark (Flink runs
//! one committer beside parallel writers).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Array, Int64Array, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use weir_core::{parse_duration, Result, TableDef, WeirError};

use super::partition;

pub const OPTIONS: &[&str] = &[
    "sink.partition-commit.trigger",
    "sink.partition-commit.delay",
    "sink.partition-commit.policy.kind",
    "partition.time-extractor.timestamp-pattern",
    "sink.rolling-policy.check-interval",
];

pub const SUCCESS_FILE: &str = "_SUCCESS";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    PartitionTime,
    ProcessTime,
}

pub struct PartitionCommit {
    trigger: Trigger,
    delay: Duration,
    /// `$col` placeholders for the partition columns (default: the first column's value).
    pattern: String,
    keys: Vec<String>,
    /// Partitions written and not marked yet: directory -> when first written (this run).
    open: BTreeMap<String, Instant>,
}

impl PartitionCommit {
    /// The table's partition commit, if it has one (`'sink.partition-commit.policy.kind'`);
    /// every option checked.
    pub fn from_table(table: &TableDef) -> Result<Option<Self>> {
        let at = |key: &str| table.options.location(key);
        let Some(kind) = table.options.get("sink.partition-commit.policy.kind") else {
            if let Some(key) = OPTIONS[..2].iter().find(|k| table.options.get(k).is_some()) {
                return Err(WeirError::user(format!(
                    "table '{}': '{key}' needs 'sink.partition-commit.policy.kind' = 'success-file'",
                    table.name
                ))
                .at(at(key)));
            }
            return Ok(None);
        };
        if kind != "success-file" {
            return Err(WeirError::user(format!(
                "table '{}': 'sink.partition-commit.policy.kind' must be 'success-file', not '{kind}' \
                 ('metastore' and 'custom' need a catalog Weir does not have)",
                table.name
            ))
            .at(at("sink.partition-commit.policy.kind")));
        }
        if table.partition_keys.is_empty() {
            return Err(WeirError::user(format!(
                "table '{}': partition commit needs PARTITIONED BY columns",
                table.name
            ))
            .at(at("sink.partition-commit.policy.kind")));
        }
        let trigger = match table.options.get("sink.partition-commit.trigger").unwrap_or("partition-time") {
            "partition-time" => Trigger::PartitionTime,
            "process-time" => Trigger::ProcessTime,
            other => {
                return Err(WeirError::user(format!(
                "table '{}': 'sink.partition-commit.trigger' must be 'partition-time' or 'process-time', not '{other}'",
                table.name
            ))
                .at(at("sink.partition-commit.trigger")))
            }
        };
        let delay = match table.options.get("sink.partition-commit.delay") {
            None => Duration::ZERO,
            Some(d) => parse_duration(d).map_err(|e| {
                e.context(format!("table '{}': 'sink.partition-commit.delay'", table.name))
                    .at(at("sink.partition-commit.delay"))
            })?,
        };
        if let Some(i) = table.options.get("sink.rolling-policy.check-interval") {
            parse_duration(i).map_err(|e| {
                e.context(format!("table '{}': 'sink.rolling-policy.check-interval'", table.name))
                    .at(at("sink.rolling-policy.check-interval"))
            })?;
        }
        let pattern = table
            .options
            .get("partition.time-extractor.timestamp-pattern")
            .map(str::to_string)
            .unwrap_or_else(|| format!("${}", table.partition_keys[0]));
        let commit = Self { trigger, delay, pattern, keys: table.partition_keys.clone(), open: BTreeMap::new() };
        if trigger == Trigger::PartitionTime {
            for key in pattern_keys(&commit.pattern) {
                if !commit.keys.contains(&key) {
                    return Err(WeirError::user(format!(
                        "table '{}': 'partition.time-extractor.timestamp-pattern' names '${key}', which is not a \
                         partition column",
                        table.name
                    ))
                    .at(at("partition.time-extractor.timestamp-pattern")));
                }
            }
        }
        Ok(Some(commit))
    }

    pub fn written(&mut self, dir: &str) {
        self.open.entry(dir.to_string()).or_insert_with(Instant::now);
    }

    /// The partitions not marked yet, for a checkpoint.
    pub fn open(&self) -> Vec<String> {
        self.open.keys().cloned().collect()
    }

    /// Partitions a checkpoint recorded, not marked yet.
    pub fn restore(&mut self, dirs: impl IntoIterator<Item = String>) {
        for d in dirs {
            self.written(&d);
        }
    }

    /// The time of partition `dir`, in ms: its values put into the pattern, read as a
    /// timestamp (`yyyy-MM-dd`, `yyyy-MM-dd HH:mm:ss`, …).
    fn time(&self, dir: &str) -> Result<i64> {
        let values = partition::values_of(Path::new(dir), &self.keys);
        let mut text = self.pattern.clone();
        // Longest names first: `$dt` must not eat the start of `$dth`.
        let mut order: Vec<usize> = (0..self.keys.len()).collect();
        order.sort_by_key(|i| std::cmp::Reverse(self.keys[*i].len()));
        for i in order {
            text = text.replace(&format!("${}", self.keys[i]), values[i].as_deref().unwrap_or(""));
        }
        let parsed = cast(&StringArray::from(vec![text.as_str()]), &DataType::Timestamp(TimeUnit::Millisecond, None))
            .and_then(|t| cast(&t, &DataType::Int64));
        let ms = parsed
            .ok()
            .and_then(|a| a.as_any().downcast_ref::<Int64Array>().filter(|a| a.is_valid(0)).map(|a| a.value(0)));
        ms.ok_or_else(|| {
            WeirError::user(format!(
                "partition '{dir}': its time '{text}' (from 'partition.time-extractor.timestamp-pattern' '{}') \
                 is not a timestamp",
                self.pattern
            ))
        })
    }

    /// Take the partitions complete at `watermark` (partition-time) or now (process-time).
    pub fn take_due(&mut self, watermark: i64) -> Result<Vec<String>> {
        let mut due = Vec::new();
        for (dir, first) in &self.open {
            let complete = match self.trigger {
                Trigger::ProcessTime => first.elapsed() >= self.delay,
                Trigger::PartitionTime => {
                    let delay = self.delay.as_millis().min(i64::MAX as u128) as i64;
                    self.time(dir)?.saturating_add(delay) <= watermark
                }
            };
            if complete {
                due.push(dir.clone());
            }
        }
        for d in &due {
            self.open.remove(d);
        }
        Ok(due)
    }

    /// Every partition written: the input has ended.
    pub fn take_all(&mut self) -> Vec<String> {
        std::mem::take(&mut self.open).into_keys().collect()
    }
}

/// The `$name` placeholders of a pattern.
fn pattern_keys(pattern: &str) -> Vec<String> {
    pattern
        .split('$')
        .skip(1)
        .map(|rest| rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect())
        .collect()
}

/// Mark partition directory `dir` complete (idempotent).
pub fn mark(dir: &Path) -> Result<()> {
    let path = dir.join(SUCCESS_FILE);
    std::fs::write(&path, b"").map_err(|e| WeirError::external(format!("cannot write '{}': {e}", path.display())))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

//! `'connector' = 'filesystem'`: `'path'` is a file or a directory. As a source, every visible
//! file of the directory (names starting with `.` or `_` are skipped, as Spark and Flink do) is
//! read in name order (partition columns of a `PARTITIONED BY` table from the `col=value`
//! directories). As a sink, `'path'` is a table directory, written by [`FileSink`]: readers
//! never see a half-written file, nor, with checkpoints, a row that is later rolled back.

mod commit;
mod partition;
mod sink;
mod source;

pub use commit::{PartitionCommit, OPTIONS as COMMIT_OPTIONS};
pub use sink::{rolling_policy, FileSink};

#[cfg(test)]
mod sink_tests;
pub use source::{validate_metadata, FileSource};

/// Files that readers of a table directory ignore.
pub fn is_hidden(name: &str) -> bool {
    name.starts_with('.') || name.starts_with('_')
}

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

/// A table's `'path'` as a local path. Flink's `file:///tmp/t` (and Hadoop's `file:/tmp/t`) is
/// `/tmp/t`; before, such a path was taken as a relative directory named `file:`. Another
/// scheme (`s3://`, `hdfs://`) is refused: the filesystem connector reads and writes local
/// files only.
pub(crate) fn local_path(table: &weir_core::TableDef) -> weir_core::Result<std::path::PathBuf> {
    let path = table.options.required(&table.name, "path")?;
    let local = path.strip_prefix("file://").or_else(|| path.strip_prefix("file:")).unwrap_or(path);
    if let Some((scheme, _)) = local.split_once("://") {
        if !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) {
            return Err(weir_core::WeirError::not_supported(format!(
                "filesystem table '{}': path '{path}' ({scheme}://): the filesystem connector reads and writes local \
                 paths and file:// only",
                table.name
            )));
        }
    }
    Ok(std::path::PathBuf::from(local))
}

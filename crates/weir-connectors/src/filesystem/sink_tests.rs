//! The file sink's committer runs the two-phase-commit contract.

use std::path::PathBuf;

use weir_core::{Options, Split, TableDef};

use super::FileSink;
use crate::committer_contract::{run, schema, Harness};

struct Files {
    dir: PathBuf,
}

impl Harness for Files {
    type C = FileSink;

    fn make(&self, task: usize, count: usize) -> FileSink {
        let mut options = Options::default();
        for (k, v) in [("connector", "filesystem"), ("format", "csv"), ("path", self.dir.to_str().unwrap_or(""))] {
            options.insert(k.into(), v.into(), None);
        }
        let table = TableDef::new("t", schema(), options);
        FileSink::new(&table, schema(), Split { index: task, count }).expect("a file sink")
    }

    /// The values in the visible files: what Spark or DuckDB would read.
    fn published(&self) -> Vec<i64> {
        let mut values = Vec::new();
        for entry in std::fs::read_dir(&self.dir).expect("the table directory").flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if name.starts_with('.') || name.starts_with('_') {
                continue;
            }
            let text = std::fs::read_to_string(entry.path()).expect("a file");
            values.extend(text.lines().filter_map(|l| l.trim().parse::<i64>().ok()));
        }
        values.sort();
        values
    }
}

#[tokio::test]
async fn the_file_committer_keeps_the_contract() {
    let root = std::env::temp_dir().join(format!("weir-file-committer-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    run(|case| {
        let dir = root.join(case);
        std::fs::create_dir_all(&dir).expect("a directory");
        Files { dir }
    })
    .await;
    let _ = std::fs::remove_dir_all(&root);
}

/// Flink's `file://` paths are local paths; another scheme is refused in one line.
#[test]
fn file_urls_are_local_paths_and_other_schemes_are_refused() {
    let table = |path: &str| {
        let mut options = Options::default();
        for (k, v) in [("connector", "filesystem"), ("format", "csv"), ("path", path)] {
            options.insert(k.into(), v.into(), None);
        }
        TableDef::new("t", schema(), options)
    };
    let local = |path: &str| super::local_path(&table(path)).map_err(|e| e.to_string());
    assert_eq!(local("file:///tmp/out"), Ok(PathBuf::from("/tmp/out")));
    assert_eq!(local("file:/tmp/out"), Ok(PathBuf::from("/tmp/out")));
    assert_eq!(local("/tmp/out"), Ok(PathBuf::from("/tmp/out")));
    assert_eq!(local("out/t"), Ok(PathBuf::from("out/t")));
    let refused = local("hdfs://nn/out").expect_err("refused");
    assert!(
        refused.contains("filesystem table 't'") && refused.contains("hdfs://") && !refused.contains('\n'),
        "{refused}"
    );
    assert!(weir_core::is_relative_path("out/t"));
    assert!(!weir_core::is_relative_path("file:///tmp/out") && !weir_core::is_relative_path("s3://b/t"));
}

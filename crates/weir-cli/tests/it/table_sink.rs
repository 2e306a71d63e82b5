//! The partitioned Parquet table sink under SIGKILL: a `weir run` job writing a windowed
//! aggregate into a table partitioned by a column is killed at least 20 times, in every phase
//! of its two-phase commit (including between a checkpoint's completion and the publication of
//! its files), and restarted each time. Meanwhile a reader polls the table directory and
//! reads every published file; no file it saw may later disappear or change (no row it read is
//! ever rolled back). In the end DataFusion's own listing-table reader (not Weir's source)
//! reads exactly the rows of an uninterrupted run, and no hidden or orphaned file is left.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion::arrow::datatypes::DataType;
use datafusion::prelude::{ParquetReadOptions, SessionContext};

use crate::kills::{in_phase, kill_in_phases, start, Phase, PHASES};
use crate::weir_bin;

fn job(dir: &Path, table: &str) -> String {
    format!(
        "SET 'parallelism' = '2';
SET 'checkpoint.interval' = '100ms';
SET 'checkpoint.dir' = '{ck}';
SET 'restart.attempts' = '0';
CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP(3), WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
  WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '3000000', 'rate' = '600000');
CREATE TABLE out (bucket BIGINT, auction BIGINT, window_start TIMESTAMP(3), cnt BIGINT, total BIGINT) PARTITIONED BY (bucket)
  WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'parquet', 'parquet.compression' = 'zstd');
INSERT INTO out
SELECT auction % 4, auction, window_start, COUNT(*), SUM(price)
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
GROUP BY auction, window_start, window_end;
",
        ck = dir.join(format!("{table}-checkpoints")).display(),
        out = dir.join(table).display(),
    )
}

/// Every file under `dir` (relative paths), hidden ones included.
fn all_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            } else if let Ok(rel) = e.path().strip_prefix(dir) {
                out.push(rel.to_path_buf());
            }
        }
    }
    out.sort();
    out
}

fn hidden(path: &Path) -> bool {
    path.iter().any(|c| c.to_string_lossy().starts_with('.') || c.to_string_lossy().starts_with('_'))
}

/// A published file's rows, read with the parquet crate directly.
fn read_file(path: &Path) -> Vec<String> {
    use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let file = std::fs::File::open(path).expect("open published file");
    let reader = ParquetRecordBatchReaderBuilder::try_new(file).expect("parquet footer").build().expect("reader");
    let batches: Vec<_> = reader.map(|b| b.expect("batch")).collect();
    crate::rows(&batches)
}

/// The table as DataFusion's listing table reads it (partition column from the directories).
async fn read_table(dir: &Path) -> Vec<String> {
    let ctx = SessionContext::new();
    let options = ParquetReadOptions::default().table_partition_cols(vec![("bucket".to_string(), DataType::Int64)]);
    ctx.register_parquet("t", dir.to_string_lossy().as_ref(), options).await.expect("register");
    let batches = ctx
        .sql("SELECT bucket, auction, window_start, cnt, total FROM t")
        .await
        .expect("plan")
        .collect()
        .await
        .expect("read");
    crate::rows(&batches)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_parquet_table_is_exact_under_sigkill() {
    let dir = crate::slt::tempdir();
    std::fs::write(dir.join("reference.sql"), job(&dir, "reference")).expect("sql");
    std::fs::write(dir.join("job.sql"), job(&dir, "out")).expect("sql");
    let reference = Command::new(weir_bin()).arg("run").arg(dir.join("reference.sql")).output().expect("reference");
    assert!(reference.status.success(), "{}", String::from_utf8_lossy(&reference.stderr));
    let want = read_table(&dir.join("reference")).await;
    assert!(want.len() > 10_000, "reference has {} rows", want.len());
    assert!(all_files(&dir.join("reference")).iter().any(|f| f.starts_with("bucket=3")), "not partitioned");

    // A reader polling the table while it is written and killed.
    let table = dir.join("out");
    let seen: Arc<Mutex<BTreeMap<PathBuf, Vec<String>>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let poller = {
        let (table, seen, stop) = (table.clone(), seen.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut violations = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let visible: Vec<PathBuf> = all_files(&table).into_iter().filter(|f| !hidden(f)).collect();
                let mut seen = seen.lock().expect("seen");
                for known in seen.keys() {
                    if !visible.contains(known) {
                        violations.push(format!("{} disappeared", known.display()));
                    }
                }
                for f in visible {
                    if let std::collections::btree_map::Entry::Vacant(slot) = seen.entry(f) {
                        let rows = read_file(&table.join(slot.key()));
                        slot.insert(rows);
                    }
                }
                drop(seen);
                std::thread::sleep(Duration::from_millis(20));
            }
            violations
        })
    };

    let faults = dir.join("faults");
    kill_in_phases(
        &PHASES,
        Phase::Processing,
        3,
        20,
        |phase| start(&dir.join("job.sql"), phase, &faults, "file"),
        |phase| in_phase(phase, &faults, "file"),
    );
    let last = Command::new(weir_bin()).arg("run").arg(dir.join("job.sql")).output().expect("final run");
    assert!(last.status.success(), "{}", String::from_utf8_lossy(&last.stderr));
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::SeqCst);
    let violations = poller.join().expect("poller");
    assert!(violations.is_empty(), "a reader saw rows rolled back: {violations:?}");

    // Nothing hidden or orphaned left: only published files and commit records.
    let leftovers: Vec<PathBuf> =
        all_files(&table).into_iter().filter(|f| hidden(f) && !f.starts_with("_weir_log")).collect();
    assert!(leftovers.is_empty(), "hidden files left: {leftovers:?}");
    let log_tmp: Vec<PathBuf> = all_files(&table.join("_weir_log")).into_iter().filter(|f| hidden(f)).collect();
    assert!(log_tmp.is_empty(), "unfinished commit records: {log_tmp:?}");

    let got = read_table(&table).await;
    let mut dedup = got.clone();
    dedup.dedup();
    assert_eq!(dedup.len(), got.len(), "duplicate rows");
    assert_eq!(got.len(), want.len(), "row count differs from the uninterrupted run");
    assert!(got == want, "rows differ from the uninterrupted run");
    // What the reader saw while the job ran is in the final table, file for file.
    let seen = seen.lock().expect("seen");
    assert!(!seen.is_empty(), "the reader saw no published file while the job ran");
    for (f, rows) in seen.iter() {
        assert!(table.join(f).exists(), "{} seen, then gone", f.display());
        assert_eq!(&read_file(&table.join(f)), rows, "{} changed after it was seen", f.display());
    }
}

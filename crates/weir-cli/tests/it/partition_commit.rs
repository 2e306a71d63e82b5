//! Partition commit (Nexmark q10's options): a partition's `_SUCCESS` file appears once the
//! watermark has passed the partition's time plus the delay and the checkpoint that publishes
//! its rows has completed, never before a row of it is visible, and every partition has one
//! when the job ends.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// Visible rows per partition directory (`dt=…/hm=…`), and the partitions with `_SUCCESS`.
fn snapshot(dir: &Path) -> (BTreeMap<String, usize>, Vec<String>) {
    let mut rows = BTreeMap::new();
    let mut done = Vec::new();
    let Ok(days) = std::fs::read_dir(dir) else { return (rows, done) };
    for day in days.flatten().filter(|d| d.file_name().to_string_lossy().starts_with("dt=")) {
        for minute in std::fs::read_dir(day.path()).into_iter().flatten().flatten() {
            let name = format!("{}/{}", day.file_name().to_string_lossy(), minute.file_name().to_string_lossy());
            // Read _SUCCESS first: the rows counted after it must all be there already.
            let marked = minute.path().join("_SUCCESS").exists();
            let mut n = 0;
            for file in std::fs::read_dir(minute.path()).into_iter().flatten().flatten() {
                let f = file.file_name().to_string_lossy().to_string();
                if !f.starts_with('.') && !f.starts_with('_') {
                    n += std::fs::read_to_string(file.path()).map(|t| t.lines().count()).unwrap_or(0);
                }
            }
            rows.insert(name.clone(), n);
            if marked {
                done.push(name);
            }
        }
    }
    (rows, done)
}

/// A q10-like job writing `out` with checkpoints in `checkpoints`.
fn q10(dir: &Path, out: &str) -> std::path::PathBuf {
    let sql = dir.join(format!("{out}.sql"));
    std::fs::write(
        &sql,
        format!(
            "SET 'parallelism' = '2';
SET 'checkpoint.interval' = '200ms';
SET 'checkpoint.dir' = '{ck}';
CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
  WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '260000', 'rate' = '50000');
CREATE TABLE q10 (auction BIGINT, price BIGINT, date_time TIMESTAMP(3), dt STRING, hm STRING)
  PARTITIONED BY (dt, hm) WITH (
  'connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv',
  'sink.partition-commit.trigger' = 'partition-time',
  'sink.partition-commit.delay' = '1 min',
  'sink.partition-commit.policy.kind' = 'success-file',
  'partition.time-extractor.timestamp-pattern' = '$dt $hm:00',
  'sink.rolling-policy.rollover-interval' = '1min',
  'sink.rolling-policy.check-interval' = '1min');
INSERT INTO q10 SELECT auction, price, date_time, DATE_FORMAT(date_time, 'yyyy-MM-dd'),
  DATE_FORMAT(date_time, 'HH:mm') FROM bid;
",
            ck = dir.join(format!("{out}-checkpoints")).display(),
            out = dir.join(out).display(),
        ),
    )
    .expect("write sql");
    sql
}

/// `weir run` of the q10-like job, each commit slowed by 300 ms before it publishes (the
/// fault hook), so that a `_SUCCESS` written before its partition's rows were published would
/// be seen.
#[test]
fn success_files_come_after_their_partitions_rows() {
    let dir = crate::slt::tempdir();
    let out = dir.join("out");
    let sql = q10(&dir, "out");
    let mut child = crate::kills::start(&sql, crate::kills::Phase::Committing, &dir.join("faults"), "file");
    // Rows seen in each partition when its _SUCCESS was first seen.
    let mut at_success: BTreeMap<String, usize> = BTreeMap::new();
    let status = loop {
        let (rows, done) = snapshot(&out);
        for p in done {
            at_success.entry(p.clone()).or_insert(rows[&p]);
        }
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "weir run failed");
    let (rows, done) = snapshot(&out);
    // 260,000 events over 4 min 20 s of event time: partitions 00:00 … 00:04.
    assert_eq!(rows.len(), 5, "{rows:?}");
    assert_eq!(done.len(), rows.len(), "every partition is marked at the end: {done:?}");
    assert!(at_success.len() >= 2, "partitions marked while the job ran: {at_success:?}");
    for (p, n) in &at_success {
        assert_eq!(rows[p], *n, "partition {p} had {n} rows when marked, {} at the end", rows[p]);
    }
}

/// Killed with SIGKILL in every phase and restarted: every partition is marked in the end
/// (those a checkpoint left open are in it: no row after the restart may reopen them), with
/// exactly the rows of an uninterrupted run.
#[test]
fn partitions_are_marked_across_restarts() {
    use crate::kills::{in_phase, kill_in_phases, start, Phase, PHASES};
    let dir = crate::slt::tempdir();
    let reference = std::process::Command::new(crate::weir_bin()).arg("run").arg(q10(&dir, "reference")).output();
    assert!(reference.expect("reference run").status.success(), "reference run failed");
    let (want, marked) = snapshot(&dir.join("reference"));
    assert_eq!(marked.len(), want.len(), "reference: {marked:?} of {want:?}");
    let sql = q10(&dir, "out");
    let faults = dir.join("faults");
    kill_in_phases(
        &PHASES,
        Phase::Processing,
        2,
        8,
        |phase| start(&sql, phase, &faults, "file"),
        |phase| in_phase(phase, &faults, "file"),
    );
    let last = std::process::Command::new(crate::weir_bin()).arg("run").arg(&sql).output().expect("final run");
    assert!(last.status.success(), "{}", String::from_utf8_lossy(&last.stderr));
    let (rows, marked) = snapshot(&dir.join("out"));
    assert_eq!(rows, want, "rows per partition differ from the uninterrupted run");
    assert_eq!(marked.len(), rows.len(), "partitions left unmarked: {marked:?} of {rows:?}");
}

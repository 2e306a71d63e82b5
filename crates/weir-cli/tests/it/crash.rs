//! Exactly-once under SIGKILL: a checkpointed `weir run` job (Nexmark bids -> 10 s tumbling
//! window count/sum per auction -> CSV files) is killed at random moments, some of them while
//! a checkpoint is being written and (RocksDB state) while a checkpoint's files are being
//! copied as the job goes on, and restarted each time; in the end the published files
//! hold exactly the rows of a run that was never killed. A second, smaller branch of the job
//! ends early, so that most kills come after some tasks have finished (with RocksDB: tasks
//! whose final state is in shared files every later checkpoint needs).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::weir_bin;

fn job(dir: &Path, out: &str, checkpoints: &str, backend: &str) -> String {
    format!(
        "SET 'parallelism' = '2';
SET 'state.backend' = '{backend}';
SET 'state.dir' = '{state}';
SET 'checkpoint.interval' = '100ms';
SET 'checkpoint.dir' = '{ck}';
CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP(3), WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
  WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '4000000', 'rate' = '1000000');
CREATE TABLE early (auction BIGINT, price BIGINT, date_time TIMESTAMP(3), WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
  WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '300000', 'rate' = '1000000');
CREATE TABLE out (auction BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), cnt BIGINT, total BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv');
INSERT INTO out
SELECT auction, window_start, window_end, COUNT(*), SUM(price)
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
GROUP BY auction, window_start, window_end
UNION ALL
SELECT auction, window_start, window_end, COUNT(*), SUM(price)
FROM TABLE(TUMBLE(TABLE early, DESCRIPTOR(date_time), INTERVAL '5' SECOND))
GROUP BY auction, window_start, window_end;
",
        ck = dir.join(checkpoints).display(),
        out = dir.join(out).display(),
        state = dir.join("state").display(),
    )
}

/// Where a kill lands.
#[derive(Clone, Copy, PartialEq)]
enum Moment {
    /// At a random time.
    Random,
    /// Between a checkpoint's state files and its manifest (the write slowed down).
    ManifestWrite,
    /// While RocksDB files are copied to the checkpoint, after the barrier, with the job
    /// processing on (the copy slowed down).
    Upload,
}

/// The moment's fault hook: the process waits there, its marker file in `faults` while it
/// does, so that the kill lands in the phase every time it is reached.
fn hook(moment: Moment) -> Option<&'static str> {
    match moment {
        Moment::ManifestWrite => Some("manifest"),
        Moment::Upload => Some("upload"),
        Moment::Random => None,
    }
}

fn start(sql: &Path, moment: Moment, faults: &Path) -> Child {
    let _ = std::fs::remove_dir_all(faults);
    std::fs::create_dir_all(faults).expect("fault dir");
    let mut cmd = Command::new(weir_bin());
    cmd.arg("run").arg(sql).stdout(Stdio::null()).stderr(Stdio::null()).env("WEIR_FAULT_DIR", faults);
    if let Some(hook) = hook(moment) {
        cmd.env(format!("WEIR_FAULT_{}_MS", hook.to_uppercase()), "300");
    }
    cmd.spawn().expect("start weir")
}

/// Visible output rows, sorted; panics on leftover hidden files when `clean` is asked.
fn published(dir: &Path) -> (Vec<String>, Vec<String>) {
    let mut rows = Vec::new();
    let mut hidden = Vec::new();
    for entry in std::fs::read_dir(dir).expect("output dir").flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        // `_weir_log/`: the sink's commit records, not data.
        if name.starts_with('_') {
            continue;
        }
        if name.starts_with('.') {
            hidden.push(name);
            continue;
        }
        rows.extend(std::fs::read_to_string(entry.path()).expect("read output").lines().map(String::from));
    }
    rows.sort();
    (rows, hidden)
}

#[test]
fn killed_and_restarted_runs_publish_exactly_the_rows_of_an_uninterrupted_run() {
    crash_test("memory");
}

#[test]
fn killed_and_restarted_runs_with_rocksdb_state_publish_exactly_the_rows_of_an_uninterrupted_run() {
    crash_test("rocksdb");
}

fn crash_test(backend: &str) {
    let dir = crate::slt::tempdir();
    std::fs::write(dir.join("reference.sql"), job(&dir, "reference", "reference-checkpoints", backend))
        .expect("write sql");
    std::fs::write(dir.join("job.sql"), job(&dir, "out", "checkpoints", backend)).expect("write sql");

    let reference = Command::new(weir_bin()).arg("run").arg(dir.join("reference.sql")).output().expect("reference run");
    assert!(reference.status.success(), "{}", String::from_utf8_lossy(&reference.stderr));
    let (want, _) = published(&dir.join("reference"));
    assert!(want.len() > 10_000, "reference has {} rows", want.len());

    let mut seed =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(7);
    println!("random seed {seed}");
    let mut random = move |below: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % below
    };
    let (mut kills, mut during_write, mut during_upload, mut finished) = (0, 0, 0, 0);
    let rocksdb = backend == "rocksdb";
    let mut round = 0;
    let faults = dir.join("faults");
    while (kills < 12 || during_write < 3 || (rocksdb && during_upload < 3)) && round < 40 {
        round += 1;
        // The kills in a phase come first, while the job has most of its input ahead (a
        // run restored near the end may finish before its next checkpoint): a checkpoint
        // caught between its state files and its manifest, and with RocksDB one whose files
        // are being copied while the job goes on; then kills at random moments.
        let moment = match (during_write < 3, rocksdb && during_upload < 3) {
            (true, true) if round % 2 == 0 => Moment::Upload,
            (true, _) => Moment::ManifestWrite,
            (false, true) => Moment::Upload,
            (false, false) => Moment::Random,
        };
        let caught = |moment: Moment| hook(moment).is_some_and(|h| faults.join(h).exists());
        // Local state of killed runs is scratch (and `weir run` clears it too, but only once
        // started): gone, so that only this run's uploads are seen.
        let _ = std::fs::remove_dir_all(dir.join("state"));
        let mut child = start(&dir.join("job.sql"), moment, &faults);
        let started = Instant::now();
        let wait = if moment == Moment::Random { 100 + random(600) } else { 3000 };
        let deadline = started + Duration::from_millis(wait);
        let mut killed = false;
        while Instant::now() < deadline {
            if child.try_wait().expect("poll child").is_some() {
                break;
            }
            if caught(moment) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if child.try_wait().expect("poll child").is_none() {
            child.kill().expect("SIGKILL");
            killed = true;
        }
        let status = child.wait().expect("reap child");
        if killed {
            kills += 1;
            match moment {
                Moment::ManifestWrite if caught(moment) => during_write += 1,
                Moment::Upload if caught(moment) => during_upload += 1,
                _ => {}
            }
        } else {
            assert!(status.success(), "a run failed on its own in round {round}");
            finished += 1;
        }
    }
    println!(
        "{backend}: {kills} kills ({during_write} during a checkpoint write, {during_upload} during a RocksDB \
         upload), {finished} runs finished on their own"
    );
    assert!(kills >= 10, "only {kills} kills");
    assert!(during_write >= 3, "only {during_write} kills during a checkpoint write");
    assert!(!rocksdb || during_upload >= 3, "only {during_upload} kills during a RocksDB upload");

    // A last run to the end.
    let last = Command::new(weir_bin()).arg("run").arg(dir.join("job.sql")).output().expect("final run");
    assert!(last.status.success(), "{}", String::from_utf8_lossy(&last.stderr));
    let (got, hidden) = published(&dir.join("out"));
    assert!(hidden.is_empty(), "hidden files left: {hidden:?}");
    assert_eq!(got.len(), want.len(), "row count differs from the uninterrupted run");
    let mut dedup = got.clone();
    dedup.dedup();
    assert_eq!(dedup.len(), got.len(), "duplicate rows");
    assert!(got == want, "rows differ from the uninterrupted run");
}

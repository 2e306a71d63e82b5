//! Rebuilding by replay under SIGKILL: a windowed job from Kafka into an exactly-once Kafka
//! sink is killed after a checkpoint; version 2 (SUM became MAX) starts on that checkpoint,
//! its window aggregate rebuilt by reading the topic again, and is killed 10 times while it
//! replays. Each restart replays again from the same checkpoint (none is taken before the
//! cut-over); the topic ends up holding version 1's rows up to the checkpoint and exactly
//! version 2's rows from it, none twice, none missing.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::kafka::{bids_far_ahead, load_bids, run_to_end, write_sql, Broker};

/// The windowed job of `version` (1: SUM, 2: MAX), each row marked with it. Version 1 reads
/// the topic without end; version 2 to its end, paced so that its replay takes seconds.
fn job(bootstrap: &str, out: &str, version: u32, checkpoints: &Path) -> String {
    let (aggregate, read) = match version {
        1 => ("SUM(price)", String::new()),
        _ => ("MAX(price)", ", 'scan.bounded.mode' = 'latest-offset', 'scan.records-per-second' = '3000'".into()),
    };
    format!(
        "SET 'parallelism' = '2';
SET 'checkpoint.interval' = '100ms';
SET 'checkpoint.dir' = '{ck}';
SET 'restart.attempts' = '0';
CREATE TABLE bids (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3),
    WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND)
  WITH ('connector' = 'kafka', 'topic' = 'bids', 'properties.bootstrap.servers' = '{bootstrap}',
        'format' = 'json', 'key.fields' = 'auction', 'scan.startup.mode' = 'earliest-offset'{read});
CREATE TABLE out (auction BIGINT, window_start TIMESTAMP(3), cnt BIGINT, total BIGINT, v STRING)
  WITH ('connector' = 'kafka', 'topic' = '{out}', 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'json',
        'key.fields' = 'auction', 'sink.delivery-guarantee' = 'exactly-once', 'sink.transactional-id-prefix' = 'weir-up');
INSERT INTO out
SELECT auction, window_start, COUNT(*), {aggregate}, 'v{version}'
FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(date_time), INTERVAL '1' SECOND))
GROUP BY auction, window_start, window_end;
",
        ck = checkpoints.display(),
    )
}

/// The highest checkpoint number under `dir` (its `chk-N` directories), 0 if none.
fn newest_checkpoint(dir: &Path) -> u64 {
    let mut newest = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if let Some(n) = name.strip_prefix("chk-").and_then(|n| n.parse::<u64>().ok()) {
                // Complete only with its manifest.
                if entry.path().join("manifest.json").exists() {
                    newest = newest.max(n);
                }
            } else if entry.path().is_dir() {
                stack.push(entry.path());
            }
        }
    }
    newest
}

/// The window of a row (`{"auction":…,"window_start":…,…}`): its auction and start.
fn window(row: &str) -> String {
    row.split(",\"cnt\"").next().unwrap_or(row).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_by_replay_killed_10_times_writes_exactly_the_new_rows_once() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    load_bids(&broker, 20_000).await;
    broker.create_topic("out", 2).await;
    broker.create_topic("reference", 2).await;
    let checkpoints = dir.join("checkpoints");

    // Version 1 until it has committed output, then killed.
    let v1 = write_sql(&dir, "v1.sql", job(&broker.bootstrap, "out", 1, &checkpoints));
    let mut child = Command::new(crate::weir_bin()).arg("run").arg(&v1).stdout(Stdio::null()).spawn().expect("v1");
    let deadline = Instant::now() + Duration::from_secs(120);
    while (newest_checkpoint(&checkpoints) < 3 || broker.read_committed("out").is_empty()) && Instant::now() < deadline
    {
        assert!(child.try_wait().expect("poll").is_none(), "version 1 ended on its own");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    let cut_over = newest_checkpoint(&checkpoints);
    assert!(cut_over >= 3, "version 1 took no checkpoint");
    // Bids far ahead in event time: every window fires before version 2 ends.
    bids_far_ahead(&broker);

    // Version 2 from scratch: the rows it writes over the whole topic.
    let reference = job(&broker.bootstrap, "reference", 2, &dir.join("ref-ck")).replace("'weir-up'", "'weir-ref'");
    run_to_end(&write_sql(&dir, "reference.sql", reference));
    let want: Vec<String> = broker.read_committed("reference");
    assert!(want.len() > 1000, "reference has {} rows", want.len());

    // Version 2 on version 1's checkpoint, killed 10 times while it replays: no checkpoint is
    // taken before the cut-over, so each kill finds the same one to start from.
    let v2 = write_sql(&dir, "v2.sql", job(&broker.bootstrap, "out", 2, &checkpoints));
    let mut seed = 0x9e37_79b9_u64;
    for kill in 0..10 {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut child = Command::new(crate::weir_bin())
            .arg("run")
            .arg(&v2)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("v2");
        std::thread::sleep(Duration::from_millis(300 + (seed >> 33) % 1500));
        assert!(child.try_wait().expect("poll").is_none(), "version 2 ended within its replay (kill {kill})");
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        assert_eq!(newest_checkpoint(&checkpoints), cut_over, "a checkpoint before the replay was over (kill {kill})");
    }
    run_to_end(&v2);
    assert!(newest_checkpoint(&checkpoints) > cut_over, "version 2 took no checkpoint");

    let rows = broker.read_committed("out");
    let (old, new): (Vec<String>, Vec<String>) = rows.into_iter().partition(|r| r.contains("\"v\":\"v1\""));
    let fired: BTreeSet<String> = old.iter().map(|r| window(r)).collect();
    assert_eq!(fired.len(), old.len(), "a window of version 1 written twice");
    let mut expected: Vec<String> = want.into_iter().filter(|r| !fired.contains(&window(r))).collect();
    let mut got = new;
    expected.sort();
    got.sort();
    assert!(!fired.is_empty() && !expected.is_empty(), "{} windows before the cut-over", fired.len());
    assert_eq!(got.len(), expected.len(), "version 2's rows from the cut-over");
    assert!(got == expected, "version 2's rows differ from its run from scratch, from the cut-over on");
}

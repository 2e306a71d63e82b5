//! A checkpointed job that fails restarts from its latest checkpoint: here a bad record in
//! the second file fails the job; the file is fixed while the job waits to restart; the job
//! then resumes from its last checkpoint and the output holds every row exactly once.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use weir::{Engine, JobState};

fn published(dir: &std::path::Path) -> Vec<String> {
    let mut rows = Vec::new();
    for entry in std::fs::read_dir(dir).expect("output").flatten() {
        // `_weir_log/`: the sink's commit records, not data.
        if entry.file_name().to_string_lossy().starts_with('_') {
            continue;
        }
        assert!(!entry.file_name().to_string_lossy().starts_with('.'), "hidden file left: {:?}", entry.file_name());
        rows.extend(std::fs::read_to_string(entry.path()).expect("read").lines().map(String::from));
    }
    rows.sort();
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_restarts_from_its_latest_checkpoint() {
    let dir = crate::slt::tempdir();
    std::fs::create_dir_all(dir.join("in")).expect("input dir");
    let mut first = String::new();
    for i in 0..200_000 {
        let _ = writeln!(first, "{i},row {i}");
    }
    std::fs::write(dir.join("in/a.csv"), &first).expect("write a");
    std::fs::write(dir.join("in/b.csv"), "200000,last rows\n200001,oops,extra field\n200002,end\n").expect("write b");

    let engine = Engine::new().with_base_dir(&dir);
    engine
        .execute_all(&format!(
            "SET 'parallelism' = '1';
             SET 'checkpoint.interval' = '20ms';
             SET 'checkpoint.dir' = '{}';
             SET 'restart.backoff' = '1s';
             CREATE TABLE src (n BIGINT, s STRING) WITH ('connector' = 'filesystem', 'path' = 'in', 'format' = 'csv');
             CREATE TABLE out (n BIGINT, s STRING) WITH ('connector' = 'filesystem', 'path' = 'out', 'format' = 'csv');",
            dir.join("checkpoints").display()
        ))
        .await
        .expect("setup");
    let job = engine.submit("INSERT INTO out SELECT n, upper(s) FROM src").await.expect("submit");

    // The job fails on b.csv line 2 and waits to restart: fix the file meanwhile.
    let deadline = Instant::now() + Duration::from_secs(30);
    while job.status().restarts == 0 {
        assert!(Instant::now() < deadline, "the job never failed");
        assert!(matches!(job.state(), JobState::Running), "job ended: {}", job.state().name());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    std::fs::write(dir.join("in/b.csv"), "200000,last rows\n200001,fixed\n200002,end\n").expect("fix b");
    job.wait().await.expect("the restarted job finishes");
    let status = job.status();
    assert_eq!(status.restarts, 1);
    assert!(!status.checkpoints.is_empty(), "no checkpoint before the failure");

    let got = published(&dir.join("out"));
    let mut want: Vec<String> = (0..200_000).map(|i| format!("{i},ROW {i}")).collect();
    want.extend(["200000,LAST ROWS".to_string(), "200001,FIXED".to_string(), "200002,END".to_string()]);
    want.sort();
    assert_eq!(got.len(), want.len(), "rows lost or written twice");
    assert!(got == want, "rows differ");
}

/// A RocksDB job that ran to its end resumes at its end: the final checkpoint names the
/// shared files of tasks' final states (they were pruned once, and the second run failed with
/// "cannot copy … .sst"), and the second run adds no row.
#[test]
fn a_finished_job_with_rocksdb_state_runs_again_from_its_final_checkpoint() {
    let dir = crate::slt::tempdir();
    let sql = format!(
        "SET 'parallelism' = '2';
SET 'state.backend' = 'rocksdb';
SET 'state.dir' = '{state}';
SET 'checkpoint.interval' = '200ms';
SET 'checkpoint.dir' = '{ck}';
CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP(3), WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
  WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '1000000', 'rate' = '1000000');
CREATE TABLE out (auction BIGINT, window_end TIMESTAMP(3), cnt BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv');
INSERT INTO out
SELECT auction, window_end, COUNT(*)
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
GROUP BY auction, window_start, window_end;
",
        state = dir.join("state").display(),
        ck = dir.join("checkpoints").display(),
        out = dir.join("out").display(),
    );
    std::fs::write(dir.join("job.sql"), sql).expect("write sql");
    let run =
        || std::process::Command::new(crate::weir_bin()).arg("run").arg(dir.join("job.sql")).output().expect("run");
    let first = run();
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let rows = published(&dir.join("out"));
    assert!(rows.len() > 1000, "{} rows", rows.len());
    let again = run();
    assert!(again.status.success(), "second run: {}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(published(&dir.join("out")), rows, "the second run changed the output");
}

/// Two queries with RocksDB state at once, of two engines in one process: each opens a
/// database of its own (they shared `<state.dir>/stage1-task0-op0`, and the second failed on
/// the first's lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_with_rocksdb_state_at_once_each_have_their_own() {
    let dir = crate::slt::tempdir();
    let setup = |events: &str, rate: &str| {
        format!(
            "SET 'state.backend' = 'rocksdb'; SET 'state.dir' = '{}';
             CREATE TABLE bid (auction BIGINT, price BIGINT)
               WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '{events}'{rate});",
            dir.display()
        )
    };
    let query = "SELECT auction, COUNT(*) AS c FROM bid GROUP BY auction";
    let long = weir::Engine::new();
    long.execute_all(&setup("100000000", ", 'rate' = '1000'")).await.expect("setup");
    let Some(weir::Outcome::Query(running)) = long.execute_all(query).await.expect("query").pop() else {
        panic!("a query")
    };
    // Until it has state (its database is open).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while running.job().status().operators.iter().all(|o| o.rows_in == 0 || !o.name.starts_with("GroupAggregate")) {
        assert!(std::time::Instant::now() < deadline, "the first query never ran (hang guard)");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let short = weir::Engine::new();
    short.execute_all(&setup("5000", "")).await.expect("setup");
    let Some(weir::Outcome::Query(stream)) = short.execute_all(query).await.expect("query").pop() else {
        panic!("a query")
    };
    let changes = stream.collect_changes().await.expect("the second query, beside the first");
    let counted: i64 = changes
        .iter()
        .flat_map(|c| {
            use weir::arrow::array::AsArray;
            let counts = c.batch.column(1).as_primitive::<weir::arrow::datatypes::Int64Type>().clone();
            c.ops().into_iter().enumerate().map(move |(i, op)| op.sign() * counts.value(i))
        })
        .sum();
    assert_eq!(counted, 4600, "every bid of the first 5000 events (92% are bids) counted once");
    running.job().cancel();
}

//! Processing-time windows on a live stream: windows close by the wall clock while the job
//! runs, on a quiet input and with a task that has no data at all (two tasks, one Kafka
//! partition), without checkpoints to carry the clock along.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::kafka::{write_sql, Broker};
use crate::weir_bin;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processing_time_windows_close_on_a_quiet_stream() {
    windows_close("SELECT *, PROCTIME() AS p_time FROM clicks").await;
}

/// The same after a union, whose other input never has a row: the watermark is stamped in
/// the task that merges them, which waits on its timer beside its inputs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processing_time_windows_close_after_a_union_with_an_empty_input() {
    windows_close("SELECT *, PROCTIME() AS p_time FROM (SELECT * FROM clicks UNION ALL SELECT * FROM quiet)").await;
}

async fn windows_close(view: &str) {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    broker.create_topic("clicks", 1).await;
    broker.create_topic("quiet", 1).await;
    let records: Vec<(&str, i32, String, Option<i64>)> =
        (0..5).map(|i| ("clicks", 0, format!("{{\"user_id\": {}}}", i % 2), None)).collect();
    broker.produce(&records);
    let sql = format!(
        "SET 'parallelism' = '2';
CREATE TABLE clicks (user_id BIGINT)
  WITH ('connector' = 'kafka', 'topic' = 'clicks', 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'json',
        'scan.startup.mode' = 'earliest-offset');
CREATE TABLE quiet (user_id BIGINT)
  WITH ('connector' = 'kafka', 'topic' = 'quiet', 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'json',
        'scan.startup.mode' = 'earliest-offset');
CREATE VIEW seen AS {view};
CREATE TABLE counts (user_id BIGINT, n BIGINT) WITH ('connector' = 'print');
INSERT INTO counts SELECT user_id, COUNT(*) FROM TABLE(TUMBLE(TABLE seen, DESCRIPTOR(p_time), INTERVAL '1' SECOND))
GROUP BY user_id, window_start, window_end;",
        bootstrap = broker.bootstrap
    );
    let out = dir.join("out.txt");
    let mut child = Command::new(weir_bin())
        .arg("run")
        .arg(write_sql(&dir, "clicks.sql", sql))
        .stdout(std::fs::File::create(&out).expect("out file"))
        .stderr(Stdio::null())
        .spawn()
        .expect("start weir");
    // Every record counted once, in windows that closed while the job goes on.
    let counted = |text: &str| -> i64 {
        text.lines()
            .filter_map(|l| l.strip_prefix("+I[")?.strip_suffix(']')?.split_once(", ")?.1.parse::<i64>().ok())
            .sum()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut text = String::new();
    while counted(&text) < 5 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        text.clear();
        std::fs::File::open(&out).expect("open").read_to_string(&mut text).expect("read");
    }
    let running = child.try_wait().expect("poll").is_none();
    child.kill().expect("kill");
    child.wait().expect("reap");
    assert!(running, "the unbounded job ended");
    assert_eq!(counted(&text), 5, "window rows printed while the job ran:\n{text}");
}

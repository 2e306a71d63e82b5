//! A server that ends transactions idle for longer than a moment
//! (`idle_in_transaction_session_timeout`): the exactly-once sink's transaction stays open
//! between writes until its checkpoint's barrier, so its sessions lift that timeout, and the
//! job runs without a session ended and rewritten.

use std::process::Command;

use crate::kafka::write_sql;
use crate::postgres::{bids, servers, sink};
use crate::weir_bin;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sink_outlives_the_servers_idle_transaction_timeout() {
    let dir = crate::slt::tempdir();
    let (broker, pg) = servers(&dir).await;
    pg.psql("ALTER SYSTEM SET idle_in_transaction_session_timeout = '100ms'");
    pg.psql("SELECT pg_reload_conf()");
    assert_eq!(pg.psql("SHOW idle_in_transaction_session_timeout"), vec!["100ms".to_string()]);
    pg.psql("CREATE TABLE per_auction (auction bigint PRIMARY KEY, bids bigint NOT NULL)");
    // The first 600 bids, at 150 a second per task, written every 20 rows: the transaction
    // is open and idle for longer than 100 ms between writes, before each 1 s checkpoint
    // prepares it.
    let sql = format!(
        "SET 'parallelism' = '2';
SET 'checkpoint.interval' = '1s';
SET 'checkpoint.dir' = '{}';
SET 'restart.attempts' = '0';
{}
{}
INSERT INTO per_auction SELECT auction, COUNT(*) FROM bids GROUP BY auction;",
        dir.join("checkpoints").display(),
        bids(&broker, Some(150)).replace(
            "'scan.bounded.mode' = 'latest-offset'",
            "'scan.bounded.mode' = 'specific-offsets', \
             'scan.bounded.specific-offsets' = 'partition:0,offset:300;partition:1,offset:300'"
        ),
        sink(&pg, "per_auction", "auction BIGINT, bids BIGINT, PRIMARY KEY (auction) NOT ENFORCED", "exactly-once")
            .replace("'sink.delivery-guarantee'", "'sink.buffer-flush.max-rows' = '20', 'sink.delivery-guarantee'"),
    );
    let out = Command::new(weir_bin()).arg("run").arg(write_sql(&dir, "job.sql", sql)).output().expect("weir run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("retry"), "a session was ended under the sink:\n{stderr}");
    assert_eq!(pg.psql("SELECT sum(bids) FROM per_auction"), vec!["600".to_string()]);
    assert_eq!(pg.psql("SELECT count(*) FROM pg_prepared_xacts"), vec!["0".to_string()]);
}

//! An OVER aggregate, a semi join and a MATCH_RECOGNIZE under crashes: Kafka `bids` -> each
//! bid's count and sum over its auction's last second (a RANGE frame) -> kept only for
//! auctions that ever had a bid over 1,000,000 (a semi join over append-only inputs, so
//! append-only), and beside it each run of rising prices per auction within 10 seconds (a
//! MATCH_RECOGNIZE; bids have distinct times, so its order is the same in every run) -> Kafka `out`,
//! exactly-once, while `weir run` is SIGKILLed at least 3 times in each phase of the
//! two-phase commit and 20 times in all. A `read_committed` reader then sees exactly the rows
//! of an uninterrupted run: none lost, none twice.

use crate::kafka::{job, load_bids, run_to_end, write_sql, Broker};

/// The windowed job of the Kafka tests, its query replaced by the OVER aggregate and the
/// semi join, and the MATCH_RECOGNIZE (into the same columns: auction, a time, a count, a
/// price or sum).
fn over_job(bootstrap: &str, out: &str, delivery: &str, checkpoints: &std::path::Path, rate: Option<u32>) -> String {
    let sql = job(bootstrap, out, delivery, checkpoints, rate);
    let (head, _) = sql.split_once("INSERT INTO").expect("the job's INSERT");
    format!(
        "{head}INSERT INTO {out}
SELECT o.auction, o.date_time, o.c, o.s FROM (
  SELECT auction, date_time, COUNT(*) OVER w AS c, SUM(price) OVER w AS s FROM bids
  WINDOW w AS (PARTITION BY auction ORDER BY date_time RANGE BETWEEN INTERVAL '1' SECOND PRECEDING AND CURRENT ROW)
) o WHERE o.auction IN (SELECT auction FROM bids WHERE price > 1000000)
UNION ALL
SELECT auction, t, nb, c FROM bids MATCH_RECOGNIZE (PARTITION BY auction ORDER BY date_time
  MEASURES MATCH_ROWTIME() AS t, COUNT(B.price) AS nb, C.price AS c AFTER MATCH SKIP PAST LAST ROW
  PATTERN (A B+? C) WITHIN INTERVAL '10' SECOND DEFINE B AS B.price > LAST(A.price), C AS C.price > LAST(B.price)) AS m;
"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_aggregate_a_semi_join_and_a_match_recognize_go_exactly_once_through_crashes() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    load_bids(&broker, 20_000).await;
    for topic in ["reference", "out"] {
        broker.create_topic(topic, 2).await;
    }
    run_to_end(&write_sql(
        &dir,
        "reference.sql",
        over_job(&broker.bootstrap, "reference", "none", &dir.join("ref"), None),
    ));
    let want = broker.read_committed("reference");
    assert!(want.len() > 1000, "reference has {} rows", want.len());

    // Slow enough to be killed many times before the end: 2 tasks x 700 records/s.
    let checkpoints = dir.join("checkpoints");
    let sql = write_sql(&dir, "job.sql", over_job(&broker.bootstrap, "out", "exactly-once", &checkpoints, Some(700)));
    let faults = dir.join("faults");
    crate::kills::kill_in_every_phase(&sql, &faults, "kafka", 20);
    run_to_end(&sql);
    // Rows of one auction and time may repeat (two bids in one millisecond): compared as
    // multisets, sorted.
    let got = broker.read_committed("out");
    assert_eq!(got.len(), want.len(), "row count differs from the uninterrupted run");
    assert!(got == want, "rows differ from the uninterrupted run");
}

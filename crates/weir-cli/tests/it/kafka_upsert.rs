//! `upsert-kafka`: an updating aggregate from Kafka written by key, exactly once, as a
//! `weir run` process killed with SIGKILL in every phase of the two-phase commit. The topic,
//! read `read_committed` and reduced to each key's last record (a tombstone deletes the key),
//! holds exactly the rows of a run that was never killed.

use std::collections::BTreeMap;
use std::path::Path;

use crate::kafka::{bids_table, load_bids, run_to_end, write_sql, Broker};
use crate::kills::{in_phase, kill_in_phases, start, Phase, PHASES};

/// Kafka `bids` -> bids per auction -> auctions per bid count, upserted by the count into
/// `out`. As counts grow, auctions leave their count's group: groups empty (tombstones) and
/// MIN/MAX take values back.
fn job(bootstrap: &str, out: &str, delivery: &str, checkpoints: &Path, rate: Option<u32>) -> String {
    let rate = rate.map(|r| format!(", 'scan.records-per-second' = '{r}'")).unwrap_or_default();
    format!(
        "SET 'parallelism' = '2';
SET 'checkpoint.interval' = '100ms';
SET 'checkpoint.dir' = '{ck}';
SET 'restart.attempts' = '0';
{bids};
CREATE TABLE {out} (n BIGINT, auctions BIGINT, lowest BIGINT, highest BIGINT, PRIMARY KEY (n) NOT ENFORCED)
  WITH ('connector' = 'upsert-kafka', 'topic' = '{out}', 'properties.bootstrap.servers' = '{bootstrap}',
        'key.format' = 'json', 'value.format' = 'json',
        'sink.delivery-guarantee' = '{delivery}', 'sink.transactional-id-prefix' = 'weir-{out}');
INSERT INTO {out}
SELECT n, COUNT(*), MIN(auction), MAX(auction) FROM (SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction)
GROUP BY n;
",
        ck = checkpoints.display(),
        bids = bids_table(bootstrap, "bids", &rate),
    )
}

/// The table a topic of upserts holds: each key's last value, tombstones applied; and the
/// number of tombstones seen.
fn reduce(records: Vec<(Option<String>, Option<String>)>) -> (BTreeMap<String, String>, usize) {
    let mut table = BTreeMap::new();
    let mut tombstones = 0;
    for (key, value) in records {
        let key = key.expect("an upsert record without a key");
        match value {
            Some(v) => {
                table.insert(key, v);
            }
            None => {
                tombstones += 1;
                table.remove(&key);
            }
        }
    }
    (table, tombstones)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upsert_kafka_is_exactly_once_under_sigkill_in_every_phase() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    load_bids(&broker, 20_000).await;
    broker.create_topic("reference", 2).await;
    broker.create_topic("out", 2).await;
    run_to_end(&write_sql(
        &dir,
        "reference.sql",
        job(&broker.bootstrap, "reference", "none", &dir.join("ref-ck"), None),
    ));
    let (want, tombstones) = reduce(broker.read_committed_records("reference"));
    assert!(want.len() > 5, "reference has {} keys", want.len());
    assert!(tombstones > 0, "no group of the reference was ever emptied");
    // Each key's value is the final row: {"n":…,"auctions":…,…}; the counts add up to the
    // auctions of the input.
    let auctions: u64 = want
        .values()
        .map(|v| v.split("\"auctions\":").nth(1).and_then(|r| r.split([',', '}']).next()).expect("auctions"))
        .map(|n| n.parse::<u64>().expect("a count"))
        .sum();
    assert!(auctions > 100, "{auctions} auctions");

    let checkpoints = dir.join("checkpoints");
    let sql = write_sql(&dir, "job.sql", job(&broker.bootstrap, "out", "exactly-once", &checkpoints, Some(700)));
    let faults = dir.join("faults");
    kill_in_phases(
        &PHASES,
        Phase::Processing,
        3,
        20,
        |phase| start(&sql, phase, &faults, "kafka"),
        |phase| in_phase(phase, &checkpoints, &faults, "kafka"),
    );
    run_to_end(&sql);
    let (got, _) = reduce(broker.read_committed_records("out"));
    assert_eq!(got.len(), want.len(), "keys differ in number from the uninterrupted run");
    assert!(got == want, "rows differ from the uninterrupted run");
}

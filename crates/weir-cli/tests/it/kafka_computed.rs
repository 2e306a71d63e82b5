//! Computed columns at a Kafka source, under crashes: the event time is computed from an
//! epoch field (`ts AS TO_TIMESTAMP_LTZ(event_ms, 3)`) and carries the watermark; a 1 s
//! tumbling window over it goes exactly once into Kafka while the job is killed in every
//! phase of the two-phase commit. The rows equal those of the same window over a table whose
//! time column is stored, run without crashes.

use crate::kafka::{bids_table, job, run_to_end, with_reference, write_sql, Broker};
use crate::kills::{assert_same_rows, in_phase, kill_in_phases, start, Phase, PHASES};

/// The bids of topic `bids`, copied to topic `clicks` with their time as epoch milliseconds.
async fn load_clicks(broker: &Broker) {
    broker.create_topic("clicks", 2).await;
    let engine = weir::Engine::new();
    crate::run(
        &engine,
        &format!(
            "SET 'parallelism' = '1';
             {bids};
             CREATE TABLE clicks (auction BIGINT, bidder BIGINT, price BIGINT, event_ms BIGINT)
               WITH ('connector' = 'kafka', 'topic' = 'clicks', 'properties.bootstrap.servers' = '{bootstrap}',
                     'format' = 'json', 'key.fields' = 'auction');
             INSERT INTO clicks SELECT auction, bidder, price, CAST(date_time AS BIGINT) FROM bids;",
            bids = bids_table(&broker.bootstrap, "bids", ""),
            bootstrap = broker.bootstrap,
        ),
    )
    .await;
}

/// The windowed job of the Kafka tests over `clicks`, whose event time is computed.
fn computed_job(bootstrap: &str, out: &str, checkpoints: &std::path::Path, rate: Option<u32>) -> String {
    let sql = job(bootstrap, out, "exactly-once", checkpoints, rate);
    let extra = rate.map(|r| format!(", 'scan.records-per-second' = '{r}'")).unwrap_or_default();
    let stored = bids_table(bootstrap, "bids", &extra);
    let computed = stored
        .replace("CREATE TABLE bids", "CREATE TABLE clicks")
        .replace("'topic' = 'bids'", "'topic' = 'clicks'")
        .replace("date_time TIMESTAMP(3),", "event_ms BIGINT, ts AS TO_TIMESTAMP_LTZ(event_ms, 3),")
        .replace("WATERMARK FOR date_time AS date_time", "WATERMARK FOR ts AS ts");
    assert!(
        sql.contains(&stored) && computed.contains("ts AS TO_TIMESTAMP_LTZ"),
        "the job's source is not as expected"
    );
    let sql =
        sql.replace(&stored, &computed).replace("TABLE bids, DESCRIPTOR(date_time)", "TABLE clicks, DESCRIPTOR(ts)");
    assert!(sql.contains("DESCRIPTOR(ts)"), "the job's window is not as expected");
    sql
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_computed_event_time_goes_exactly_once_through_crashes() {
    // The reference: the window over the stored time column, uninterrupted.
    let (dir, broker, want) = with_reference().await;
    load_clicks(&broker).await;
    assert_eq!(broker.read_committed("clicks").len(), 18_400, "clicks loaded");

    // Uninterrupted over the computed column: the same rows.
    broker.create_topic("plain", 2).await;
    run_to_end(&write_sql(&dir, "plain.sql", computed_job(&broker.bootstrap, "plain", &dir.join("plain"), None)));
    assert!(broker.read_committed("plain") == want, "the computed event time gives other windows");

    // Killed over and over (slowed to 2 tasks x 700 records/s), then run to the end, into
    // topic `out` (empty).
    let checkpoints = dir.join("checkpoints");
    let sql = write_sql(&dir, "job.sql", computed_job(&broker.bootstrap, "out", &checkpoints, Some(700)));
    let faults = dir.join("faults");
    let kills = kill_in_phases(
        &PHASES,
        Phase::Processing,
        3,
        16,
        |phase| start(&sql, phase, &faults, "kafka"),
        |phase| in_phase(phase, &faults, "kafka"),
    );
    println!("kills per phase: {kills:?}");
    run_to_end(&sql);
    assert_same_rows(&broker.read_committed("out"), &want);
}

//! `weir verify`: the shipped examples and a Kafka → window → exactly-once Kafka job pass;
//! a job filtering on `RANDOM()`, one windowing by `PROCTIME()` and one writing Kafka at
//! least once without a key fail, each naming its cause. The jobs' own sinks stay empty.

use std::path::Path;
use std::process::Command;

use crate::kafka::{load_bids, write_sql, Broker};
use crate::{repo, weir_bin};

/// `weir verify FILE --crashes N`: exit code and everything it printed.
fn verify(sql: &Path, crashes: u32) -> (i32, String) {
    let out = Command::new(weir_bin())
        .arg("verify")
        .arg(sql)
        .arg("--crashes")
        .arg(crashes.to_string())
        .output()
        .expect("weir verify");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn verify_passes_on_the_shipped_example() {
    let (code, out) = verify(&repo().join("examples/quickstart.sql"), 4);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("table 'console' (print): exactly-once: 4 crashes in 1 phase (processing 4), 16 rows identical"),
        "{out}"
    );
    // The console itself was not written: the rows went to scratch files.
    assert!(!out.contains("+I["), "{out}");
}

/// Files verify cannot check exit 2 with the reason; nothing is run.
#[test]
fn verify_refuses_what_it_cannot_check() {
    let dir = crate::slt::tempdir();
    let file = |name: &str, sql: &str| write_sql(&dir, name, sql.to_string());
    let tables = format!(
        "CREATE TABLE gen (auction BIGINT, price BIGINT) WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '100');
CREATE TABLE a (auction BIGINT, price BIGINT) WITH ('connector' = 'filesystem', 'path' = '{a}', 'format' = 'csv');
CREATE TABLE b (auction BIGINT, price BIGINT) WITH ('connector' = 'filesystem', 'path' = '{b}', 'format' = 'csv');",
        a = dir.join("a").display(),
        b = dir.join("b").display()
    );
    let (code, out) = verify(&file("none.sql", &format!("{tables}\nSELECT * FROM gen;")), 2);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("cannot verify: the file has no INSERT INTO: no job to verify"), "{out}");
    let chained = format!("{tables}\nINSERT INTO a SELECT * FROM gen;\nINSERT INTO b SELECT * FROM a;");
    let (code, out) = verify(&file("chained.sql", &chained), 2);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("cannot verify: table 'a' is both written and read by the file's jobs"), "{out}");
    let (code, out) = verify(&file("typo.sql", &format!("{tables}\nINSERT INTO a SELECT nosuch FROM gen;")), 2);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("typo.sql:4:22: INSERT INTO a: Schema error: No field named nosuch"), "{out}");
    assert!(!dir.join("a").exists() && !dir.join("b").exists());
}

/// Kafka `bids` (3,680 bids over 2 partitions, read at 1,500 records/s per task) through
/// `select`, into Kafka table `out` declared with `sink`; checkpoints every 100 ms.
fn kafka_job(broker: &Broker, dir: &Path, select: &str, out_columns: &str, sink: &str, views: &str) -> String {
    let bootstrap = &broker.bootstrap;
    format!(
        "SET 'parallelism' = '2';
SET 'checkpoint.interval' = '100ms';
SET 'checkpoint.dir' = '{ck}';
CREATE TABLE bids (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3),
    WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND)
  WITH ('connector' = 'kafka', 'topic' = 'bids', 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'json',
        'scan.startup.mode' = 'earliest-offset', 'scan.records-per-second' = '1500');
CREATE TABLE out ({out_columns})
  WITH ('connector' = 'kafka', 'topic' = 'out', 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'json'{sink});
{views}
INSERT INTO out {select};
",
        ck = dir.join("checkpoints").display(),
    )
}

const WINDOWED: &str = "SELECT auction, window_start, COUNT(*), SUM(price)
FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(date_time), INTERVAL '1' SECOND))
GROUP BY auction, window_start, window_end";
const WINDOW_COLUMNS: &str = "auction BIGINT, window_start TIMESTAMP(3), cnt BIGINT, total BIGINT";
const EXACTLY_ONCE: &str = ", 'sink.delivery-guarantee' = 'exactly-once', 'sink.transactional-id-prefix' = 'weir-out'";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_proves_a_kafka_window_job_and_names_the_cause_of_each_pitfall() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    load_bids(&broker, 4_000).await;
    broker.create_topic("out", 2).await;

    // Kafka → window → exactly-once Kafka: the same rows after crashes in every phase.
    let sql = write_sql(&dir, "windowed.sql", kafka_job(&broker, &dir, WINDOWED, WINDOW_COLUMNS, EXACTLY_ONCE, ""));
    let (code, out) = verify(&sql, 8);
    assert_eq!(code, 0, "{out}");
    // Which phases a crash lands in depends on timing; each is tried in turn.
    assert!(out.contains("table 'out' (kafka): exactly-once: 8 crashes in "), "{out}");
    assert!(
        out.contains("pre-committed") && out.contains("committing") && out.contains(", 450 rows identical"),
        "{out}"
    );
    // A pass removes its scratch topics.
    assert_eq!(scratch_topics(&broker), Vec::<String>::new());

    // Per auction into upsert-kafka at least once: replays rewrite each key's value, and the
    // changelog read back (each key's last value) is the same. A bare SELECT in the file is
    // not run.
    let upsert =
        kafka_job(&broker, &dir, "SELECT auction, COUNT(*), MAX(price) FROM bids GROUP BY auction", "", "", "")
            .replace(
                "CREATE TABLE out ()\n  WITH ('connector' = 'kafka', 'topic' = 'out',",
                "CREATE TABLE out (auction BIGINT, n BIGINT, top BIGINT, PRIMARY KEY (auction) NOT ENFORCED)\n  WITH \
             ('connector' = 'upsert-kafka', 'topic' = 'out', 'key.format' = 'json', 'value.format' = 'json',",
            )
            .replace(", 'format' = 'json');", ");\nSELECT * FROM bids;");
    let (code, out) = verify(&write_sql(&dir, "upsert.sql", upsert), 6);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("table 'out' (upsert-kafka): exactly-once: 6 crashes in "), "{out}");
    assert!(out.contains(", 237 rows identical"), "{out}");

    // Bids appended to Kafka at least once, without a key: replays duplicate rows.
    let at_least_once = ", 'sink.delivery-guarantee' = 'at-least-once'";
    let copied = "SELECT auction, bidder, price, date_time FROM bids";
    let columns = "auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3)";
    let sql = write_sql(&dir, "alo.sql", kafka_job(&broker, &dir, copied, columns, at_least_once, ""));
    let (code, out) = verify(&sql, 8);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("table 'out' (kafka): NOT exactly-once"), "{out}");
    assert!(
        out.contains("cause: an at-least-once sink without a key: table 'out' gets the rows a replay writes again"),
        "{out}"
    );

    // A filter on RANDOM(): another half of the bids each run.
    let sampled = "SELECT auction, bidder, price, date_time FROM bids WHERE RANDOM() < 0.5";
    let sql = write_sql(&dir, "random.sql", kafka_job(&broker, &dir, sampled, columns, EXACTLY_ONCE, ""));
    let (code, out) = verify(&sql, 4);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("table 'out' (kafka): NOT exactly-once"), "{out}");
    assert!(out.contains("cause: a non-deterministic function (RANDOM()) decides the filter random() < 0.5"), "{out}");

    // Windows of processing time (Nexmark q12's form): a replay counts other rows per window.
    let view = "CREATE VIEW B AS SELECT *, PROCTIME() AS p_time FROM bids;";
    let q12 = "SELECT bidder, COUNT(*), window_start, window_end
FROM TABLE(TUMBLE(TABLE B, DESCRIPTOR(p_time), INTERVAL '1' SECOND))
GROUP BY bidder, window_start, window_end";
    let columns = "bidder BIGINT, bid_count BIGINT, starttime TIMESTAMP(3), endtime TIMESTAMP(3)";
    let sql = write_sql(&dir, "q12.sql", kafka_job(&broker, &dir, q12, columns, EXACTLY_ONCE, view));
    let (code, out) = verify(&sql, 4);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("table 'out' (kafka): NOT exactly-once"), "{out}");
    assert!(out.contains("cause: processing time (PROCTIME()) decides the windows of TUMBLE(1000 ms)"), "{out}");

    // Every run wrote into its own scratch topics: the jobs' own topic is as it was.
    assert_eq!(broker.read_committed("out"), Vec::<String>::new());
}

/// Kafka bids into PostgreSQL: per-auction upserts by key, exactly once and at least once
/// (idempotent: enough), both pass with crashes in every phase, between commits included;
/// bids appended at least once without a key fail. Scratch schemas are dropped afterwards
/// and the real table stays empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_copies_postgres_tables_into_scratch_schemas() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    load_bids(&broker, 4_000).await;
    let pg = crate::postgres::Postgres::start(&dir);
    pg.psql("CREATE TABLE per_auction (auction bigint PRIMARY KEY, bids bigint NOT NULL, top bigint)");
    pg.psql("CREATE TABLE bid_log (auction bigint, bidder bigint, price bigint)");
    let job = |name: &str, table: &str, columns: &str, delivery: &str, select: &str| {
        let sql = format!(
            "SET 'parallelism' = '2';
SET 'checkpoint.interval' = '100ms';
SET 'checkpoint.dir' = '{ck}';
CREATE TABLE bids (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3))
  WITH ('connector' = 'kafka', 'topic' = 'bids', 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'json',
        'scan.startup.mode' = 'earliest-offset', 'scan.records-per-second' = '1500');
CREATE TABLE {table} ({columns})
  WITH ('connector' = 'jdbc', 'url' = '{url}', 'table-name' = '{table}', 'username' = 'weir',
        'sink.delivery-guarantee' = '{delivery}', 'sink.buffer-flush.max-rows' = '20');
INSERT INTO {table} {select};
",
            ck = dir.join("checkpoints").display(),
            bootstrap = broker.bootstrap,
            url = pg.url(),
        );
        write_sql(&dir, name, sql)
    };
    let per_auction = "SELECT auction, COUNT(*), MAX(price) FROM bids GROUP BY auction";
    let keyed = "auction BIGINT, bids BIGINT, top BIGINT, PRIMARY KEY (auction) NOT ENFORCED";
    for delivery in ["exactly-once", "at-least-once"] {
        let (code, out) = verify(&job(&format!("{delivery}.sql"), "per_auction", keyed, delivery, per_auction), 10);
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("table 'per_auction' (jdbc): exactly-once: 10 crashes in "), "{out}");
        assert!(out.contains(", 237 rows identical"), "{out}");
    }
    let appended = "SELECT auction, bidder, price FROM bids";
    let columns = "auction BIGINT, bidder BIGINT, price BIGINT";
    let (code, out) = verify(&job("log.sql", "bid_log", columns, "at-least-once", appended), 6);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("cause: an at-least-once sink without a key: table 'bid_log'"), "{out}");

    assert_eq!(pg.count("per_auction"), 0);
    assert_eq!(pg.count("bid_log"), 0);
    // The failed run's schemas are kept for a look; the passing runs' are gone.
    let left = pg.psql(
        "SELECT count(DISTINCT split_part(nspname, '_', 3) || '_' || split_part(nspname, '_', 4)) FROM pg_namespace \
         WHERE nspname LIKE 'weir\\_verify\\_%'",
    );
    assert_eq!(left, vec!["1".to_string()], "schemas of the failed verify only: {left:?}");
    assert_eq!(pg.psql("SELECT count(*) FROM pg_prepared_xacts"), vec!["0".to_string()]);
}

/// The broker's topics that `weir verify` made (`weir-verify-…`).
fn scratch_topics(broker: &Broker) -> Vec<String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &broker.bootstrap)
        .set("group.id", "weir-test-topics")
        .create()
        .expect("consumer");
    let metadata = consumer.fetch_metadata(None, std::time::Duration::from_secs(10)).expect("metadata");
    metadata.topics().iter().map(|t| t.name().to_string()).filter(|n| n.starts_with("weir-verify-")).collect()
}

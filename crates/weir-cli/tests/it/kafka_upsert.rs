//! Changelogs in Kafka. `upsert-kafka`: an updating aggregate from Kafka written by key,
//! exactly once, as a `weir run` process killed with SIGKILL in every phase of the two-phase
//! commit; the topic, read `read_committed` and reduced to each key's last record (a
//! tombstone deletes the key), holds exactly the rows of a run that was never killed.
//! `debezium-json`: change events read as a changelog and written as one. A regular join of
//! two Kafka topics, written as change events exactly once under SIGKILL in every phase. An
//! anti join over an updating input (auctions leaving as their first high bid comes),
//! upserted exactly once under SIGKILL in every phase.

use std::collections::BTreeMap;
use std::path::Path;

use crate::kafka::{bids_table, load_bids, run_to_end, write_sql, Broker};
use crate::kills::{in_phase, kill_in_phases, start, Phase, PHASES};

/// Kafka `bids` -> bids per auction -> auctions per bid count, upserted by the count into
/// `out`. As counts grow, auctions leave their count's group: groups empty (tombstones) and
/// MIN/MAX take values back.
pub(crate) fn job(bootstrap: &str, out: &str, delivery: &str, checkpoints: &Path, rate: Option<u32>) -> String {
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

/// Kafka `bids` -> each auction's bid count, kept only while the auction has no bid over
/// 5,000,000 (`NOT EXISTS`: an anti join over an updating input, whose rows go when a high
/// bid comes) -> upserted by auction into `out`.
fn anti_job(bootstrap: &str, out: &str, delivery: &str, checkpoints: &Path, rate: Option<u32>) -> String {
    let sql = job(bootstrap, out, delivery, checkpoints, rate);
    let (head, _) = sql.split_once(&format!("CREATE TABLE {out} ")).expect("the job's sink");
    let (_, sink_options) = sql.split_once("  WITH ('connector' = 'upsert-kafka'").expect("the sink's options");
    let (sink_options, _) = sink_options.split_once("INSERT INTO").expect("the INSERT");
    format!(
        "{head}CREATE TABLE {out} (auction BIGINT, n BIGINT, PRIMARY KEY (auction) NOT ENFORCED)
  WITH ('connector' = 'upsert-kafka'{sink_options}INSERT INTO {out}
SELECT c.auction, c.n FROM (SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction) c
WHERE NOT EXISTS (SELECT 1 FROM bids b WHERE b.auction = c.auction AND b.price > 5000000);
"
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

/// `job_of` run over 20,000 bids uninterrupted into topic `reference`, then exactly once into
/// `out` while SIGKILLed at least 3 times in every phase and 20 in all: the reference's
/// table and tombstones, and the killed run's table.
/// `job_of`: a job's SQL from bootstrap servers, sink topic, delivery guarantee, checkpoint
/// directory, records per second (`None`: as fast as it goes).
pub(crate) async fn reference_and_killed(
    job_of: impl Fn(&str, &str, &str, &Path, Option<u32>) -> String,
) -> (BTreeMap<String, String>, usize, BTreeMap<String, String>) {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    load_bids(&broker, 20_000).await;
    broker.create_topic("reference", 2).await;
    broker.create_topic("out", 2).await;
    run_to_end(&write_sql(
        &dir,
        "reference.sql",
        job_of(&broker.bootstrap, "reference", "none", &dir.join("ref-ck"), None),
    ));
    let (want, tombstones) = reduce(broker.read_committed_records("reference"));
    let checkpoints = dir.join("checkpoints");
    let sql = write_sql(&dir, "job.sql", job_of(&broker.bootstrap, "out", "exactly-once", &checkpoints, Some(700)));
    let faults = dir.join("faults");
    kill_in_phases(
        &PHASES,
        Phase::Processing,
        3,
        20,
        |phase| start(&sql, phase, &faults, "kafka"),
        |phase| in_phase(phase, &faults, "kafka"),
    );
    run_to_end(&sql);
    let (got, _) = reduce(broker.read_committed_records("out"));
    (want, tombstones, got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upsert_kafka_is_exactly_once_under_sigkill_in_every_phase() {
    let (want, tombstones, got) = reference_and_killed(job).await;
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
    assert_eq!(got.len(), want.len(), "keys differ in number from the uninterrupted run");
    assert!(got == want, "rows differ from the uninterrupted run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anti_join_over_an_updating_input_is_exactly_once_under_sigkill_in_every_phase() {
    let (want, tombstones, got) = reference_and_killed(anti_job).await;
    assert!(want.len() > 50, "reference has {} keys", want.len());
    assert!(tombstones > 0, "no auction of the reference ever left");
    assert_eq!(got.len(), want.len(), "keys differ in number from the uninterrupted run");
    assert!(got == want, "rows differ from the uninterrupted run");
}

/// `'format' = 'debezium-json'`: change events read as a changelog (creates, snapshot reads,
/// updates with their old row, deletes, a tombstone, an event wrapped with its schema), an
/// aggregate over them, written back as events and read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_json_is_read_and_written_as_a_changelog() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    broker.create_topic("cdc", 1).await;
    broker.create_topic("cdc_out", 1).await;
    let event = |op: &str, before: &str, after: &str| format!(r#"{{"before":{before},"after":{after},"op":"{op}"}}"#);
    let row = |id: i64, k: &str, v: i64| format!(r#"{{"id":{id},"k":"{k}","v":{v}}}"#);
    let events = [
        event("c", "null", &row(1, "a", 10)),
        event("c", "null", &row(2, "b", 5)),
        event("r", "null", &row(3, "a", 1)),
        event("u", &row(1, "a", 10), &row(1, "b", 10)),
        event("d", &row(2, "b", 5), "null"),
        String::new(),
        format!(r#"{{"schema":{{"type":"struct"}},"payload":{}}}"#, event("c", "null", &row(4, "c", 7))),
    ];
    let records: Vec<(&str, i32, String, Option<i64>)> = events.iter().map(|e| ("cdc", 0, e.clone(), None)).collect();
    broker.produce(&records);
    let table = |name: &str, topic: &str, columns: &str, extra: &str| {
        format!(
            "CREATE TABLE {name} ({columns}) WITH ('connector' = 'kafka', 'topic' = '{topic}',
               'properties.bootstrap.servers' = '{}', 'format' = 'debezium-json',
               'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset'{extra})",
            broker.bootstrap
        )
    };
    let engine = weir::Engine::new();
    crate::run(
        &engine,
        &format!(
            "SET 'parallelism' = '1'; {}; {}; {}",
            table("cdc", "cdc", "id BIGINT, k STRING, v BIGINT", ""),
            // One event per batch: the aggregate then emits every intermediate change.
            table("cdc_slow", "cdc", "id BIGINT, k STRING, v BIGINT", ", 'scan.records-per-second' = '20'"),
            table("cdc_out", "cdc_out", "k STRING, total BIGINT, n BIGINT", "")
        ),
    )
    .await;
    let rows = |sql: &'static str| {
        let engine = &engine;
        async move { crate::rows(&engine.query(sql).await.expect(sql).collect().await.expect(sql)) }
    };
    assert_eq!(rows("SELECT id, k, v FROM cdc").await, vec!["1|b|10", "3|a|1", "4|c|7"]);
    let want = vec!["a|1|1", "b|10|1", "c|7|1"];
    assert_eq!(rows("SELECT k, sum(v), count(*) FROM cdc GROUP BY k").await, want);
    crate::run(&engine, "INSERT INTO cdc_out SELECT k, sum(v), count(*) FROM cdc_slow GROUP BY k").await;
    let written = broker.read_committed_records("cdc_out");
    assert!(written.iter().any(|(_, v)| v.as_deref().is_some_and(|v| v.contains(r#""op":"d""#))), "{written:?}");
    assert_eq!(rows("SELECT k, total, n FROM cdc_out").await, want);
}

/// Reading `upsert-kafka`: each record is its key's new row, a tombstone deletes the key;
/// the table is each key's latest row, and an aggregate over it takes old rows back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upsert_kafka_is_read_as_each_keys_latest_row() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    broker.create_topic("prices", 2).await;
    let producer: BaseProducer =
        rdkafka::ClientConfig::new().set("bootstrap.servers", &broker.bootstrap).create().expect("producer");
    let records: [(i64, Option<(&str, i64)>); 7] = [
        (1, Some(("a", 10))),
        (2, Some(("b", 5))),
        (3, Some(("a", 1))),
        (1, Some(("b", 20))),
        (2, None),
        (4, None),
        (3, Some(("a", 1))),
    ];
    for (id, row) in records {
        let key = format!(r#"{{"id":{id}}}"#);
        let value = row.map(|(name, price)| format!(r#"{{"id":{id},"name":"{name}","price":{price}}}"#));
        let mut record = BaseRecord::<String, String>::to("prices").key(&key);
        if let Some(v) = &value {
            record = record.payload(v);
        }
        producer.send(record).expect("send");
    }
    producer.flush(std::time::Duration::from_secs(10)).expect("flush");
    let engine = weir::Engine::new();
    crate::run(
        &engine,
        &format!(
            "SET 'parallelism' = '2';
             CREATE TABLE prices (id BIGINT, name STRING, price BIGINT, PRIMARY KEY (id) NOT ENFORCED)
               WITH ('connector' = 'upsert-kafka', 'topic' = 'prices', 'properties.bootstrap.servers' = '{}',
                     'key.format' = 'json', 'value.format' = 'json', 'scan.bounded.mode' = 'latest-offset')",
            broker.bootstrap
        ),
    )
    .await;
    let rows = |sql: &'static str| {
        let engine = &engine;
        async move { crate::rows(&engine.query(sql).await.expect(sql).collect().await.expect(sql)) }
    };
    assert_eq!(rows("SELECT id, name, price FROM prices").await, vec!["1|b|20", "3|a|1"]);
    assert_eq!(rows("SELECT name, sum(price), count(*) FROM prices GROUP BY name").await, vec!["a|1|1", "b|20|1"]);
    assert_eq!(rows("SELECT price FROM prices WHERE name = 'b'").await, vec!["20"]);
}

/// Topic `auctions`: the auctions of the first `events` Nexmark events.
pub(crate) async fn load_auctions(broker: &Broker, events: u64) {
    broker.create_topic("auctions", 2).await;
    let engine = weir::Engine::new();
    crate::run(
        &engine,
        &format!(
            "SET 'parallelism' = '1';
             CREATE TABLE gen (id BIGINT, seller BIGINT, category BIGINT)
               WITH ('connector' = 'nexmark', 'table' = 'auction', 'events' = '{events}');
             {};
             INSERT INTO auctions SELECT * FROM gen;",
            auctions_table(&broker.bootstrap, "")
        ),
    )
    .await;
}

fn auctions_table(bootstrap: &str, extra: &str) -> String {
    format!(
        "CREATE TABLE auctions (id BIGINT, seller BIGINT, category BIGINT)
         WITH ('connector' = 'kafka', 'topic' = 'auctions', 'properties.bootstrap.servers' = '{bootstrap}',
               'format' = 'json', 'key.fields' = 'id', 'scan.startup.mode' = 'earliest-offset',
               'scan.bounded.mode' = 'latest-offset'{extra})"
    )
}

/// Kafka `bids` LEFT JOIN Kafka `auctions` on the auction, as change events into `out`: a
/// bid whose auction is not there yet is written padded, then retracted when it comes.
/// Auctions come slower than bids (`auction_rate` records a second), so that many bids
/// come before their auction.
fn join_job(
    bootstrap: &str,
    out: &str,
    delivery: &str,
    checkpoints: &Path,
    rate: Option<u32>,
    auction_rate: u32,
) -> String {
    let rate = rate.map(|r| format!(", 'scan.records-per-second' = '{r}'")).unwrap_or_default();
    let auction_rate = format!(", 'scan.records-per-second' = '{auction_rate}'");
    format!(
        "SET 'parallelism' = '2';
SET 'checkpoint.interval' = '100ms';
SET 'checkpoint.dir' = '{ck}';
SET 'restart.attempts' = '0';
{bids};
{auctions};
CREATE TABLE {out} (auction BIGINT, price BIGINT, seller BIGINT, category BIGINT)
  WITH ('connector' = 'kafka', 'topic' = '{out}', 'properties.bootstrap.servers' = '{bootstrap}',
        'format' = 'debezium-json', 'sink.delivery-guarantee' = '{delivery}', 'sink.transactional-id-prefix' = 'weir-{out}');
INSERT INTO {out} SELECT b.auction, b.price, a.seller, a.category FROM bids b LEFT JOIN auctions a ON b.auction = a.id;
",
        ck = checkpoints.display(),
        bids = bids_table(bootstrap, "bids", &rate),
        auctions = auctions_table(bootstrap, &auction_rate),
    )
}

/// The rows change events leave: each create adds its row, each delete takes one back.
pub(crate) fn applied_events(records: Vec<(Option<String>, Option<String>)>) -> (BTreeMap<String, i64>, usize) {
    let mut rows: BTreeMap<String, i64> = BTreeMap::new();
    let mut deletes = 0;
    for (_, value) in records {
        let Some(v) = value else { continue };
        let part = |name: &str| -> String {
            let from = v.find(&format!("\"{name}\":")).map(|i| i + name.len() + 3).expect("a debezium field");
            let rest = &v[from..];
            rest[..rest.find('}').map(|i| i + 1).unwrap_or(rest.len())].to_string()
        };
        if v.contains(r#""op":"d""#) {
            deletes += 1;
            *rows.entry(part("before")).or_default() -= 1;
        } else {
            *rows.entry(part("after")).or_default() += 1;
        }
    }
    assert!(rows.values().all(|n| *n >= 0), "a row deleted more often than created");
    rows.retain(|_, n| *n > 0);
    (rows, deletes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_regular_join_of_two_topics_is_exactly_once_under_sigkill_in_every_phase() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    load_bids(&broker, 20_000).await;
    load_auctions(&broker, 20_000).await;
    broker.create_topic("joined_reference", 2).await;
    broker.create_topic("joined", 2).await;
    run_to_end(&write_sql(
        &dir,
        "reference.sql",
        join_job(&broker.bootstrap, "joined_reference", "none", &dir.join("ref-ck"), None, 400),
    ));
    let (want, deletes) = applied_events(broker.read_committed_records("joined_reference"));
    assert_eq!(want.values().sum::<i64>(), 18_400, "one joined row per bid");
    // Every bid's auction comes in the end; bids that came first were written padded, and
    // retracted then.
    assert!(!want.keys().any(|r| r.contains(r#""seller":null"#)), "a bid never met its auction");
    assert!(deletes > 0, "no padded row was ever retracted");

    let checkpoints = dir.join("checkpoints");
    let sql =
        write_sql(&dir, "job.sql", join_job(&broker.bootstrap, "joined", "exactly-once", &checkpoints, Some(700), 40));
    let faults = dir.join("faults");
    kill_in_phases(
        &PHASES,
        Phase::Processing,
        3,
        20,
        |phase| start(&sql, phase, &faults, "kafka"),
        |phase| in_phase(phase, &faults, "kafka"),
    );
    run_to_end(&sql);
    let (got, _) = applied_events(broker.read_committed_records("joined"));
    assert_eq!(got.values().sum::<i64>(), 18_400, "rows lost or duplicated");
    assert!(got == want, "rows differ from the uninterrupted run");
}

/// A JSON record's integer field.
fn int_field(json: &str, name: &str) -> i64 {
    json.split(&format!("\"{name}\":"))
        .nth(1)
        .and_then(|r| r.split([',', '}']).next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no integer '{name}' in {json}"))
}

/// A ranking published as Flink publishes one: a Top-2 by price per auction into
/// `upsert-kafka` with `PRIMARY KEY (auction, rn)`. The topic, reduced by key, holds each
/// auction's two highest prices, as computed here from the bids themselves: every displaced
/// rank was overwritten, none left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_top_n_published_by_partition_and_rank_holds_the_final_ranking() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    load_bids(&broker, 3_000).await;
    broker.create_topic("ranking", 2).await;
    let sql = format!(
        "SET 'parallelism' = '2';
{bids};
CREATE TABLE ranking (auction BIGINT, rn BIGINT, price BIGINT, PRIMARY KEY (auction, rn) NOT ENFORCED)
  WITH ('connector' = 'upsert-kafka', 'topic' = 'ranking', 'properties.bootstrap.servers' = '{bootstrap}',
        'key.format' = 'json', 'value.format' = 'json');
INSERT INTO ranking SELECT auction, rn, price FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rn FROM bids) WHERE rn <= 2;
",
        bids = bids_table(&broker.bootstrap, "bids", ""),
        bootstrap = broker.bootstrap,
    );
    run_to_end(&write_sql(&dir, "ranking.sql", sql));

    let mut prices: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (_, value) in broker.read_committed_records("bids") {
        let value = value.expect("a bid");
        prices.entry(int_field(&value, "auction")).or_default().push(int_field(&value, "price"));
    }
    let mut want: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    for (auction, mut p) in prices {
        p.sort_unstable_by(|a, b| b.cmp(a));
        for (rank, price) in p.into_iter().take(2).enumerate() {
            want.insert((auction, rank as i64 + 1), price);
        }
    }
    let (table, _) = reduce(broker.read_committed_records("ranking"));
    let got: BTreeMap<(i64, i64), i64> =
        table.values().map(|v| ((int_field(v, "auction"), int_field(v, "rn")), int_field(v, "price"))).collect();
    assert!(want.len() > 50, "{} ranks", want.len());
    assert_eq!(got.len(), want.len(), "ranks differ in number");
    assert!(got == want, "the published ranking differs from the bids' own");
}

/// A result written by another key than its own, which Flink materializes before the sink
/// (its `SinkUpsertMaterializer`): bid counts per (auction, bidder) while under 3, upserted by
/// auction alone. A group that reaches 3 is deleted, and the auction then shows another of its
/// live groups; an auction with none left is gone. Which live group an auction shows depends
/// on the order changes arrive in (as in Flink); that it shows one, with its final count, and
/// that no auction with a live group is lost, does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_upserted_by_another_key_keeps_each_key_on_a_live_row() {
    use weir::arrow::array::{AsArray, RecordBatch};
    use weir::arrow::datatypes::Int64Type;
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    broker.create_topic("latest", 1).await;
    let gen = "CREATE TABLE gen (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3))
  WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '4000')";
    let sql = format!(
        "SET 'parallelism' = '2';
{gen};
CREATE TABLE latest (auction BIGINT, bidder BIGINT, n BIGINT, PRIMARY KEY (auction) NOT ENFORCED)
  WITH ('connector' = 'upsert-kafka', 'topic' = 'latest', 'properties.bootstrap.servers' = '{bootstrap}',
        'key.format' = 'json', 'value.format' = 'json');
INSERT INTO latest SELECT auction, bidder, COUNT(*) FROM gen GROUP BY auction, bidder HAVING COUNT(*) < 3;
",
        bootstrap = broker.bootstrap,
    );
    run_to_end(&write_sql(&dir, "latest.sql", sql));

    let engine = weir::Engine::new();
    crate::run(&engine, gen).await;
    let batches: Vec<RecordBatch> =
        engine.query("SELECT auction, bidder FROM gen").await.expect("bids").collect().await.expect("bids");
    let mut groups: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    for b in &batches {
        let (auctions, bidders) = (b.column(0).as_primitive::<Int64Type>(), b.column(1).as_primitive::<Int64Type>());
        for i in 0..b.num_rows() {
            *groups.entry((auctions.value(i), bidders.value(i))).or_default() += 1;
        }
    }
    let live: BTreeMap<(i64, i64), i64> = groups.iter().filter(|(_, n)| **n < 3).map(|(k, n)| (*k, *n)).collect();
    let deleted = groups.len() - live.len();
    let (table, _) = reduce(broker.read_committed_records("latest"));
    let got: BTreeMap<i64, (i64, i64)> =
        table.values().map(|v| (int_field(v, "auction"), (int_field(v, "bidder"), int_field(v, "n")))).collect();
    let want_auctions: std::collections::BTreeSet<i64> = live.keys().map(|(a, _)| *a).collect();
    assert!(want_auctions.len() > 50 && deleted > 5, "{} auctions, {deleted} groups deleted", want_auctions.len());
    assert_eq!(got.keys().copied().collect::<std::collections::BTreeSet<_>>(), want_auctions, "auctions differ");
    for (auction, (bidder, n)) in &got {
        assert_eq!(
            live.get(&(*auction, *bidder)),
            Some(n),
            "auction {auction} shows ({bidder}, {n}), not a live group"
        );
    }
}

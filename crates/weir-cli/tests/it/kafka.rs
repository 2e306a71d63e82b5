//! The Kafka connector against a real Kafka-protocol broker on loopback, started by the
//! project's script (`scripts/kafka-broker.sh`). What the sink wrote is read back by an
//! independent `read_committed` consumer (rdkafka directly, not Weir).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::kills::assert_same_rows;
use crate::{repo, weir_bin};

/// A broker for one test, on a free port, with a fresh data directory; stopped on drop.
pub struct Broker {
    pid: u32,
    pub bootstrap: String,
}

impl Broker {
    pub fn start(dir: &Path) -> Broker {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("free port").local_addr().expect("addr").port();
        let out = Command::new(repo().join("scripts/kafka-broker.sh"))
            .arg("start")
            .arg(port.to_string())
            .arg(dir.join("broker"))
            .output()
            .expect("run scripts/kafka-broker.sh");
        assert!(out.status.success(), "broker did not start: {}", String::from_utf8_lossy(&out.stderr));
        let pid = String::from_utf8_lossy(&out.stdout).trim().parse().expect("broker pid");
        Broker { pid, bootstrap: format!("127.0.0.1:{port}") }
    }

    pub async fn create_topic(&self, name: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", &self.bootstrap).create().expect("admin client");
        let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
        let results = admin
            .create_topics([&topic], &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))))
            .await
            .expect("create topics");
        for r in results {
            r.unwrap_or_else(|(t, e)| panic!("create topic {t}: {e:?}"));
        }
    }

    /// Write records directly (rdkafka, not Weir): (topic, partition, value, timestamp ms).
    pub fn produce(&self, records: &[(&str, i32, String, Option<i64>)]) {
        use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
        let producer: BaseProducer =
            ClientConfig::new().set("bootstrap.servers", &self.bootstrap).create().expect("producer");
        for (topic, partition, value, timestamp) in records {
            let mut record = BaseRecord::<(), _>::to(topic).partition(*partition).payload(value);
            if let Some(ts) = timestamp {
                record = record.timestamp(*ts);
            }
            producer.send(record).expect("send");
        }
        producer.flush(Duration::from_secs(10)).expect("flush");
    }

    /// Every record value a `read_committed` consumer sees in `topic`, sorted.
    pub fn read_committed(&self, topic: &str) -> Vec<String> {
        let mut values: Vec<String> =
            self.read_committed_records(topic).into_iter().map(|(_, v)| v.unwrap_or_default()).collect();
        values.sort();
        values
    }

    /// Every record (key, value; `None` for a tombstone's value) a `read_committed` consumer
    /// sees in `topic`, each partition's in order; reads until every partition is at its end.
    pub fn read_committed_records(&self, topic: &str) -> Vec<(Option<String>, Option<String>)> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("group.id", "weir-test-reader")
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .create()
            .expect("consumer");
        let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("metadata");
        let partitions: Vec<i32> =
            metadata.topics().iter().flat_map(|t| t.partitions().iter().map(|p| p.id())).collect();
        let mut list = TopicPartitionList::new();
        let mut ends = BTreeMap::new();
        for p in &partitions {
            list.add_partition_offset(topic, *p, Offset::Beginning).expect("partition");
            let (_, high) = consumer.fetch_watermarks(topic, *p, Duration::from_secs(10)).expect("watermarks");
            ends.insert(*p, high);
        }
        consumer.assign(&list).expect("assign");
        let mut values = Vec::new();
        let mut last_progress = Instant::now();
        loop {
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => {
                    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                    values.push((m.key().map(text), m.payload().map(text)));
                    last_progress = Instant::now();
                }
                // The test broker stops answering for a while when it writes its data out (a
                // large state): librdkafka reports the connections down, then reconnects.
                Some(Err(KafkaError::MessageConsumption(
                    RDKafkaErrorCode::AllBrokersDown | RDKafkaErrorCode::BrokerTransportFailure,
                ))) => last_progress = Instant::now(),
                Some(Err(e)) => panic!("reading {topic}: {e}"),
                None => {
                    let at_end = consumer.position().map(|pos| {
                        pos.elements().iter().all(|e| match e.offset() {
                            Offset::Offset(o) => o >= ends[&e.partition()],
                            _ => ends[&e.partition()] == 0,
                        })
                    });
                    if at_end.unwrap_or(false) || last_progress.elapsed() > Duration::from_secs(5) {
                        break;
                    }
                }
            }
        }
        values
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        // SAFETY: kill only sends a signal to the broker process this test started.
        unsafe {
            libc::kill(self.pid as i32, libc::SIGKILL);
        }
    }
}

pub(crate) fn bids_table(bootstrap: &str, topic: &str, extra: &str) -> String {
    format!(
        "CREATE TABLE {topic} (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3),
           WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND)
         WITH ('connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{bootstrap}',
               'format' = 'json', 'key.fields' = 'auction', 'scan.startup.mode' = 'earliest-offset',
               'scan.bounded.mode' = 'latest-offset'{extra})"
    )
}

/// The windowed job: Kafka `bids` -> 1 s tumbling count and sum per auction -> Kafka `out`.
pub(crate) fn job(bootstrap: &str, out: &str, delivery: &str, checkpoints: &Path, rate: Option<u32>) -> String {
    let rate = rate.map(|r| format!(", 'scan.records-per-second' = '{r}'")).unwrap_or_default();
    format!(
        "SET 'parallelism' = '2';
SET 'checkpoint.interval' = '100ms';
SET 'checkpoint.dir' = '{ck}';
SET 'restart.attempts' = '0';
{bids};
CREATE TABLE {out} (auction BIGINT, window_start TIMESTAMP(3), cnt BIGINT, total BIGINT)
  WITH ('connector' = 'kafka', 'topic' = '{out}', 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'json',
        'key.fields' = 'auction', 'sink.delivery-guarantee' = '{delivery}', 'sink.transactional-id-prefix' = 'weir-{out}');
INSERT INTO {out}
SELECT auction, window_start, COUNT(*), SUM(price)
FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(date_time), INTERVAL '1' SECOND))
GROUP BY auction, window_start, window_end;
",
        ck = checkpoints.display(),
        bids = bids_table(bootstrap, "bids", &rate),
    )
}

/// `events` Nexmark events' bids written to topic `bids` (two partitions, keyed by auction,
/// so each partition is in event-time order).
pub(crate) async fn load_bids(broker: &Broker, events: u64) {
    broker.create_topic("bids", 2).await;
    let engine = weir::Engine::new();
    crate::run(
        &engine,
        &format!(
            "SET 'parallelism' = '1';
             CREATE TABLE gen (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3))
               WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '{events}');
             {};
             INSERT INTO bids SELECT * FROM gen;",
            bids_table(&broker.bootstrap, "bids", "")
        ),
    )
    .await;
}

/// One record per partition of topic `bids` far ahead in event time: every window of the
/// bids before it fires.
pub(crate) fn bids_far_ahead(broker: &Broker) {
    let sample = broker.read_committed("bids").pop().expect("a bid");
    let at = sample.find("\"date_time\":\"").expect("a date_time field") + "\"date_time\":\"".len();
    let ahead = format!("{}2030-01-01 00:00:00.000{}", &sample[..at], &sample[at + 23..]);
    broker.produce(&[("bids", 0, ahead.clone(), None), ("bids", 1, ahead, None)]);
}

/// A broker with 18,400 bids in topic `bids`, an empty topic `out`, and the rows of an
/// uninterrupted run of the windowed job (into topic `reference`).
pub(crate) async fn with_reference() -> (crate::slt::Scratch, Broker, Vec<String>) {
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
    let want = broker.read_committed("reference");
    assert!(want.len() > 1000, "reference has {} rows", want.len());
    (dir, broker, want)
}

pub(crate) fn run_to_end(sql: &Path) {
    let out = Command::new(weir_bin()).arg("run").arg(sql).output().expect("weir run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

pub(crate) fn write_sql(dir: &Path, name: &str, sql: String) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, sql).expect("write sql");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_kafka_to_kafka_matches_a_plain_run() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    load_bids(&broker, 20_000).await;
    assert_eq!(broker.read_committed("bids").len(), 18_400, "bids loaded");
    for (topic, delivery) in [("out_exactly", "exactly-once"), ("out_at_least", "at-least-once"), ("out_none", "none")]
    {
        broker.create_topic(topic, 2).await;
        let sql =
            write_sql(&dir, &format!("{topic}.sql"), job(&broker.bootstrap, topic, delivery, &dir.join(topic), None));
        run_to_end(&sql);
    }
    let want = broker.read_committed("out_none");
    assert!(want.len() > 1000, "only {} window rows", want.len());
    assert_eq!(broker.read_committed("out_exactly"), want);
    assert_eq!(broker.read_committed("out_at_least"), want);
}

/// The sink serves its producers' delivery reports itself (no polling thread): with
/// librdkafka's queue limited to 5 messages, nearly every send finds it full, and only the
/// sink serving the reports makes room. Every guarantee still writes exactly the rows of a run
/// with the default queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_whose_producer_queue_is_full_loses_nothing() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    load_bids(&broker, 4_000).await;
    for (topic, delivery) in
        [("out_default", "none"), ("out_exactly", "exactly-once"), ("out_at_least", "at-least-once")]
    {
        broker.create_topic(topic, 2).await;
        let mut sql = job(&broker.bootstrap, topic, delivery, &dir.join(topic), None);
        if topic != "out_default" {
            let with = "'sink.delivery-guarantee'";
            assert!(sql.contains(with), "the job names its guarantee");
            sql = sql.replace(with, &format!("'properties.queue.buffering.max.messages' = '5', {with}"));
        }
        run_to_end(&write_sql(&dir, &format!("{topic}.sql"), sql));
    }
    let want = broker.read_committed("out_default");
    assert!(want.len() > 200, "only {} window rows", want.len());
    assert_eq!(broker.read_committed("out_exactly"), want);
    assert_eq!(broker.read_committed("out_at_least"), want);
}

/// Kafka -> window -> Kafka, exactly-once, as a `weir run` process killed with SIGKILL over
/// and over, at least 3 times in each phase of the two-phase commit; a read_committed reader
/// then sees exactly the rows of a run that was never killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_under_sigkill_in_every_phase() {
    let (dir, broker, want) = with_reference().await;

    // Slow enough to be killed many times before the end: 2 tasks x 700 records/s.
    let checkpoints = dir.join("checkpoints");
    let sql = write_sql(&dir, "job.sql", job(&broker.bootstrap, "out", "exactly-once", &checkpoints, Some(700)));
    let faults = dir.join("faults");
    crate::kills::kill_in_every_phase(&sql, &faults, "kafka", 20);
    run_to_end(&sql);
    assert_same_rows(&broker.read_committed("out"), &want);
}

/// Completed checkpoints (with a manifest) of the job(s) under `checkpoints`.
fn completed_checkpoints(checkpoints: &Path) -> usize {
    let Ok(jobs) = std::fs::read_dir(checkpoints) else { return 0 };
    jobs.flatten()
        .filter_map(|job| std::fs::read_dir(job.path()).ok())
        .flat_map(|d| d.flatten())
        .filter(|c| c.path().join("manifest.json").exists())
        .count()
}

/// An old instance that keeps running after a new one started from the same checkpoints is
/// fenced: it stops with an error, and nothing it writes becomes visible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_instance_fences_the_old_one() {
    let (dir, broker, want) = with_reference().await;

    let checkpoints = dir.join("checkpoints");
    let sql = write_sql(&dir, "job.sql", job(&broker.bootstrap, "out", "exactly-once", &checkpoints, Some(1000)));
    let old_log = std::fs::File::create(dir.join("old.log")).expect("log");
    let mut old =
        Command::new(weir_bin()).arg("run").arg(&sql).stdout(Stdio::null()).stderr(old_log).spawn().expect("old");
    let deadline = Instant::now() + Duration::from_secs(30);
    while completed_checkpoints(&checkpoints) < 3 {
        assert!(Instant::now() < deadline, "the old instance completed no checkpoints");
        assert!(old.try_wait().expect("poll").is_none(), "the old instance ended too early");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The new instance takes over while the old one is still running.
    let new = Command::new(weir_bin()).arg("run").arg(&sql).output().expect("new instance");
    assert!(new.status.success(), "new instance: {}", String::from_utf8_lossy(&new.stderr));
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = old.try_wait().expect("poll") {
            break status;
        }
        if Instant::now() > deadline {
            old.kill().expect("kill");
            panic!("the old instance was not stopped");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = std::fs::read_to_string(dir.join("old.log")).unwrap_or_default();
    assert!(!status.success(), "the old instance ended successfully: {log}");
    assert!(log.contains("taken over"), "the old instance did not report being fenced: {log}");
    let got = broker.read_committed("out");
    assert_eq!(got.len(), want.len(), "row count differs from an uninterrupted run");
    assert!(got == want, "rows differ from an uninterrupted run");
}

/// At-least-once under SIGKILL: nothing is missing; duplicates are allowed, and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_under_sigkill_loses_nothing() {
    let (dir, broker, want) = with_reference().await;
    let checkpoints = dir.join("checkpoints");
    let sql = write_sql(&dir, "job.sql", job(&broker.bootstrap, "out", "at-least-once", &checkpoints, Some(1000)));
    let mut kills = 0;
    for round in 0..8u64 {
        let mut child = Command::new(weir_bin())
            .arg("run")
            .arg(&sql)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run");
        std::thread::sleep(Duration::from_millis(300 + 97 * round % 400));
        if child.try_wait().expect("poll").is_none() {
            child.kill().expect("SIGKILL");
            kills += 1;
        }
        child.wait().expect("reap");
    }
    run_to_end(&sql);
    let got = broker.read_committed("out");
    let mut distinct = got.clone();
    distinct.dedup();
    println!("at-least-once: {kills} kills, {} rows read, {} duplicates", got.len(), got.len() - distinct.len());
    assert!(kills >= 5, "only {kills} kills");
    assert!(distinct == want, "rows missing or wrong after kills");
}

/// One source task reading two partitions whose event times are far apart: watermarks are
/// per partition (their minimum), so the partition read second has no late rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watermarks_are_per_partition() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    broker.create_topic("events", 2).await;
    // Partition 0: 00:01:00 to 00:01:59; partition 1: 00:00:00 to 00:00:59, one per second.
    let records: Vec<_> = [(0, 1), (1, 0)]
        .into_iter()
        .flat_map(|(partition, minute)| {
            (0..60).map(move |second| {
                let value = format!("{{\"k\": \"p{partition}\", \"ts\": \"2023-01-01 00:0{minute}:{second:02}\"}}");
                ("events", partition, value, None)
            })
        })
        .collect();
    broker.produce(&records);
    let engine = weir::Engine::new();
    crate::run(
        &engine,
        &format!(
            "SET 'parallelism' = '1';
             CREATE TABLE events (k STRING, ts TIMESTAMP(3), WATERMARK FOR ts AS ts)
               WITH ('connector' = 'kafka', 'topic' = 'events', 'properties.bootstrap.servers' = '{}',
                     'format' = 'json', 'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset')",
            broker.bootstrap
        ),
    )
    .await;
    let stream = engine
        .query("SELECT k, COUNT(*) FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) GROUP BY k, window_start, window_end")
        .await
        .expect("query");
    let got = crate::rows(&stream.collect().await.expect("rows"));
    assert_eq!(got, ["p0|60", "p1|60"], "rows were dropped as late");
}

/// `METADATA FROM 'timestamp'` (and partition, offset, topic) come from the record, and the
/// record timestamp can be the event time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_columns_come_from_the_record() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    broker.create_topic("clicks", 2).await;
    // 2023-01-01 00:00:00 UTC = 1672531200000 ms.
    let records: Vec<_> = [(0i64, 0), (1, 1), (2, 0)]
        .into_iter()
        .map(|(i, partition)| ("clicks", partition, format!("{{\"page\": \"p{i}\"}}"), Some(1672531200000 + i * 1500)))
        .collect();
    broker.produce(&records);
    let engine = weir::Engine::new();
    crate::run(
        &engine,
        &format!(
            "SET 'parallelism' = '1';
             CREATE TABLE clicks (page STRING, ts TIMESTAMP(3) METADATA FROM 'timestamp', part INT METADATA FROM 'partition',
                                  off BIGINT METADATA FROM 'offset' VIRTUAL, topic STRING METADATA,
                                  WATERMARK FOR ts AS ts)
               WITH ('connector' = 'kafka', 'topic' = 'clicks', 'properties.bootstrap.servers' = '{}',
                     'format' = 'json', 'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset')",
            broker.bootstrap
        ),
    )
    .await;
    let rows = |sql: &'static str| {
        let engine = &engine;
        async move { crate::rows(&engine.query(sql).await.expect(sql).collect().await.expect(sql)) }
    };
    assert_eq!(
        rows("SELECT page, ts, part, off, topic FROM clicks").await,
        [
            "p0|2023-01-01 00:00:00|0|0|clicks",
            "p1|2023-01-01 00:00:01.500|1|0|clicks",
            "p2|2023-01-01 00:00:03|0|1|clicks"
        ]
    );
    assert_eq!(
        rows("SELECT window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '2' SECOND)) GROUP BY window_start, window_end").await,
        ["2023-01-01 00:00:00|2", "2023-01-01 00:00:02|1"]
    );
}

/// `'topic-pattern'`: every topic whose name matches, partitions of all spread over the tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_pattern_reads_every_matching_topic() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    for topic in ["orders-eu", "orders-us", "payments"] {
        broker.create_topic(topic, 2).await;
    }
    let records: Vec<_> = [("orders-eu", 3), ("orders-us", 5), ("payments", 7)]
        .into_iter()
        .flat_map(|(topic, n)| (0..n).map(move |i| (topic, i % 2, format!("{{\"amount\": {i}}}"), None)))
        .collect();
    broker.produce(&records);
    let engine = weir::Engine::new();
    crate::run(
        &engine,
        &format!(
            "SET 'parallelism' = '2';
             CREATE TABLE orders (amount BIGINT, topic STRING METADATA)
               WITH ('connector' = 'kafka', 'topic-pattern' = 'orders-.*', 'properties.bootstrap.servers' = '{}',
                     'format' = 'json', 'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset')",
            broker.bootstrap
        ),
    )
    .await;
    let stream = engine.query("SELECT topic, amount FROM orders").await.expect("query");
    let got = crate::rows(&stream.collect().await.expect("rows"));
    let mut want: Vec<String> =
        (0..3).map(|i| format!("orders-eu|{i}")).chain((0..5).map(|i| format!("orders-us|{i}"))).collect();
    want.sort();
    assert_eq!(got, want, "payments must not be read, every order must");
}

/// A malformed record fails the job naming topic, partition and offset; with
/// `'format.ignore-parse-errors'` it is skipped and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_records_are_located_or_skipped() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    broker.create_topic("raw", 1).await;
    let records: Vec<_> =
        ["{\"n\": 1}", "{\"n\": oops", "{\"n\": 3}"].into_iter().map(|v| ("raw", 0, v.to_string(), None)).collect();
    broker.produce(&records);
    let engine = weir::Engine::new();
    let table = |name: &str, extra: &str| {
        format!(
            "CREATE TABLE {name} (n BIGINT) WITH ('connector' = 'kafka', 'topic' = 'raw', \
             'properties.bootstrap.servers' = '{}', 'format' = 'json', 'scan.startup.mode' = 'earliest-offset', \
             'scan.bounded.mode' = 'latest-offset'{extra})",
            broker.bootstrap
        )
    };
    crate::run(
        &engine,
        &format!(
            "SET 'parallelism' = '1'; {}; {}",
            table("strict", ""),
            table("lenient", ", 'format.ignore-parse-errors' = 'true'")
        ),
    )
    .await;
    let failed = async { engine.query("SELECT n FROM strict").await?.collect().await }.await;
    let message = failed.expect_err("a malformed record must fail the query").to_string();
    assert!(message.contains("malformed JSON record in topic 'raw' partition 0 at offset 1"), "{message}");
    let rows = crate::rows(&engine.query("SELECT n FROM lenient").await.expect("query").collect().await.expect("rows"));
    assert_eq!(rows, ["1", "3"]);
}

/// With `properties.group.id`, the offsets of completed checkpoints are committed to the
/// consumer group while the job runs, for monitoring (the job itself resumes from its
/// checkpoints, not from them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_checkpoints_commit_offsets_to_the_consumer_group() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    load_bids(&broker, 20_000).await;
    let engine = weir::Engine::new();
    crate::run(
        &engine,
        &format!(
            "SET 'parallelism' = '2'; SET 'checkpoint.interval' = '100ms'; SET 'checkpoint.dir' = '{}';
             SET 'table.dml-sync' = 'true';
             {};
             CREATE TABLE devnull (auction BIGINT) WITH ('connector' = 'blackhole');
             INSERT INTO devnull SELECT auction FROM bids;",
            dir.join("ck").display(),
            bids_table(
                &broker.bootstrap,
                "bids",
                ", 'properties.group.id' = 'monitor', 'scan.records-per-second' = '4000'"
            )
        ),
    )
    .await;
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.bootstrap)
        .set("group.id", "monitor")
        .create()
        .expect("consumer");
    let mut list = TopicPartitionList::new();
    list.add_partition("bids", 0);
    list.add_partition("bids", 1);
    let committed = consumer.committed_offsets(list, Duration::from_secs(10)).expect("committed offsets");
    let mut total = 0;
    for e in committed.elements() {
        let (_, high) = consumer.fetch_watermarks("bids", e.partition(), Duration::from_secs(10)).expect("watermarks");
        if let Offset::Offset(o) = e.offset() {
            assert!(o <= high, "partition {} committed {o} beyond its end {high}", e.partition());
            total += o;
        }
    }
    assert!(total > 0, "no offsets committed to the group: {committed:?}");
}

/// An unbounded Kafka source that has read everything still takes checkpoint barriers, so the
/// exactly-once output of its last windows is committed within about one checkpoint interval
/// though no more data comes. (A source task took barriers only between two batches, and the
/// Kafka source waited inside `next_batch` until data came: nothing was ever committed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_source_still_commits_exactly_once_output() {
    let (dir, broker, want) = with_reference().await;
    bids_far_ahead(&broker);

    let bounded = job(&broker.bootstrap, "out", "exactly-once", &dir.join("checkpoints"), None);
    let unbounded = bounded.replace(",\n               'scan.bounded.mode' = 'latest-offset'", "");
    assert_ne!(bounded, unbounded, "the job's source is still bounded");
    let sql = write_sql(&dir, "unbounded.sql", unbounded.replace("'100ms'", "'1s'"));
    let mut child = Command::new(weir_bin()).arg("run").arg(&sql).stdout(Stdio::null()).stderr(Stdio::null()).spawn();
    let child = child.as_mut().expect("start weir");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut got = Vec::new();
    while Instant::now() < deadline {
        assert!(child.try_wait().expect("poll").is_none(), "the unbounded job ended");
        got = broker.read_committed("out");
        if got.len() >= want.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(got.len(), want.len(), "committed rows after the source went quiet");
    assert!(got == want, "rows differ from the bounded run");
}

/// A run killed after many checkpoints that never completed (each timed out while a RocksDB
/// upload was slowed down) leaves one pre-committed transaction per checkpoint, far more than
/// the next one or two. The restart aborts every one of them, so a read_committed reader is
/// not held back and sees exactly the rows of an uninterrupted run. The restarted run takes
/// few checkpoints, so it does not happen to reuse (and so abort) the dead run's ids itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_of_checkpoints_that_never_completed_are_aborted_on_restart() {
    let (dir, broker, want) = with_reference().await;
    let checkpoints = dir.join("checkpoints");
    let sql = job(&broker.bootstrap, "out", "exactly-once", &checkpoints, Some(700)).replace(
        "SET 'restart.attempts' = '0';",
        &format!(
            "SET 'restart.attempts' = '0';\nSET 'state.backend' = 'rocksdb';\nSET 'state.dir' = '{}';\nSET 'checkpoint.timeout' = '300ms';\nSET 'checkpoint.tolerable-failures' = '100000';",
            dir.join("state").display()
        ),
    );
    let sql = write_sql(&dir, "job.sql", sql);
    let mut child = Command::new(weir_bin())
        .arg("run")
        .arg(&sql)
        .env("WEIR_FAULT_UPLOAD_MS", "3000")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start weir");
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(child.try_wait().expect("poll").is_none(), "the slowed run ended early");
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    assert_eq!(completed_checkpoints(&checkpoints), 0, "a checkpoint completed: the test needs none to");
    // The dead run's pre-committed transactions are open: read_committed sees nothing yet.
    assert!(broker.read_committed("out").is_empty(), "rows visible before the restart");
    let restart = std::fs::read_to_string(&sql).expect("read sql").replace("'100ms'", "'5s'");
    run_to_end(&write_sql(&dir, "restart.sql", restart));
    let got = broker.read_committed("out");
    assert_eq!(got.len(), want.len(), "row count differs from the uninterrupted run");
    assert!(got == want, "rows differ from the uninterrupted run");
}

//! The Kafka connector against a real Kafka-protocol broker on loopback, started by the
//! project's script (`scripts/kafka-broker.sh`). What the sink wrote is read back by an
//! independent `read_committed` consumer (rdkafka directly, not Weir).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

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

    /// Every record value a `read_committed` consumer sees in `topic`, with the number of
    /// records per partition; reads until every partition is at its end.
    pub fn read_committed(&self, topic: &str) -> Vec<String> {
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
                    values.push(String::from_utf8_lossy(m.payload().unwrap_or(&[])).into_owned());
                    last_progress = Instant::now();
                }
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
        values.sort();
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

fn bids_table(bootstrap: &str, topic: &str, extra: &str) -> String {
    format!(
        "CREATE TABLE {topic} (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3),
           WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND)
         WITH ('connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{bootstrap}',
               'format' = 'json', 'key.fields' = 'auction', 'scan.startup.mode' = 'earliest-offset',
               'scan.bounded.mode' = 'latest-offset'{extra})"
    )
}

/// The windowed job: Kafka `bids` -> 1 s tumbling count and sum per auction -> Kafka `out`.
fn job(bootstrap: &str, out: &str, delivery: &str, checkpoints: &Path, rate: Option<u32>) -> String {
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
async fn load_bids(broker: &Broker, events: u64) {
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

fn run_to_end(sql: &Path) {
    let out = Command::new(weir_bin()).arg("run").arg(sql).output().expect("weir run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn write_sql(dir: &Path, name: &str, sql: String) -> PathBuf {
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
    for (topic, delivery) in [("out_exactly", "exactly-once"), ("out_at_least", "at-least-once"), ("out_none", "none")] {
        broker.create_topic(topic, 2).await;
        let sql = write_sql(&dir, &format!("{topic}.sql"), job(&broker.bootstrap, topic, delivery, &dir.join(topic), None));
        run_to_end(&sql);
    }
    let want = broker.read_committed("out_none");
    assert!(want.len() > 1000, "only {} window rows", want.len());
    assert_eq!(broker.read_committed("out_exactly"), want);
    assert_eq!(broker.read_committed("out_at_least"), want);
}

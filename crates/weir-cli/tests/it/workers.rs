//! One job over several `weir worker` processes on loopback, with the test broker and one
//! checkpoint directory they share: the committed output equals a one-process run's, row for
//! row after the changelog is applied, through kills, added workers and a paused one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::kafka::{bids_table, load_bids, run_to_end, write_sql, Broker};
use crate::weir_bin;

/// Bids in the test topic (of 20,000 Nexmark events).
const BIDS: i64 = 18_400;

/// Two jobs in one file, each cut twice: bids per auction, then auctions per bid count
/// (upsert-kafka, an updating aggregate fed an updating one across a cut); and bids joined
/// with their auction (a regular left join, both sides repartitioned, as change events).
fn jobs(bootstrap: &str, suffix: &str, settings: &str, rate: Option<u32>) -> String {
    let rate = rate.map(|r| format!(", 'scan.records-per-second' = '{r}'")).unwrap_or_default();
    format!(
        "{settings}
{bids};
CREATE TABLE auctions (id BIGINT, seller BIGINT, category BIGINT)
  WITH ('connector' = 'kafka', 'topic' = 'auctions', 'properties.bootstrap.servers' = '{bootstrap}',
        'format' = 'json', 'key.fields' = 'id', 'scan.startup.mode' = 'earliest-offset',
        'scan.bounded.mode' = 'latest-offset'{rate});
CREATE TABLE counts{suffix} (n BIGINT, auctions BIGINT, lowest BIGINT, highest BIGINT, PRIMARY KEY (n) NOT ENFORCED)
  WITH ('connector' = 'upsert-kafka', 'topic' = 'counts{suffix}', 'properties.bootstrap.servers' = '{bootstrap}',
        'key.format' = 'json', 'value.format' = 'json', 'sink.delivery-guarantee' = 'exactly-once',
        'sink.transactional-id-prefix' = 'weir-counts{suffix}');
CREATE TABLE joined{suffix} (auction BIGINT, price BIGINT, seller BIGINT, category BIGINT)
  WITH ('connector' = 'kafka', 'topic' = 'joined{suffix}', 'properties.bootstrap.servers' = '{bootstrap}',
        'format' = 'debezium-json', 'sink.delivery-guarantee' = 'exactly-once',
        'sink.transactional-id-prefix' = 'weir-joined{suffix}');
INSERT INTO counts{suffix}
SELECT n, COUNT(*), MIN(auction), MAX(auction) FROM (SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction)
GROUP BY n;
INSERT INTO joined{suffix} SELECT b.auction, b.price, a.seller, a.category FROM bids b LEFT JOIN auctions a ON b.auction = a.id;
",
        bids = bids_table(bootstrap, "bids", &rate),
    )
}

fn worker_settings(checkpoints: &Path) -> String {
    format!(
        "SET 'parallelism' = '3';
SET 'checkpoint.interval' = '200ms';
SET 'checkpoint.dir' = '{}';
SET 'restart.attempts' = '0';
SET 'workers.session-timeout' = '6s';",
        checkpoints.display()
    )
}

/// The topics the jobs read: 18,400 bids and the auctions of 20,000 Nexmark events, two
/// partitions each; and the result of one `weir run` process (topics `counts_ref` and
/// `joined_ref`).
async fn with_reference(dir: &Path) -> (Broker, Expected) {
    let broker = Broker::start(dir);
    load_bids(&broker, 20_000).await;
    load_auctions(&broker).await;
    for t in ["counts_ref", "joined_ref", "counts", "joined"] {
        broker.create_topic(t, 2).await;
    }
    let settings = format!(
        "SET 'parallelism' = '2';\nSET 'checkpoint.interval' = '200ms';\nSET 'checkpoint.dir' = '{}';",
        dir.join("ref-ck").display()
    );
    run_to_end(&write_sql(dir, "reference.sql", jobs(&broker.bootstrap, "_ref", &settings, None)));
    let expected = Expected::read(&broker, "_ref");
    assert!(expected.counts.len() > 10, "the reference has {} count rows", expected.counts.len());
    assert_eq!(expected.joined.values().sum::<i64>(), BIDS, "one joined row per bid in the reference");
    (broker, expected)
}

async fn load_auctions(broker: &Broker) {
    broker.create_topic("auctions", 2).await;
    let engine = weir::Engine::new();
    crate::run(
        &engine,
        &format!(
            "SET 'parallelism' = '1';
             CREATE TABLE gen (id BIGINT, seller BIGINT, category BIGINT)
               WITH ('connector' = 'nexmark', 'table' = 'auction', 'events' = '20000');
             CREATE TABLE auctions (id BIGINT, seller BIGINT, category BIGINT)
               WITH ('connector' = 'kafka', 'topic' = 'auctions', 'properties.bootstrap.servers' = '{}',
                     'format' = 'json', 'key.fields' = 'id');
             INSERT INTO auctions SELECT * FROM gen;",
            broker.bootstrap
        ),
    )
    .await;
}

/// What the two sinks hold with their changelogs applied.
#[derive(Debug, PartialEq)]
struct Expected {
    /// upsert-kafka: each key's last value.
    counts: BTreeMap<String, String>,
    /// Debezium events: each row's count.
    joined: BTreeMap<String, i64>,
}

impl Expected {
    fn read(broker: &Broker, suffix: &str) -> Self {
        let mut counts = BTreeMap::new();
        for (key, value) in broker.read_committed_records(&format!("counts{suffix}")) {
            let key = key.expect("an upsert record without a key");
            match value {
                Some(v) => counts.insert(key, v),
                None => counts.remove(&key),
            };
        }
        let mut joined: BTreeMap<String, i64> = BTreeMap::new();
        for (_, value) in broker.read_committed_records(&format!("joined{suffix}")) {
            let Some(v) = value else { continue };
            let part = |name: &str| -> String {
                let from = v.find(&format!("\"{name}\":")).map(|i| i + name.len() + 3).expect("a debezium field");
                let rest = &v[from..];
                rest[..rest.find('}').map(|i| i + 1).unwrap_or(rest.len())].to_string()
            };
            if v.contains(r#""op":"d""#) {
                *joined.entry(part("before")).or_default() -= 1;
            } else {
                *joined.entry(part("after")).or_default() += 1;
            }
        }
        assert!(joined.values().all(|n| *n >= 0), "a joined row deleted more often than created");
        joined.retain(|_, n| *n > 0);
        Self { counts, joined }
    }
}

/// A `weir worker` process, its log in `<dir>/worker-<n>.log`.
struct Worker {
    child: Child,
    log: PathBuf,
}

impl Worker {
    fn start(sql: &Path, dir: &Path, n: usize, env: &[(&str, String)]) -> Worker {
        let log = dir.join(format!("worker-{n}.log"));
        let file = std::fs::File::create(&log).expect("worker log");
        let mut cmd = Command::new(weir_bin());
        cmd.arg("worker").arg(sql).env("WEIR_LOG", "info").stdout(Stdio::null()).stderr(file);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Worker { child: cmd.spawn().expect("start a worker"), log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait for the worker to end by itself; its log if it failed.
    fn wait(mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                assert!(status.success(), "a worker failed:\n{}", self.log());
                return;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("a worker did not end in {timeout:?}:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_write_what_one_process_writes() {
    let dir = crate::slt::tempdir();
    let (broker, want) = with_reference(&dir).await;
    let sql = write_sql(&dir, "job.sql", jobs(&broker.bootstrap, "", &worker_settings(&dir.join("ck")), None));
    let workers: Vec<Worker> = (0..3).map(|n| Worker::start(&sql, &dir, n, &[])).collect();
    for w in workers {
        w.wait(Duration::from_secs(120));
    }
    let got = Expected::read(&broker, "");
    assert_eq!(got.joined.values().sum::<i64>(), BIDS, "joined rows lost or duplicated");
    assert!(got == want, "the workers' output differs from one process's");
}

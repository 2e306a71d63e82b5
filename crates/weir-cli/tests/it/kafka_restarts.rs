//! A restarted exactly-once Kafka job leaves no transaction open behind it: every transaction
//! an earlier attempt may have opened is committed (it belongs to the checkpoint restored) or
//! aborted, whatever the moment of the crash, so a `read_committed` reader sees every row once
//! the last attempt commits, with no broker restart and no further input. (The test broker
//! never times transactions out: one left open would hold readers back for good.)

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

use crate::kafka::{bids_far_ahead, load_bids, run_to_end, write_sql, Broker};
use crate::kills::kill_in_phases_seeded;
use crate::weir_bin;

/// The moments of a run, and of a restart, that a kill is aimed at: the fault hook slowed
/// down there (`WEIR_FAULT_<HOOK>_MS`), whose marker file says the process is in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Moment {
    /// Anywhere, 0.3 to 2.5 s after the start.
    Random,
    /// Before the restore commits the restored checkpoint's transactions.
    BeforeRestore,
    /// While the restore initializes the ids earlier attempts may have used.
    Probing,
    /// Between a transaction's `InitProducerId` and its first write.
    Initialized,
    /// After the first rows of an attempt went into its first transaction.
    FirstTransaction,
    /// After a checkpoint completed, before its transactions are committed.
    Committing,
    /// While the restore commits the restored checkpoint's transactions.
    CommittingRestored,
}

impl Moment {
    fn hook(self) -> Option<&'static str> {
        match self {
            Moment::Random => None,
            Moment::BeforeRestore => Some("kafka_restore"),
            Moment::Probing => Some("kafka_probe"),
            Moment::Initialized => Some("kafka_begin"),
            Moment::FirstTransaction => Some("kafka_first_write"),
            Moment::Committing => Some("kafka_commit"),
            Moment::CommittingRestored => Some("kafka_restore_commit"),
        }
    }
}

/// In this order: a kill while committing leaves transactions for the next restore to commit.
const MOMENTS: [Moment; 7] = [
    Moment::Random,
    Moment::BeforeRestore,
    Moment::Probing,
    Moment::Initialized,
    Moment::FirstTransaction,
    Moment::Committing,
    Moment::CommittingRestored,
];

/// The windowed job of the Kafka tests (`bids` -> 1 s tumbling count and sum per auction ->
/// `out`) with 1 s checkpoints, as the issue's; with a `rate` (records per second and source
/// task), read without end.
fn job(bootstrap: &str, out: &str, delivery: &str, checkpoints: &Path, rate: Option<u32>) -> String {
    let sql = crate::kafka::job(bootstrap, out, delivery, checkpoints, rate).replace("'100ms'", "'1s'");
    let sql = match rate {
        Some(_) => sql.replace(",\n               'scan.bounded.mode' = 'latest-offset'", ""),
        None => sql,
    };
    assert!(sql.contains("'1s'"), "the checkpoint interval is not as asked");
    assert_eq!(rate.is_some(), !sql.contains("scan.bounded.mode"), "the source's end is not as asked");
    sql
}

/// Transactions the broker reports open under `prefix`.
fn open_under(broker: &Broker, prefix: &str) -> Vec<String> {
    let open = weir_connectors::kafka::recovery::open_transactions(
        &weir_connectors::kafka::client::Cluster::plaintext(&[broker.bootstrap.clone()]),
        Duration::from_secs(10),
    )
    .expect("list transactions")
    .expect("the test broker lists transactions");
    let mut ids: Vec<String> =
        open.into_iter().map(|t| t.transactional_id).filter(|id| id.starts_with(prefix)).collect();
    ids.sort();
    ids
}

/// A broker with 18,400 bids and one far-ahead record per partition in `bids`, and the rows
/// of an uninterrupted bounded run (topic `reference`): all of them, or those an unbounded
/// run gives too (`unbounded_after`).
async fn with_reference(dir: &Path, unbounded_after: bool) -> (Broker, Vec<String>) {
    let broker = Broker::start(dir);
    load_bids(&broker, 20_000).await;
    bids_far_ahead(&broker);
    broker.create_topic("reference", 2).await;
    broker.create_topic("out", 2).await;
    run_to_end(&write_sql(
        dir,
        "reference.sql",
        job(&broker.bootstrap, "reference", "none", &dir.join("ref-ck"), None),
    ));
    let mut want = broker.read_committed("reference");
    assert!(want.len() > 1000, "the reference has {} rows", want.len());
    if unbounded_after {
        // The far-ahead records' own window closes only at the end of a bounded input.
        let before = want.len();
        want.retain(|row| !row.contains("\"window_start\":\"2030-"));
        assert_eq!(want.len() + 1, before, "one window of the far-ahead records");
    }
    (broker, want)
}

/// `weir run` of the unbounded job until a read_committed reader sees as many rows as
/// `want`, then the transactions still open under the sink's ids; the process is stopped.
fn last_run(dir: &Path, sql: &Path, broker: &Broker, want: &[String]) -> (Vec<String>, Vec<String>, Duration) {
    let log = std::fs::File::create(dir.join("last.log")).expect("log");
    let mut child: Child = Command::new(weir_bin())
        .arg("run")
        .arg(sql)
        .env("WEIR_LOG", "weir_connectors=debug")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start weir");
    let started = Instant::now();
    // A safety net, not a measure: the rows are there within seconds.
    let deadline = started + Duration::from_secs(120);
    let mut got = Vec::new();
    while Instant::now() < deadline {
        assert!(child.try_wait().expect("poll").is_none(), "the unbounded job ended; see {}", dir.display());
        got = broker.read_committed("out");
        if got.len() >= want.len() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let took = started.elapsed();
    let open = open_under(broker, "weir-out-");
    let _ = child.kill();
    let _ = child.wait();
    (got, open, took)
}

/// The shape, 20 kills: at random and aimed at each moment of a run and of a restart,
/// each at least twice; then one more run, which reads no new input. Its reader must see
/// exactly the rows of an uninterrupted run, with no transaction left open. Several seeds
/// (`WEIR_TEST_SEEDS`, comma-separated, for more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_leave_no_transaction_open_whatever_the_moment_of_the_crash() {
    let seeds: Vec<u64> = std::env::var("WEIR_TEST_SEEDS")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![17, 42]);
    for seed in seeds {
        let dir = crate::slt::tempdir();
        let (broker, want) = with_reference(&dir, true).await;
        let checkpoints = dir.join("checkpoints");
        let sql = write_sql(&dir, "job.sql", job(&broker.bootstrap, "out", "exactly-once", &checkpoints, Some(700)));
        let faults = dir.join("faults");
        let runs = std::sync::atomic::AtomicUsize::new(0);
        kill_in_phases_seeded(
            &MOMENTS,
            Moment::Random,
            300..2500,
            seed,
            2,
            20,
            |moment| {
                let _ = std::fs::remove_dir_all(&faults);
                std::fs::create_dir_all(&faults).expect("fault dir");
                let n = runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let log = std::fs::File::create(dir.join(format!("run-{n}.log"))).expect("log");
                let mut cmd = Command::new(weir_bin());
                cmd.arg("run")
                    .arg(&sql)
                    .env("WEIR_FAULT_DIR", &faults)
                    .env("WEIR_LOG", "weir_connectors=debug")
                    .stdout(Stdio::null())
                    .stderr(log);
                if let Some(hook) = moment.hook() {
                    cmd.env(format!("WEIR_FAULT_{}_MS", hook.to_uppercase()), "400");
                }
                cmd.spawn().expect("start weir")
            },
            |moment| moment.hook().is_some_and(|hook| faults.join(hook).exists()),
        );
        let (got, open, took) = last_run(&dir, &sql, &broker, &want);
        println!("seed {seed}: the last run's reader saw {} of {} rows after {took:?}", got.len(), want.len());
        assert!(open.is_empty(), "seed {seed}: transactions left open: {open:?} (logs in {})", dir.display());
        let mut distinct = got.clone();
        distinct.dedup();
        assert_eq!(distinct.len(), got.len(), "seed {seed}: duplicates in the output");
        assert_eq!(got.len(), want.len(), "seed {seed}: row count differs from the uninterrupted run");
        assert!(got == want, "seed {seed}: rows differ from the uninterrupted run");
    }
}

/// A transaction open under one of the job's ids that no probe reaches (past a gap of ids
/// never used, as a paused instance resumed after its successor's probe can leave one), and
/// one under the other task's first id: the job's start ends both, so its committed output
/// becomes visible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_aborts_open_transactions_the_probe_does_not_reach() {
    let dir = crate::slt::tempdir();
    let (broker, want) = with_reference(&dir, false).await;
    for (id, partition) in [("weir-out-0-40", 0), ("weir-out-1-1", 1)] {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &broker.bootstrap)
            .set("transactional.id", id)
            .create()
            .expect("producer");
        producer.init_transactions(Duration::from_secs(10)).expect("init");
        producer.begin_transaction().expect("begin");
        let record = BaseRecord::<(), _>::to("out").partition(partition).payload("left open");
        producer.send(record).map_err(|(e, _)| e).expect("send");
        producer.flush(Duration::from_secs(10)).expect("flush");
    }
    assert_eq!(open_under(&broker, "weir-out-"), ["weir-out-0-40", "weir-out-1-1"], "the left transactions are open");
    let bounded = job(&broker.bootstrap, "out", "exactly-once", &dir.join("checkpoints"), None);
    run_to_end(&write_sql(&dir, "job.sql", bounded));
    assert_eq!(open_under(&broker, "weir-out-"), Vec::<String>::new(), "transactions left open");
    let got = broker.read_committed("out");
    assert_eq!(got.len(), want.len(), "row count differs from the uninterrupted run");
    assert!(got == want, "rows differ from the uninterrupted run");
}

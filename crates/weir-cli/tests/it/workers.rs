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

/// One test of workers at a time: each runs several processes and a broker, and rebalances
/// wait on every member, so two at once on a small machine only slow each other down.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Three jobs in one file: bids per auction, then auctions per bid count (upsert-kafka, an
/// updating aggregate fed an updating one across a cut); bids joined with their auction (a
/// regular left join, both sides repartitioned, as change events); and bids per auction and
/// 1 s tumbling window (closed by the watermark markers that cross the cut).
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
CREATE TABLE windows{suffix} (auction BIGINT, window_start TIMESTAMP(3), bids BIGINT, top BIGINT)
  WITH ('connector' = 'kafka', 'topic' = 'windows{suffix}', 'properties.bootstrap.servers' = '{bootstrap}',
        'format' = 'json', 'sink.delivery-guarantee' = 'exactly-once',
        'sink.transactional-id-prefix' = 'weir-windows{suffix}');
INSERT INTO counts{suffix}
SELECT n, COUNT(*), MIN(auction), MAX(auction) FROM (SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction)
GROUP BY n;
INSERT INTO joined{suffix} SELECT b.auction, b.price, a.seller, a.category FROM bids b LEFT JOIN auctions a ON b.auction = a.id;
INSERT INTO windows{suffix}
SELECT auction, window_start, COUNT(*), MAX(price) FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(date_time), INTERVAL '1' SECOND))
GROUP BY auction, window_start, window_end;
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
/// partitions each; and the result of one `weir run` process (topics `counts_ref`,
/// `joined_ref` and `windows_ref`).
async fn with_reference(dir: &Path) -> (Broker, Expected) {
    let broker = Broker::start(dir);
    load_bids(&broker, 20_000).await;
    crate::kafka_upsert::load_auctions(&broker, 20_000).await;
    for t in ["counts_ref", "joined_ref", "windows_ref", "counts", "joined", "windows"] {
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
    assert_eq!(expected.bids_in_windows(), BIDS, "every bid in a window in the reference");
    (broker, expected)
}

/// What the two sinks hold with their changelogs applied.
#[derive(Debug, PartialEq)]
struct Expected {
    /// upsert-kafka: each key's last value.
    counts: BTreeMap<String, String>,
    /// Debezium events: each row's count.
    joined: BTreeMap<String, i64>,
    /// Appended window rows: each row's count.
    windows: BTreeMap<String, i64>,
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
        let (joined, _) =
            crate::kafka_upsert::applied_events(broker.read_committed_records(&format!("joined{suffix}")));
        let mut windows = BTreeMap::new();
        for (_, value) in broker.read_committed_records(&format!("windows{suffix}")) {
            *windows.entry(value.expect("a window row without a value")).or_default() += 1;
        }
        Self { counts, joined, windows }
    }

    /// The bids the window rows count.
    fn bids_in_windows(&self) -> i64 {
        let bids = |row: &String| -> i64 {
            let after = row.split_once("\"bids\":").map(|(_, a)| a).unwrap_or_default();
            after.chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap_or(0)
        };
        self.windows.iter().map(|(row, n)| bids(row) * n).sum()
    }

    /// Fails with the first rows that differ on each side.
    fn assert_same(&self, want: &Expected, dir: &Path, what: &str) {
        if self == want {
            return;
        }
        let mut diff = differences("counts", &want.counts, &self.counts);
        diff.extend(differences("joined", &want.joined, &self.joined));
        diff.extend(differences("windows", &want.windows, &self.windows));
        let n = diff.len();
        diff.truncate(20);
        panic!("{what} (logs in {}): {n} difference(s), first:\n  {}", dir.display(), diff.join("\n  "));
    }
}

/// What differs between two maps, a line per key.
fn differences<V: PartialEq + std::fmt::Debug>(
    what: &str,
    want: &BTreeMap<String, V>,
    got: &BTreeMap<String, V>,
) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> = want.keys().chain(got.keys()).collect();
    let differ = keys.into_iter().filter(|k| want.get(*k) != got.get(*k));
    differ.map(|k| format!("{what} {k}: want {:?}, got {:?}", want.get(k), got.get(k))).collect()
}

/// A `weir worker` process, its log in `<dir>/worker-<n>.log`.
struct Worker {
    child: Child,
    log: PathBuf,
}

impl Worker {
    /// Worker `n`, named `id` in the groups (a replacement takes the id of the one it
    /// replaces).
    fn start(sql: &Path, dir: &Path, n: usize, id: &str, env: &[(&str, String)]) -> Worker {
        let log = dir.join(format!("worker-{n}.log"));
        let file = std::fs::File::create(&log).expect("worker log");
        let mut cmd = Command::new(weir_bin());
        cmd.arg("worker")
            .arg(sql)
            .arg("--id")
            .arg(id)
            .env("WEIR_LOG", "info,weir_workers=debug")
            .stdout(Stdio::null())
            .stderr(file);
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

    /// Wait for the worker to fail; its log.
    fn wait_failed(mut self, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                assert!(!status.success(), "the worker went on as if nothing happened:\n{}", self.log());
                return self.log();
            }
            assert!(Instant::now() < deadline, "the worker did not stop in {timeout:?}:\n{}", self.log());
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
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = crate::slt::tempdir();
    let (broker, want) = with_reference(&dir).await;
    let sql = write_sql(&dir, "job.sql", jobs(&broker.bootstrap, "", &worker_settings(&dir.join("ck")), None));
    let workers: Vec<Worker> = (0..3).map(|n| Worker::start(&sql, &dir, n, &format!("w{n}"), &[])).collect();
    for w in workers {
        w.wait(Duration::from_secs(120));
    }
    let got = Expected::read(&broker, "");
    got.assert_same(&want, &dir, "the workers' output differs from one process's");
    assert_eq!(got.joined.values().sum::<i64>(), BIDS, "joined rows lost or duplicated");
}

/// The same three jobs over SASL_SSL (the test front, SCRAM-SHA-256): the workers' group
/// membership, repartition topics, admin calls and fencing, the sinks' transactions and
/// `weir status` all connect with the tables' security settings; the output is one process's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_over_sasl_ssl_write_what_one_process_writes() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = crate::slt::tempdir();
    let (broker, want) = with_reference(&dir).await;
    let front = crate::kafka_front::Front::start(&broker.bootstrap, &dir, crate::kafka_security::sasl_ssl(false));
    let plain = format!("'properties.bootstrap.servers' = '{}'", broker.bootstrap);
    let secured = front.properties("SCRAM-SHA-256", "weir", crate::kafka_security::PASSWORD);
    let sql = jobs(&broker.bootstrap, "", &worker_settings(&dir.join("ck")), Some(1500)).replace(&plain, &secured);
    assert_eq!(sql.matches("SASL_SSL").count(), 5, "every table through the front");
    let sql = write_sql(&dir, "job.sql", sql);
    let workers: Vec<Worker> = (0..2).map(|n| Worker::start(&sql, &dir, n, &format!("w{n}"), &[])).collect();
    wait_for_owners(&sql, Duration::from_secs(60), "every task assigned", |o| o.values().all(|w| w != "-"));
    status_text_lists_every_task(&sql, owners(&sql).len());
    for w in workers {
        w.wait(Duration::from_secs(120));
    }
    for n in 0..2 {
        let log = std::fs::read_to_string(dir.join(format!("worker-{n}.log"))).expect("worker log");
        assert!(!log.contains(crate::kafka_security::PASSWORD), "worker {n} printed the password:\n{log}");
    }
    let got = Expected::read(&broker, "");
    got.assert_same(&want, &dir, "the workers' output over SASL_SSL differs from one process's");
}

/// Who runs each task, as `weir status --json` reads it from the groups: task -> member
/// name.
fn owners(sql: &Path) -> BTreeMap<String, String> {
    let out = Command::new(weir_bin()).args(["status", "--json"]).arg(sql).output().expect("weir status");
    assert!(out.status.success(), "weir status failed: {}", String::from_utf8_lossy(&out.stderr));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("weir status --json prints JSON");
    let mut owners = BTreeMap::new();
    for job in status["jobs"].as_array().into_iter().flatten() {
        for sub in job["sub_topologies"].as_array().into_iter().flatten() {
            for task in sub["tasks"].as_array().into_iter().flatten() {
                let id = task["task"].as_str().expect("a task id");
                // "member (host)", or null while unassigned.
                let owner = task["owner"].as_str().and_then(|o| o.split_whitespace().next()).unwrap_or("-");
                owners.insert(format!("{}:{id}", owners.len()), owner.to_string());
            }
        }
    }
    assert!(!owners.is_empty(), "weir status listed no task:\n{status}");
    owners
}

/// The text `weir status` prints lists as many tasks as its JSON, each with an owner.
fn status_text_lists_every_task(sql: &Path, tasks: usize) {
    let out = Command::new(weir_bin()).arg("status").arg(sql).output().expect("weir status");
    assert!(out.status.success(), "weir status failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let listed: Vec<&str> =
        text.lines().filter(|l| l.trim_start().chars().next().is_some_and(|c| c.is_ascii_digit())).collect();
    assert_eq!(listed.len(), tasks, "the text lists other tasks than the JSON:\n{text}");
    assert!(listed.iter().all(|l| l.split_whitespace().nth(1).is_some_and(|o| o != "-")), "{text}");
}

/// The member name of worker process `pid` in the groups.
fn member(pid: u32) -> impl Fn(&String) -> bool {
    let suffix = format!("-{pid}");
    move |owner: &String| owner.ends_with(&suffix)
}

/// Wait until `done` holds of the task owners, or fail after `timeout`.
fn wait_for_owners(sql: &Path, timeout: Duration, what: &str, done: impl Fn(&BTreeMap<String, String>) -> bool) {
    let deadline = Instant::now() + timeout;
    loop {
        let owners = owners(sql);
        if done(&owners) {
            return;
        }
        assert!(Instant::now() < deadline, "{what} within {timeout:?}; owners: {owners:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Where a kill of a worker lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Processing,
    /// State written to the store, the manifest not yet.
    PreCommitted,
    /// Checkpoint written, the task's transaction not yet committed.
    Committing,
    /// A task starting on this worker, restoring.
    Restoring,
}

impl Phase {
    /// The fault hook that slows the phase down, and its marker file.
    fn hook(self) -> Option<&'static str> {
        match self {
            Phase::Processing => None,
            Phase::PreCommitted => Some("manifest"),
            Phase::Committing => Some("worker_commit"),
            Phase::Restoring => Some("worker_restore"),
        }
    }

    /// The variable that sets the hook's pause.
    fn variable(self) -> &'static str {
        match self {
            Phase::Processing => "",
            Phase::PreCommitted => "WEIR_FAULT_MANIFEST_MS",
            Phase::Committing => "WEIR_FAULT_WORKER_COMMIT_MS",
            Phase::Restoring => "WEIR_FAULT_WORKER_RESTORE_MS",
        }
    }
}

/// A worker started with `phase` slowed down, its fault markers in `<dir>/faults-<n>`.
fn start_in(
    sql: &Path,
    dir: &Path,
    n: usize,
    id: &str,
    phase: Option<Phase>,
    machine: &[(&str, String)],
) -> (Worker, PathBuf) {
    let faults = dir.join(format!("faults-{n}"));
    std::fs::create_dir_all(&faults).expect("fault dir");
    let mut env = vec![("WEIR_FAULT_DIR", faults.display().to_string())];
    env.extend(machine.iter().cloned());
    if let Some(p) = phase.filter(|p| p.hook().is_some()) {
        env.push((p.variable(), "400".into()));
    }
    (Worker::start(sql, dir, n, id, &env), faults)
}

/// Kafka's group protocol moves a dead worker's tasks when its session times out, or at once
/// to a replacement started under its id (static membership). The test broker does not time
/// sessions out (nor rebalances waiting on a dead member), so here each kill is followed by
/// a replacement under the dead worker's id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_ten_times_in_every_phase_loses_and_duplicates_nothing() {
    worker_killed_ten_times(None).await;
}

/// The same with checkpoints in an object store and RocksDB state, and no directory shared
/// by the workers: each has its own temporary directory (its "machine"), so a task that moves
/// restores from the bucket alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_with_checkpoints_in_s3_and_no_shared_disk_lose_and_duplicate_nothing_through_kills() {
    let store = crate::object_store::ObjectStore::start();
    worker_killed_ten_times(Some(&store)).await;
    let keys = store.keys("ck/");
    assert!(keys.iter().any(|k| k.contains("/shared/") && k.ends_with(".sst")), "no RocksDB file in the bucket");
}

async fn worker_killed_ten_times(store: Option<&crate::object_store::ObjectStore>) {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = crate::slt::tempdir();
    let (broker, want) = with_reference(&dir).await;
    let settings = match store {
        None => worker_settings(&dir.join("ck")),
        // Checkpoints every second: the emulated store serves every task's requests from
        // one Python process.
        Some(store) => format!(
            "{}\nSET 'state.backend' = 'rocksdb';\n{}",
            worker_settings(&dir.join("ck"))
                .replace(&format!("SET 'checkpoint.dir' = '{}';\n", dir.join("ck").display()), "")
                .replace("SET 'checkpoint.interval' = '200ms';", "SET 'checkpoint.interval' = '1s';"),
            store.settings("ck")
        ),
    };
    assert!(store.is_none() || !settings.contains(&dir.join("ck").display().to_string()), "{settings}");
    assert!(store.is_none() || settings.contains("'checkpoint.interval' = '1s'"), "{settings}");
    let sql = write_sql(&dir, "job.sql", jobs(&broker.bootstrap, "", &settings, Some(70)));
    // Without a shared disk, each worker process is on a "machine" of its own.
    let machine = |n: usize| -> Vec<(&str, String)> {
        match store {
            None => vec![],
            Some(_) => vec![("TMPDIR", dir.join(format!("machine-{n}")).display().to_string())],
        }
    };
    let stable: Vec<Worker> = (0..2).map(|n| Worker::start(&sql, &dir, n, &format!("w{n}"), &machine(n))).collect();
    let phases = [Phase::Processing, Phase::PreCommitted, Phase::Committing, Phase::Restoring];
    let mut kills: BTreeMap<Phase, u32> = BTreeMap::new();
    let mut reassigned = 0;
    let mut pending: Option<(Vec<String>, u32)> = None;
    let (mut victim, mut faults) = start_in(&sql, &dir, 10, "w2", Some(phases[0]), &machine(10));
    for round in 0..10 {
        let phase = phases[round % phases.len()];
        let pid = victim.child.id();
        let started = Instant::now();
        let landed = loop {
            let in_phase = match phase.hook() {
                None => started.elapsed() > Duration::from_millis(1500 + 300 * round as u64),
                Some(hook) => faults.join(hook).exists(),
            };
            if in_phase {
                break phase;
            }
            if started.elapsed() > Duration::from_secs(30) {
                break Phase::Processing;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let ran = if phase == Phase::Restoring { None } else { Some(owners(&sql)) };
        victim.kill();
        *kills.entry(landed).or_default() += 1;
        // Killed while restoring: the group's view is read after the kill (the replacement
        // restores as soon as it has its tasks, before the group could be asked).
        let before = ran.unwrap_or_else(|| owners(&sql));
        if let Some((had, dead)) = pending.take() {
            reassigned += reassigned_from(&sql, &had, dead);
        }
        let had: Vec<String> = before.iter().filter(|(_, o)| member(pid)(o)).map(|(t, _)| t.clone()).collect();
        println!("round {round}: killed worker {pid} in {landed:?}; it ran {}", had.len());
        // The replacement: killed in the next round, the last one runs to the end.
        let next_phase = (round < 9).then(|| phases[(round + 1) % phases.len()]);
        (victim, faults) = start_in(&sql, &dir, 11 + round, "w2", next_phase, &machine(11 + round));
        if next_phase == Some(Phase::Restoring) {
            pending = Some((had, pid));
        } else {
            reassigned += reassigned_from(&sql, &had, pid);
        }
    }
    println!("kills per phase: {kills:?}; {reassigned} tasks reassigned");
    for w in stable.into_iter().chain([victim]) {
        w.wait(Duration::from_secs(300));
    }
    let got = Expected::read(&broker, "");
    got.assert_same(&want, &dir, "the output after 10 kills differs from one process's");
    assert_eq!(got.joined.values().sum::<i64>(), BIDS, "joined rows lost or duplicated");
    assert!(kills.len() == phases.len(), "some phase was never hit: {kills:?}");
    assert!(reassigned >= 10, "the killed workers ran only {reassigned} tasks in all");
}

/// Wait until every task of `had` (those dead worker `pid` ran) has another owner; how many.
fn reassigned_from(sql: &Path, had: &[String], pid: u32) -> usize {
    wait_for_owners(sql, Duration::from_secs(60), "the group did not reassign the dead worker's tasks", |o| {
        had.iter().all(|t| o.get(t).is_some_and(|owner| owner != "-" && !member(pid)(owner)))
    });
    had.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_added_mid_run_takes_tasks_and_nothing_is_lost() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = crate::slt::tempdir();
    let (broker, want) = with_reference(&dir).await;
    let sql = write_sql(&dir, "job.sql", jobs(&broker.bootstrap, "", &worker_settings(&dir.join("ck")), Some(200)));
    let first: Vec<Worker> = (0..2).map(|n| Worker::start(&sql, &dir, n, &format!("w{n}"), &[])).collect();
    wait_for_owners(&sql, Duration::from_secs(30), "two workers did not share the tasks", |o| {
        o.values().all(|w| w != "-") && o.values().collect::<std::collections::BTreeSet<_>>().len() == 2
    });
    status_text_lists_every_task(&sql, owners(&sql).len());
    std::thread::sleep(Duration::from_secs(2));
    let third = Worker::start(&sql, &dir, 2, "w2", &[]);
    let pid = third.child.id();
    wait_for_owners(&sql, Duration::from_secs(30), "the added worker got no task", |o| o.values().any(member(pid)));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !first.iter().any(|w| w.log().contains("revoked; stopping it here")) {
        assert!(Instant::now() < deadline, "no task moved away from the first two workers");
        std::thread::sleep(Duration::from_millis(50));
    }
    for w in first.into_iter().chain([third]) {
        w.wait(Duration::from_secs(120));
    }
    let got = Expected::read(&broker, "");
    got.assert_same(&want, &dir, "the output with a worker added differs from one process's");
    assert_eq!(got.joined.values().sum::<i64>(), BIDS, "joined rows lost or duplicated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_worker_resumed_after_its_tasks_moved_cannot_commit() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = crate::slt::tempdir();
    let (broker, want) = with_reference(&dir).await;
    // A session longer than the pause: the paused worker comes back still thinking itself a
    // member, as a zombie does. (One whose own session ran out while it was stopped rejoins
    // as a new member, which under the same id is a take-over the other way.)
    let settings = worker_settings(&dir.join("ck")).replace("'6s'", "'30s'");
    let sql = write_sql(&dir, "job.sql", jobs(&broker.bootstrap, "", &settings, Some(500)));
    let faults = dir.join("faults");
    std::fs::create_dir_all(&faults).expect("fault dir");
    let env = [("WEIR_FAULT_DIR", faults.display().to_string()), ("WEIR_FAULT_WORKER_COMMIT_MS", "500".to_string())];
    let zombie = Worker::start(&sql, &dir, 0, "w0", &env);
    let others: Vec<Worker> = (1..3).map(|n| Worker::start(&sql, &dir, n, &format!("w{n}"), &[])).collect();
    let pid = zombie.child.id();
    // Paused just before a task's commit: its checkpoint is written, its transaction open.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !faults.join("worker_commit").exists() {
        assert!(Instant::now() < deadline, "the worker never came to commit:\n{}", zombie.log());
        std::thread::sleep(Duration::from_millis(2));
    }
    let signal = |s: &str| assert!(Command::new("kill").args([s, &pid.to_string()]).status().expect("kill").success());
    signal("-STOP");
    // Its replacement, under its id, takes its place in the groups (the test broker does not
    // time sessions out).
    let others: Vec<Worker> = others.into_iter().chain([Worker::start(&sql, &dir, 3, "w0", &[])]).collect();
    wait_for_owners(&sql, Duration::from_secs(60), "the paused worker's tasks did not move", |o| {
        !o.values().any(member(pid)) && o.values().all(|w| w != "-")
    });
    signal("-CONT");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !zombie.log().contains("fenced this one") {
        assert!(Instant::now() < deadline, "the resumed worker was not fenced:\n{}", zombie.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = zombie.wait_failed(Duration::from_secs(30));
    println!("{}", log.lines().find(|l| l.contains("fenced this one")).unwrap_or_default());
    assert!(
        log.contains("the broker fenced this worker's membership of group"),
        "the resumed worker did not leave the groups:\n{log}"
    );
    for w in others {
        w.wait(Duration::from_secs(120));
    }
    let got = Expected::read(&broker, "");
    got.assert_same(&want, &dir, "the output differs from one process's after the zombie resumed");
    assert_eq!(got.joined.values().sum::<i64>(), BIDS, "joined rows lost or duplicated");
}

/// What a job of workers cannot run is refused before any worker joins a group, with the
/// reason (no broker is needed to find out).
#[test]
fn jobs_workers_cannot_run_are_refused_with_the_reason() {
    let dir = crate::slt::tempdir();
    let csv = dir.join("bids.csv");
    std::fs::write(&csv, "1,2\n").expect("csv");
    let kafka = "CREATE TABLE bids (auction BIGINT, price BIGINT) WITH ('connector' = 'kafka', 'topic' = 'bids', \
                 'properties.bootstrap.servers' = '127.0.0.1:1', 'format' = 'json');
                 CREATE TABLE out (auction BIGINT, n BIGINT, PRIMARY KEY (auction) NOT ENFORCED) WITH (
                 'connector' = 'upsert-kafka', 'topic' = 'out', 'properties.bootstrap.servers' = '127.0.0.1:1',
                 'key.format' = 'json', 'value.format' = 'json');";
    let file = format!(
        "CREATE TABLE local (auction BIGINT, price BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', \
         'format' = 'csv');",
        csv.display()
    );
    let checkpoints =
        format!("SET 'checkpoint.interval' = '1s'; SET 'checkpoint.dir' = '{}';", dir.join("ck").display());
    let cases = [
        (
            format!("{kafka} INSERT INTO out SELECT auction, COUNT(*) FROM bids GROUP BY auction;"),
            "needs checkpoints: SET 'checkpoint.interval' and 'checkpoint.dir'",
        ),
        (
            format!(
                "{checkpoints} {kafka} {file} INSERT INTO out SELECT auction, COUNT(*) FROM \
                 (SELECT auction FROM bids UNION ALL SELECT auction FROM local) GROUP BY auction;"
            ),
            "table 'local' is read by a job of workers, which read Kafka topics only",
        ),
        ("SET 'parallelism' = '2';".to_string(), "the file has no INSERT"),
    ];
    assert_refused(&dir, &cases);
}

/// Partition counts that cannot make tasks are refused before any group is joined: two
/// topics of different counts read by one sub-topology, and a repartition topic left with
/// another count than the job's `parallelism` (its key groups would land in other tasks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_counts_that_cannot_make_tasks_are_refused() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    broker.create_topic("bids", 2).await;
    broker.create_topic("others", 3).await;
    broker.create_topic("insert-into-out-1-repartition", 2).await;
    let table = |name: &str| {
        format!(
            "CREATE TABLE {name} (auction BIGINT, price BIGINT) WITH ('connector' = 'kafka', 'topic' = '{name}', \
             'properties.bootstrap.servers' = '{}', 'format' = 'json');",
            broker.bootstrap
        )
    };
    let out = format!(
        "CREATE TABLE out (auction BIGINT, n BIGINT, PRIMARY KEY (auction) NOT ENFORCED) WITH (
         'connector' = 'upsert-kafka', 'topic' = 'out', 'properties.bootstrap.servers' = '{}',
         'key.format' = 'json', 'value.format' = 'json');",
        broker.bootstrap
    );
    let settings = format!(
        "SET 'parallelism' = '3'; SET 'checkpoint.interval' = '1s'; SET 'checkpoint.dir' = '{}';",
        dir.join("ck").display()
    );
    let cases = [
        (
            format!(
                "{settings} {} {} {out} INSERT INTO out SELECT auction, COUNT(*) FROM \
                 (SELECT auction FROM bids UNION ALL SELECT auction FROM others) GROUP BY auction;",
                table("bids"),
                table("others")
            ),
            "reads topics of different partition counts ('bids': 2, 'others': 3)",
        ),
        (
            format!(
                "{settings} {} {out} INSERT INTO out SELECT auction, COUNT(*) FROM bids GROUP BY auction;",
                table("bids")
            ),
            "repartition topic 'insert-into-out-1-repartition' has 2 partitions, and the job's 'parallelism' is 3",
        ),
    ];
    assert_refused(&dir, &cases);
}

/// `weir worker` refuses each file, saying what is expected.
fn assert_refused(dir: &Path, cases: &[(String, &str)]) {
    for (i, (sql, expected)) in cases.iter().enumerate() {
        let path = write_sql(dir, &format!("case{i}.sql"), sql.clone());
        let out = Command::new(weir_bin()).arg("worker").arg(&path).output().expect("weir worker");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "case {i} was not refused");
        assert!(stderr.contains(expected), "case {i}: expected '{expected}' in:\n{stderr}");
    }
}

/// A worker whose Kafka group client hangs as it closes (librdkafka's close can wait without
/// end on a rebalance) still exits, successfully, once its tasks have ended: leaving the
/// groups has a deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_group_client_hangs_on_close_still_exits() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    load_bids(&broker, 2_000).await;
    crate::kafka_upsert::load_auctions(&broker, 2_000).await;
    for t in ["counts", "joined", "windows"] {
        broker.create_topic(t, 2).await;
    }
    let sql = write_sql(&dir, "job.sql", jobs(&broker.bootstrap, "", &worker_settings(&dir.join("ck")), None));
    let faults = dir.join("faults");
    std::fs::create_dir_all(&faults).expect("fault dir");
    // An hour: for the test, forever.
    let env = [("WEIR_FAULT_DIR", faults.display().to_string()), ("WEIR_FAULT_GROUP_CLOSE_MS", "3600000".into())];
    let worker = Worker::start(&sql, &dir, 0, "w0", &env);
    let log = worker.log.clone();
    worker.wait(Duration::from_secs(240));
    assert!(faults.join("group_close").exists(), "the group client's close was not held");
    let log = std::fs::read_to_string(log).expect("worker log");
    assert!(log.contains("(the Kafka client's close is stuck); going on without it"), "{log}");
}

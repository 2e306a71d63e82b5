//! Checkpoints in an object store: an S3-compatible server on loopback, started by the
//! project's script (`scripts/object-store.sh`: moto's server mode, an emulator of S3's API;
//! no real object store installs here). Weir reaches it over HTTP with the object_store crate,
//! as it would reach S3.
//!
//! - A RocksDB window aggregate into exactly-once files, and an updating aggregate into
//!   exactly-once Kafka, killed with SIGKILL in every phase (RocksDB uploads included), with
//!   their checkpoints in the bucket only: exactly the rows of an uninterrupted run.
//! - The last run restores on a "new machine": a fresh local state directory (no local copy),
//!   so from the bucket alone.
//! - An unreachable store is an error at the job's start, naming the URL without credentials;
//!   a store that goes away mid-run fails checkpoints (RocksDB uploads declined, manifests
//!   not written), then the job once more have failed in a row than
//!   'checkpoint.tolerable-failures' allows. No secret appears in any output.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::kills::{assert_same_rows, in_phase, kill_in_phases, published, start, Phase};
use crate::{repo, weir_bin};

/// The secret key every job here is given: it must never be printed.
const SECRET: &str = "weir-test-secret-d41d8cd98f00";

/// An S3-compatible server with one bucket, `weir`; stopped on drop.
pub struct ObjectStore {
    pid: u32,
    pub endpoint: String,
}

impl ObjectStore {
    pub fn start() -> ObjectStore {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("free port").local_addr().expect("addr").port();
        let out = Command::new(repo().join("scripts/object-store.sh"))
            .args(["start", &port.to_string(), "weir"])
            .output()
            .expect("run scripts/object-store.sh");
        assert!(out.status.success(), "object store did not start: {}", String::from_utf8_lossy(&out.stderr));
        let pid = String::from_utf8_lossy(&out.stdout).trim().parse().expect("object store pid");
        ObjectStore { pid, endpoint: format!("http://127.0.0.1:{port}") }
    }

    /// The settings that point a job's checkpoints at `s3://weir/<path>` here.
    pub fn settings(&self, path: &str) -> String {
        format!(
            "SET 'checkpoint.dir' = 's3://weir/{path}';
SET 's3.endpoint' = '{}';
SET 's3.path.style.access' = 'true';
SET 's3.region' = 'us-east-1';
SET 's3.access-key' = 'weir-test';
SET 's3.secret-key' = '{SECRET}';
",
            self.endpoint
        )
    }

    /// The keys of the objects under `prefix` (S3's ListObjectsV2; the server takes unsigned
    /// requests).
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        let mut keys = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut url = format!("{}/weir?list-type=2&prefix={prefix}", self.endpoint);
            if let Some(t) = &token {
                url.push_str(&format!("&continuation-token={t}"));
            }
            let out = Command::new("python3")
                .args(["-c", "import sys, urllib.request as u; sys.stdout.write(u.urlopen(sys.argv[1], timeout=10).read().decode())", &url])
                .output()
                .expect("list objects");
            assert!(out.status.success(), "list objects: {}", String::from_utf8_lossy(&out.stderr));
            let body = String::from_utf8_lossy(&out.stdout).to_string();
            keys.extend(tags(&body, "Key"));
            token = tags(&body, "NextContinuationToken").into_iter().next();
            if token.is_none() {
                return keys;
            }
        }
    }
}

fn tags(xml: &str, tag: &str) -> Vec<String> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    xml.split(&open).skip(1).filter_map(|rest| rest.split_once(&close).map(|(v, _)| v.to_string())).collect()
}

impl Drop for ObjectStore {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.pid.to_string()).status();
    }
}

/// Nexmark bids (paced so that kills land before the end) -> 10 s tumbling window count and
/// sum per auction, RocksDB state -> CSV files, exactly once; checkpoints in the bucket.
fn window_job(storage: &str, dir: &Path, out: &str, state: &str, parallelism: u32) -> String {
    format!(
        "SET 'parallelism' = '{parallelism}';
SET 'state.backend' = 'rocksdb';
SET 'state.dir' = '{state}';
SET 'checkpoint.interval' = '200ms';
{storage}SET 'restart.attempts' = '0';
CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP(3), WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
  WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '300000', 'rate' = '40000');
CREATE TABLE {out} (auction BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), cnt BIGINT, total BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'csv');
INSERT INTO {out}
SELECT auction, window_start, window_end, COUNT(*), SUM(price)
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
GROUP BY auction, window_start, window_end;
",
        state = dir.join(state).display(),
        path = dir.join(out).display(),
    )
}

fn run(sql: &Path) -> String {
    let out = Command::new(weir_bin()).arg("run").arg(sql).output().expect("weir run");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    text
}

/// Files under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return found };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            found.extend(files_under(&p));
        } else {
            found.push(p);
        }
    }
    found
}

#[test]
fn a_rocksdb_window_job_with_checkpoints_in_s3_is_exactly_once_under_sigkill_and_restores_on_a_new_machine() {
    let dir = crate::slt::tempdir();
    let store = ObjectStore::start();
    let reference = dir.join("reference.sql");
    std::fs::write(&reference, window_job(&store.settings("reference"), &dir, "reference", "reference-state", 1))
        .expect("sql");
    let mut outputs = run(&reference);
    let want = published(&dir.join("reference"));
    assert!(want.len() > 1000, "reference has {} rows", want.len());

    let sql = dir.join("job.sql");
    std::fs::write(&sql, window_job(&store.settings("out"), &dir, "out", "state", 2)).expect("sql");
    let faults = dir.join("faults");
    let phases = [Phase::Processing, Phase::Uploading, Phase::PreCommitted, Phase::Committing, Phase::Restoring];
    kill_in_phases(
        &phases,
        Phase::Processing,
        3,
        20,
        |p| start(&sql, p, &faults, "file"),
        |p| in_phase(p, &faults, "file"),
    );

    // The checkpoints are in the bucket: manifests and RocksDB's files, shared between them.
    let keys = store.keys("out/insert-into-out/");
    assert!(keys.iter().any(|k| k.ends_with("/manifest.json")), "no manifest in the bucket: {keys:?}");
    assert!(keys.iter().any(|k| k.contains("/shared/") && k.ends_with(".sst")), "no SST file in the bucket");
    assert!(!dir.join("out-checkpoints").exists() && !files_under(&dir).iter().any(|f| f.ends_with("manifest.json")));
    // The restarts on this machine had a local copy of the state files to restore from.
    let copied = files_under(&dir.join("state/local-recovery"));
    assert!(copied.iter().any(|f| f.extension().is_some_and(|e| e == "sst")), "no local copy kept");

    // A new machine: no local state, no local copy; the job restores from the bucket alone.
    std::fs::remove_dir_all(dir.join("state")).expect("forget the local state");
    let restored_from = store.keys("out/insert-into-out/").iter().filter(|k| k.ends_with("/manifest.json")).count();
    assert!(restored_from > 0, "no checkpoint to restore");
    outputs.push_str(&run(&sql));
    assert_same_rows(&published(&dir.join("out")), &want);
    assert!(!outputs.contains(SECRET), "the secret key was printed");
}

/// Azure Blob Storage's emulator (Azurite, `scripts/azurite.sh`), its account's endpoint and
/// published key given as settings.
struct Azurite {
    pid: u32,
    port: u16,
}

impl Azurite {
    fn start() -> Azurite {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("free port").local_addr().expect("addr").port();
        let out = Command::new(repo().join("scripts/azurite.sh"))
            .args(["start", &port.to_string(), "weir"])
            .output()
            .expect("run scripts/azurite.sh");
        assert!(out.status.success(), "azurite did not start: {}", String::from_utf8_lossy(&out.stderr));
        Azurite { pid: String::from_utf8_lossy(&out.stdout).trim().parse().expect("azurite pid"), port }
    }

    fn settings(&self, path: &str) -> String {
        format!(
            "SET 'checkpoint.dir' = 'az://weir/{path}';
SET 'azure.endpoint' = 'http://127.0.0.1:{}/devstoreaccount1';
SET 'azure.account-name' = 'devstoreaccount1';
SET 'azure.account-key' = '{AZURITE_KEY}';
",
            self.port
        )
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.pid.to_string()).status();
    }
}

const AZURITE_KEY: &str = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// The window job with its checkpoints in Azure Blob Storage (`az://`), killed in every phase
/// of its checkpoints (twice each), then restored on a new machine from the container alone.
#[test]
fn a_rocksdb_window_job_with_checkpoints_in_azure_blob_is_exactly_once_under_sigkill_and_restores_on_a_new_machine() {
    let dir = crate::slt::tempdir();
    let store = Azurite::start();
    let mut outputs = run(&write(
        &dir,
        "reference.sql",
        window_job(&store.settings("reference"), &dir, "reference", "reference-state", 1),
    ));
    let want = published(&dir.join("reference"));
    assert!(want.len() > 1000, "reference has {} rows", want.len());
    let sql = write(&dir, "job.sql", window_job(&store.settings("out"), &dir, "out", "state", 2));
    let faults = dir.join("faults");
    let phases = [Phase::Processing, Phase::Uploading, Phase::PreCommitted, Phase::Committing, Phase::Restoring];
    kill_in_phases(
        &phases,
        Phase::Processing,
        2,
        10,
        |p| start(&sql, p, &faults, "file"),
        |p| in_phase(p, &faults, "file"),
    );
    assert!(!files_under(&dir).iter().any(|f| f.ends_with("manifest.json")), "a checkpoint was written locally");
    std::fs::remove_dir_all(dir.join("state")).expect("forget the local state");
    outputs.push_str(&run(&sql));
    assert_same_rows(&published(&dir.join("out")), &want);
    assert!(!outputs.contains(AZURITE_KEY), "the account key was printed");
}

fn write(dir: &Path, name: &str, sql: String) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, sql).expect("sql");
    path
}

/// The upsert-kafka crash test (an updating aggregate, exactly once into Kafka, SIGKILLed in
/// every phase) with its checkpoints in the bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_updating_aggregate_into_exactly_once_kafka_with_checkpoints_in_s3_is_exactly_once_under_sigkill() {
    let store = ObjectStore::start();
    let in_bucket = |bootstrap: &str, out: &str, delivery: &str, checkpoints: &Path, rate: Option<u32>| {
        let sql = crate::kafka_upsert::job(bootstrap, out, delivery, checkpoints, rate);
        let local = format!("SET 'checkpoint.dir' = '{}';\n", checkpoints.display());
        assert!(sql.contains(&local), "the job sets its checkpoint directory");
        let name = checkpoints.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        sql.replace(&local, &store.settings(&name))
    };
    let (want, tombstones, got) = crate::kafka_upsert::reference_and_killed(in_bucket).await;
    assert!(want.len() > 5 && tombstones > 0, "reference: {} keys, {tombstones} tombstones", want.len());
    assert_eq!(got.len(), want.len(), "keys differ in number from the uninterrupted run");
    assert!(got == want, "rows differ from the uninterrupted run");
    let keys = store.keys("checkpoints/");
    assert!(keys.iter().any(|k| k.ends_with("/manifest.json")), "no checkpoint in the bucket: {keys:?}");
}

#[test]
fn an_unreachable_store_is_an_error_at_the_start_naming_the_url_without_credentials() {
    let dir = crate::slt::tempdir();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let sql = dir.join("job.sql");
    std::fs::write(
        &sql,
        format!(
            "SET 'checkpoint.interval' = '1s';
SET 'checkpoint.dir' = 's3://user:{SECRET}@weir/jobs';
SET 's3.endpoint' = 'http://127.0.0.1:{closed}';
SET 's3.access-key' = 'weir-test';
SET 's3.secret-key' = '{SECRET}';
CREATE TABLE bid (auction BIGINT) WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '10');
CREATE TABLE out (auction BIGINT) WITH ('connector' = 'blackhole');
INSERT INTO out SELECT auction FROM bid;
"
        ),
    )
    .expect("sql");
    let out = Command::new(weir_bin()).arg("run").arg(&sql).output().expect("weir run");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "started without its checkpoint storage: {text}");
    assert!(text.contains("checkpoint storage: cannot write 's3://weir/jobs/insert-into-out/owner'"), "{text}");
    assert!(!text.contains(SECRET), "a secret was printed: {text}");
    let errors = String::from_utf8_lossy(&out.stderr);
    assert_eq!(errors.trim().lines().count(), 1, "not one line: {errors}");
    assert!(errors.contains("job.sql:8:1: error: "), "the INSERT's position: {errors}");
}

#[test]
fn a_store_that_goes_away_fails_checkpoints_then_the_job_past_the_tolerable_failures() {
    let dir = crate::slt::tempdir();
    let store = ObjectStore::start();
    let sql = dir.join("job.sql");
    std::fs::write(
        &sql,
        format!(
            "SET 'checkpoint.interval' = '100ms';
{storage}SET 'checkpoint.tolerable-failures' = '2';
SET 'restart.attempts' = '0';
SET 'state.backend' = 'rocksdb';
SET 'state.dir' = '{state}';
CREATE TABLE bid (auction BIGINT) WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '100000000', 'rate' = '1000');
CREATE TABLE out (auction BIGINT, n BIGINT) WITH ('connector' = 'blackhole');
INSERT INTO out SELECT auction, COUNT(*) FROM bid GROUP BY auction;
",
            storage = store.settings("gone"),
            state = dir.join("state").display()
        ),
    )
    .expect("sql");
    let log = std::fs::File::create(dir.join("job.log")).expect("log");
    let mut job = Command::new(weir_bin()).arg("run").arg(&sql).stdout(Stdio::null()).stderr(log).spawn().expect("job");
    let deadline = Instant::now() + Duration::from_secs(60);
    while store.keys("gone/").iter().filter(|k| k.ends_with("/manifest.json")).count() < 2 {
        assert!(Instant::now() < deadline, "no checkpoints completed");
        assert!(job.try_wait().expect("poll").is_none(), "the job ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(store);
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = job.try_wait().expect("poll") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = job.kill();
            panic!("the job went on without its checkpoint storage");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = std::fs::read_to_string(dir.join("job.log")).expect("log");
    assert!(!status.success(), "{text}");
    assert!(
        text.contains("3 checkpoints in a row failed, more than 'checkpoint.tolerable-failures' = 2 allows"),
        "{text}"
    );
    assert!(text.contains("s3://weir/gone/insert-into-out"), "{text}");
    assert!(!text.contains(SECRET), "a secret was printed: {text}");
}

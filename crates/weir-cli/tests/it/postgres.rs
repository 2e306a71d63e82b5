//! The `jdbc` connector against a real PostgreSQL server on loopback, a throwaway cluster
//! started by the project's script (`scripts/postgres.sh`) as an unprivileged user. What the
//! sink wrote is read back with `psql`, and the expected rows come from PostgreSQL itself
//! (its own `GROUP BY` over the bids, appended): nothing of Weir's checks Weir.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::kafka::{bids_table, load_bids, run_to_end, write_sql, Broker};
use crate::kills::{in_phase, kill_in_phases, start, Phase};
use crate::{repo, weir_bin};

/// A server for one test; stopped (and its directory removed) on drop.
pub struct Postgres {
    dir: PathBuf,
    pub port: u16,
    /// The postmaster's.
    pub pid: u32,
}

impl Postgres {
    pub fn start(dir: &Path) -> Postgres {
        Self::start_with(dir, 64)
    }

    /// A server whose `max_prepared_transactions` is `max_prepared`.
    pub fn start_with(dir: &Path, max_prepared: u32) -> Postgres {
        let dir = dir.join(format!("postgres-{max_prepared}"));
        let out = Command::new(repo().join("scripts/postgres.sh"))
            .arg("start")
            .arg(&dir)
            .env("WEIR_POSTGRES_MAX_PREPARED", max_prepared.to_string())
            .output()
            .expect("run scripts/postgres.sh");
        assert!(out.status.success(), "postgres did not start: {}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut words = stdout.split_whitespace();
        let port = words.next().and_then(|p| p.parse().ok()).expect("port");
        let pid = words.next().and_then(|p| p.parse().ok()).expect("pid");
        Postgres { dir, port, pid }
    }

    pub fn url(&self) -> String {
        format!("jdbc:postgresql://127.0.0.1:{}/weir", self.port)
    }

    /// Run SQL with `psql`; its rows as `a|b|c` lines.
    pub fn psql(&self, sql: &str) -> Vec<String> {
        let out = Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "weir", "-d", "weir"])
            .args(["-X", "-q", "-At", "-F", "|", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .output()
            .expect("run psql");
        assert!(out.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
    }

    /// A server with the tables `sql-tests/jdbc.slt` expects; its port is for
    /// `WEIR_TEST_POSTGRES_PORT`.
    pub fn for_sql_tests(dir: &Path) -> Postgres {
        let pg = Postgres::start(dir);
        pg.psql(
            "CREATE TABLE slt_mismatch (id bigint PRIMARY KEY, name integer);
             CREATE TABLE slt_nokey (id bigint, n bigint);",
        );
        pg
    }

    pub fn count(&self, table: &str) -> usize {
        self.psql(&format!("SELECT count(*) FROM {table}"))[0].parse().expect("count")
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("scripts/postgres.sh")).arg("stop").arg(&self.dir).output();
    }
}

/// Bids among the first 20,000 Nexmark events, loaded into the Kafka topic `bids`.
pub(crate) const BIDS: usize = 18_400;

pub(crate) fn settings(checkpoints: &Path) -> String {
    format!(
        "SET 'parallelism' = '2';
SET 'checkpoint.interval' = '100ms';
SET 'checkpoint.dir' = '{}';
SET 'restart.attempts' = '0';",
        checkpoints.display()
    )
}

/// The Kafka topic of bids, read to its end (paced, so that a run lasts long enough to be
/// killed in every phase).
pub(crate) fn bids(broker: &Broker, rate: Option<u32>) -> String {
    let rate = rate.map(|r| format!(", 'scan.records-per-second' = '{r}'")).unwrap_or_default();
    format!("{};", bids_table(&broker.bootstrap, "bids", &rate))
}

/// A broker with the bids, and a PostgreSQL server.
pub(crate) async fn servers(dir: &Path) -> (Broker, Postgres) {
    let broker = Broker::start(dir);
    load_bids(&broker, 20_000).await;
    (broker, Postgres::start(dir))
}

pub(crate) fn sink(pg: &Postgres, name: &str, columns: &str, delivery: &str) -> String {
    format!(
        "CREATE TABLE {name} ({columns})
  WITH ('connector' = 'jdbc', 'url' = '{}', 'table-name' = '{name}', 'username' = 'weir',
        'sink.delivery-guarantee' = '{delivery}');",
        pg.url()
    )
}

/// Every bid appended (no key) into `bid_log`; PostgreSQL computes the expected rows from it.
pub(crate) fn load_bid_log(dir: &Path, broker: &Broker, pg: &Postgres) {
    pg.psql("CREATE TABLE bid_log (auction bigint, bidder bigint, price bigint, date_time timestamp)");
    let sql = format!(
        "{}\n{}\n{}\nINSERT INTO bid_log SELECT auction, bidder, price, date_time FROM bids;",
        settings(&dir.join("log-ck")),
        bids(broker, None),
        sink(pg, "bid_log", "auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3)", "exactly-once")
    );
    run_to_end(&write_sql(dir, "log.sql", sql));
    assert_eq!(pg.count("bid_log"), BIDS, "bids appended");
}

/// Bids per auction, then auctions per bid count: as counts grow, auctions leave their
/// count's row, rows empty (deletes) and MIN/MAX take values back.
pub(crate) const BY_COUNT: &str = "n BIGINT, auctions BIGINT, lowest BIGINT, highest BIGINT, total DECIMAL(20, 2), \
                        PRIMARY KEY (n) NOT ENFORCED";
pub(crate) const BY_COUNT_QUERY: &str =
    "SELECT n, COUNT(*), MIN(auction), MAX(auction), CAST(SUM(spent) AS DECIMAL(20, 2)) \
    FROM (SELECT auction, COUNT(*) AS n, SUM(price) AS spent FROM bids GROUP BY auction) GROUP BY n";
pub(crate) const BY_COUNT_PG: &str = "SELECT n, count(*), min(auction), max(auction), sum(spent)::numeric(20, 2) \
    FROM (SELECT auction, count(*) AS n, sum(price) AS spent FROM bid_log GROUP BY auction) a GROUP BY n ORDER BY n";

/// Values of every type the sink writes, with NULLs, quotes and a key whose row is
/// updated and deleted, through each delivery guarantee at parallelism 1 and 2.
#[test]
fn every_type_and_delivery_writes_the_same_rows() {
    let dir = crate::slt::tempdir();
    let pg = Postgres::start(&dir);
    let mut results = BTreeMap::new();
    for delivery in ["exactly-once", "at-least-once", "none"] {
        for p in [1, 2] {
            let name = format!("t_{}_{p}", delivery.replace('-', "_"));
            pg.psql(&format!(
                "CREATE TABLE {name} (k text PRIMARY KEY, b boolean, i2 smallint, i4 integer, i8 bigint, f4 real,
                   f8 double precision, d numeric(12, 3), s varchar(40), bin bytea, day date, ts timestamp(3),
                   tz timestamptz, extra text DEFAULT 'kept')"
            ));
            let sql = format!(
                "SET 'parallelism' = '{p}';
SET 'checkpoint.interval' = '50ms';
SET 'checkpoint.dir' = '{ck}';
{sink}
CREATE VIEW v AS SELECT * FROM (VALUES
  ('a', true, 1, 10, 100, 1.5, 2.25, CAST(1.125 AS DECIMAL(10, 3)), 'it''s', X'00ff', DATE '2024-02-29', TIMESTAMP '2024-02-29 23:59:59.999',
   TIMESTAMP '1999-12-31 23:00:00', 1),
  ('b', CAST(NULL AS BOOLEAN), CAST(NULL AS INT), CAST(NULL AS INT), CAST(NULL AS BIGINT), CAST(NULL AS DOUBLE),
   CAST(NULL AS DOUBLE), CAST(NULL AS DECIMAL(10, 3)), CAST(NULL AS STRING), NULLIF(X'01', X'01'),
   CAST(NULL AS DATE), CAST(NULL AS TIMESTAMP(3)), CAST(NULL AS TIMESTAMP(3)), 1),
  ('a', false, -7, -70, -1, -0.5, 1e300, CAST(-0.001 AS DECIMAL(10, 3)), 'tab\there \"q\"', X'0000', DATE '1970-01-01', TIMESTAMP '1969-07-20 20:17:40',
   TIMESTAMP '2038-01-19 03:14:08', 1),
  ('gone', true, 0, 0, 0, 0.0, 0.0, CAST(0 AS DECIMAL(10, 3)), 'x', X'01', DATE '2000-01-01', TIMESTAMP '2000-01-01 00:00:00',
   TIMESTAMP '2000-01-01 00:00:00', 0))
  AS v(k, b, i2, i4, i8, f4, f8, d, s, bin, day, ts, tz, keep);
INSERT INTO {name}
SELECT k, MAX(b), CAST(MAX(i2) AS SMALLINT), CAST(MAX(i4) AS INT), SUM(i8), CAST(MAX(f4) AS FLOAT), MAX(f8),
       CAST(SUM(d) AS DECIMAL(12, 3)), MAX(s), MAX(bin), MAX(day), MAX(ts), MAX(tz)
FROM v
GROUP BY k HAVING SUM(keep) > 0;",
                ck = dir.join(format!("ck-{name}")).display(),
                sink = sink(
                    &pg,
                    &name,
                    "k STRING, b BOOLEAN, i2 SMALLINT, i4 INT, i8 BIGINT, f4 FLOAT, f8 DOUBLE, d DECIMAL(12, 3), \
                     s STRING, bin BYTES, day DATE, ts TIMESTAMP(3), tz TIMESTAMP_LTZ(3), PRIMARY KEY (k) NOT ENFORCED",
                    delivery
                ),
            );
            run_to_end(&write_sql(&dir, &format!("{name}.sql"), sql));
            results.insert(name.clone(), pg.psql(&format!("SELECT * FROM {name} ORDER BY k")));
        }
    }
    let first = results.values().next().cloned().expect("results");
    assert_eq!(first.len(), 2, "{first:?}");
    assert_eq!(
        first[0],
        "a|t|1|10|99|1.5|1e+300|1.124|tab\there \"q\"|\\x00ff|2024-02-29|2024-02-29 23:59:59.999|2038-01-19 03:14:08+00|kept"
    );
    assert_eq!(first[1], format!("b{}kept", "|".repeat(13)));
    for (name, rows) in &results {
        assert_eq!(rows, &first, "{name} differs");
    }
}

/// Exactly-once against a server that cannot prepare transactions is refused at the INSERT,
/// with the fix; at-least-once into the same table (with its key) runs.
#[test]
fn exactly_once_needs_prepared_transactions() {
    let dir = crate::slt::tempdir();
    let pg = Postgres::start_with(&dir, 0);
    pg.psql("CREATE TABLE counts (k bigint PRIMARY KEY, n bigint)");
    let job = |delivery: &str| {
        format!(
            "{}\nCREATE VIEW v AS SELECT * FROM (VALUES (1), (2), (1)) AS v(k);
INSERT INTO counts SELECT k, COUNT(*) FROM v GROUP BY k;",
            sink(&pg, "counts", "k BIGINT, n BIGINT, PRIMARY KEY (k) NOT ENFORCED", delivery)
        )
    };
    let out =
        Command::new(weir_bin()).arg("run").arg(write_sql(&dir, "eo.sql", job("exactly-once"))).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("has max_prepared_transactions = 0. Set max_prepared_transactions in postgresql.conf"),
        "{stderr}"
    );
    assert!(stderr.contains("or write with 'sink.delivery-guarantee' = 'at-least-once'"), "{stderr}");
    assert_eq!(pg.count("counts"), 0);
    run_to_end(&write_sql(&dir, "alo.sql", job("at-least-once")));
    assert_eq!(pg.psql("SELECT * FROM counts ORDER BY k"), ["1|2", "2|1"]);
}

/// Killed at p=2 with transactions prepared (before their checkpoint completed, and after),
/// resumed at p=3 and p=1: the tasks of the new run commit or roll back the old tasks'
/// transactions, and the table is exact. (Nexmark: the Kafka source does not restore at
/// another parallelism.)
#[test]
fn exactly_once_resumes_at_another_parallelism() {
    let dir = crate::slt::tempdir();
    let pg = Postgres::start(&dir);
    let nexmark = |rate: &str| {
        format!(
            "CREATE TABLE bids (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3))
  WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '60000'{rate});"
        )
    };
    pg.psql("CREATE TABLE bid_log (auction bigint, bidder bigint, price bigint, date_time timestamp)");
    run_to_end(&write_sql(
        &dir,
        "log.sql",
        format!(
            "{}\n{}\nINSERT INTO bid_log SELECT * FROM bids;",
            nexmark(""),
            sink(&pg, "bid_log", "auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3)", "none")
        ),
    ));
    let want = pg.psql(BY_COUNT_PG);
    pg.psql("CREATE TABLE by_count (n bigint PRIMARY KEY, auctions bigint, lowest bigint, highest bigint, total numeric(20, 2))");
    let checkpoints = dir.join("checkpoints");
    let job = |p: usize| {
        let sql = format!(
            "{}\n{}\n{}\nINSERT INTO by_count {BY_COUNT_QUERY};",
            settings(&checkpoints).replace("'parallelism' = '2'", &format!("'parallelism' = '{p}'")),
            nexmark(", 'rate' = '3000'"),
            sink(&pg, "by_count", BY_COUNT, "exactly-once")
        );
        write_sql(&dir, &format!("p{p}.sql"), sql)
    };
    let faults = dir.join("faults");
    for (p, phase) in [(2, Phase::PreCommitted), (3, Phase::Committing), (1, Phase::PreCommitted)] {
        let _ = std::fs::remove_dir_all(&faults);
        std::fs::create_dir_all(&faults).expect("fault dir");
        let log = dir.join(format!("p{p}.log"));
        let mut child = Command::new(weir_bin())
            .arg("run")
            .arg(job(p))
            .env("WEIR_FAULT_DIR", &faults)
            .env("WEIR_FAULT_MANIFEST_MS", if phase == Phase::PreCommitted { "300" } else { "0" })
            .env("WEIR_FAULT_POSTGRES_COMMIT_MS", if phase == Phase::Committing { "300" } else { "0" })
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("start weir");
        let deadline = Instant::now() + Duration::from_secs(20);
        let prepared = "SELECT (SELECT count(*) FROM by_count) > 0 AND (SELECT count(*) FROM pg_prepared_xacts) > 0";
        let mut ended = None;
        while !(in_phase(phase, &faults, "postgres") && pg.psql(prepared) == ["t"]) {
            assert!(Instant::now() < deadline, "p={p} never reached {phase:?} with transactions prepared");
            if let Some(status) = child.try_wait().expect("poll") {
                ended = Some(status);
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        match ended {
            // The last restore (p=1) may have little input left and end first; it still
            // restored p=3's checkpoint, with the transactions the kill at p=3 left prepared.
            Some(status) if p == 1 => {
                assert!(status.success(), "p=1 failed: {}", std::fs::read_to_string(&log).unwrap_or_default());
            }
            Some(_) => {
                panic!("p={p} ended before it was killed: {}", std::fs::read_to_string(&log).unwrap_or_default())
            }
            None => {
                child.kill().expect("SIGKILL");
                child.wait().expect("reap");
            }
        }
    }
    run_to_end(&job(3));
    let got = pg.psql("SELECT * FROM by_count ORDER BY n");
    assert!(got == want, "rows differ from PostgreSQL's own GROUP BY after restores at p=3 and p=1");
    assert!(pg.psql("SELECT gid FROM pg_prepared_xacts").is_empty(), "a prepared transaction was left behind");
}

/// A lookup join against a PostgreSQL table (Flink's JDBC lookup source): every bid asks
/// for its auction's row, with and without a cache; the rows equal PostgreSQL's own LEFT
/// JOIN of the same bids with the table (auctions missing from it padded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_join_asks_postgres_for_each_key() {
    let dir = crate::slt::tempdir();
    let (broker, pg) = servers(&dir).await;
    load_bid_log(&dir, &broker, &pg);
    // Every third auction is missing; NULLs and quotes among the values.
    pg.psql(
        "CREATE TABLE auction_dim (id bigint PRIMARY KEY, seller bigint, item text, reserve numeric(12, 2), listed timestamp);
         INSERT INTO auction_dim
           SELECT a, a % 97, CASE WHEN a % 5 = 0 THEN NULL ELSE 'item ''' || a || '''' END, a * 1.25,
                  TIMESTAMP '2024-01-01' + a * INTERVAL '1 minute'
           FROM generate_series(900, 3000) a WHERE a % 3 <> 0;",
    );
    let want = pg.psql(
        "SELECT b.auction, b.price, d.seller, d.item, d.reserve, d.listed FROM bid_log b
         LEFT JOIN auction_dim d ON b.auction = d.id ORDER BY 1, 2, 3, 4, 5, 6",
    );
    assert!(want.iter().any(|r| r.ends_with("|||")), "no bid without its auction");
    for (name, cache) in
        [("uncached", ""), ("cached", ", 'lookup.cache.max-rows' = '300', 'lookup.cache.ttl' = '10min'")]
    {
        pg.psql(&format!(
            "CREATE TABLE joined_{name} (auction bigint, price bigint, seller bigint, item text, reserve numeric(12, 2),
               listed timestamp)"
        ));
        // A lookup of a live table as of processing time decides which rows join: accepted
        // deliberately here (the table does not change while the job runs).
        let sql = format!(
            "{}\nSET 'execution.allow-nondeterminism' = 'true';\n{}\nCREATE TABLE dim (id BIGINT, seller BIGINT, item STRING, reserve DECIMAL(12, 2), listed TIMESTAMP(3),
  PRIMARY KEY (id) NOT ENFORCED)
  WITH ('connector' = 'jdbc', 'url' = '{}', 'table-name' = 'auction_dim', 'username' = 'weir'{cache});
{}
INSERT INTO joined_{name}
SELECT B.auction, B.price, D.seller, D.item, D.reserve, D.listed
FROM (SELECT *, PROCTIME() AS p FROM bids) AS B
LEFT JOIN dim FOR SYSTEM_TIME AS OF B.p AS D ON B.auction = D.id;",
            settings(&dir.join(format!("ck-{name}"))),
            bids(&broker, None),
            pg.url(),
            sink(
                &pg,
                &format!("joined_{name}"),
                "auction BIGINT, price BIGINT, seller BIGINT, item STRING, reserve DECIMAL(12, 2), listed TIMESTAMP(3)",
                "exactly-once"
            ),
        );
        run_to_end(&write_sql(&dir, &format!("{name}.sql"), sql));
        let got = pg.psql(&format!("SELECT * FROM joined_{name} ORDER BY 1, 2, 3, 4, 5, 6"));
        assert_eq!(got.len(), BIDS, "{name}: rows");
        assert!(got == want, "{name}: rows differ from PostgreSQL's own join");
    }
}

/// The server ends the sink's sessions again and again while a job runs (as a restart or a
/// network failure would): the sink opens new connections and retries, the job finishes
/// without a restart, and the table is exact, for each delivery guarantee.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_connections_are_retried() {
    let dir = crate::slt::tempdir();
    let (broker, pg) = servers(&dir).await;
    load_bid_log(&dir, &broker, &pg);
    let want = pg.psql(BY_COUNT_PG);
    for delivery in ["exactly-once", "at-least-once"] {
        let table = format!("by_count_{}", delivery.replace('-', "_"));
        pg.psql(&format!(
            "CREATE TABLE {table} (n bigint PRIMARY KEY, auctions bigint, lowest bigint, highest bigint, total numeric(20, 2))"
        ));
        let sql = format!(
            "{}\n{}\n{}\nINSERT INTO {table} {BY_COUNT_QUERY};",
            settings(&dir.join(format!("ck-{table}"))),
            bids(&broker, Some(3000)),
            sink(&pg, &table, BY_COUNT, delivery).replace(
                "'sink.delivery-guarantee'",
                "'sink.max-retries' = '10', 'sink.buffer-flush.max-rows' = '50', 'sink.delivery-guarantee'"
            )
        );
        let mut child = Command::new(weir_bin())
            .arg("run")
            .arg(write_sql(&dir, &format!("{table}.sql"), sql))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start weir");
        let mut ended = 0;
        while child.try_wait().expect("poll").is_none() {
            let n: usize = pg.psql(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE application_name LIKE '%weir-insert-into-%' AND pid <> pg_backend_pid()) t",
            )[0]
            .parse()
            .expect("count");
            ended += n;
            std::thread::sleep(Duration::from_millis(300));
        }
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{delivery}: the job failed: {stderr}");
        println!("{delivery}: {ended} sessions ended under the running job");
        assert!(ended >= 3, "{delivery}: only {ended} sessions were ended");
        assert!(stderr.contains("on a new connection"), "{delivery}: no retry was logged: {stderr}");
        let got = pg.psql(&format!("SELECT * FROM {table} ORDER BY n"));
        assert!(got == want, "{delivery}: rows differ from PostgreSQL's own GROUP BY");
    }
}

/// An unbounded stream that goes quiet: its last rows are flushed by age
/// (`'sink.buffer-flush.interval'`), not held until more come, with no checkpoint to flush
/// them either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_stream_is_flushed_by_age() {
    let dir = crate::slt::tempdir();
    let (broker, pg) = servers(&dir).await;
    pg.psql("CREATE TABLE quiet (auction bigint, price bigint)");
    let sql = format!(
        "SET 'parallelism' = '2';
CREATE TABLE bids (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3))
  WITH ('connector' = 'kafka', 'topic' = 'bids', 'properties.bootstrap.servers' = '{}', 'format' = 'json',
        'scan.startup.mode' = 'earliest-offset');
{}
INSERT INTO quiet SELECT auction, price FROM bids;",
        broker.bootstrap,
        sink(&pg, "quiet", "auction BIGINT, price BIGINT", "at-least-once").replace(
            "'sink.delivery-guarantee'",
            "'sink.buffer-flush.max-rows' = '1000000', 'sink.buffer-flush.interval' = '200ms', 'sink.delivery-guarantee'"
        )
    );
    let mut child = Command::new(weir_bin())
        .arg("run")
        .arg(write_sql(&dir, "quiet.sql", sql))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start weir");
    let deadline = Instant::now() + Duration::from_secs(30);
    while pg.count("quiet") < BIDS {
        assert!(Instant::now() < deadline, "only {} of {BIDS} rows written after 30 s", pg.count("quiet"));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(child.try_wait().expect("poll").is_none(), "the unbounded job ended");
    child.kill().expect("kill");
    child.wait().expect("reap");
    assert_eq!(pg.count("quiet"), BIDS);
}

/// The lookup cache, seen from outside: after a key's row changes in PostgreSQL, a job with
/// a long-lived cache goes on joining the old row, one whose TTL has passed and one without a
/// cache join the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lookup_cache_keeps_rows_for_its_ttl() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    let pg = Postgres::start(&dir);
    broker.create_topic("events", 1).await;
    pg.psql("CREATE TABLE dim (k bigint PRIMARY KEY, v text); INSERT INTO dim VALUES (1, 'old'), (2, 'other');");
    let caches = [
        ("long", ", 'lookup.cache.max-rows' = '100', 'lookup.cache.ttl' = '10min'"),
        ("short", ", 'lookup.cache.max-rows' = '100', 'lookup.cache.ttl' = '500ms'"),
        ("none", ""),
    ];
    let mut children = Vec::new();
    for (name, cache) in caches {
        pg.psql(&format!("CREATE TABLE seen_{name} (n bigint, v text)"));
        let sql = format!(
            "CREATE TABLE events (k BIGINT, n BIGINT)
  WITH ('connector' = 'kafka', 'topic' = 'events', 'properties.bootstrap.servers' = '{}', 'format' = 'json',
        'scan.startup.mode' = 'earliest-offset');
CREATE TABLE d (k BIGINT, v STRING, PRIMARY KEY (k) NOT ENFORCED)
  WITH ('connector' = 'jdbc', 'url' = '{}', 'table-name' = 'dim', 'username' = 'weir'{cache});
{}
INSERT INTO seen_{name} SELECT E.n, D.v FROM (SELECT *, PROCTIME() AS p FROM events) AS E
JOIN d FOR SYSTEM_TIME AS OF E.p AS D ON E.k = D.k;",
            broker.bootstrap,
            pg.url(),
            sink(&pg, &format!("seen_{name}"), "n BIGINT, v STRING", "at-least-once").replace(
                "'sink.delivery-guarantee'",
                "'sink.buffer-flush.interval' = '50ms', 'sink.delivery-guarantee'"
            )
        );
        let child = Command::new(weir_bin())
            .arg("run")
            .arg(write_sql(&dir, &format!("{name}.sql"), sql))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start weir");
        children.push(child);
    }
    let wave = |from: i64| -> Vec<(&str, i32, String, Option<i64>)> {
        (from..from + 10).map(|n| ("events", 0, format!("{{\"k\": 1, \"n\": {n}}}"), None)).collect()
    };
    let wait_for = |rows: usize| {
        let deadline = Instant::now() + Duration::from_secs(30);
        for (name, _) in caches {
            while pg.count(&format!("seen_{name}")) < rows {
                assert!(Instant::now() < deadline, "seen_{name} has fewer than {rows} rows");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    broker.produce(&wave(0));
    wait_for(10);
    pg.psql("UPDATE dim SET v = 'new' WHERE k = 1");
    std::thread::sleep(Duration::from_millis(1200));
    broker.produce(&wave(10));
    wait_for(20);
    for mut child in children {
        child.kill().expect("kill");
        child.wait().expect("reap");
    }
    let count = |name: &str, v: &str| pg.psql(&format!("SELECT count(*) FROM seen_{name} WHERE v = '{v}'"));
    assert_eq!((count("long", "old"), count("long", "new")), (vec!["20".to_string()], vec!["0".to_string()]));
    for name in ["short", "none"] {
        assert_eq!(
            (count(name, "old"), count(name, "new")),
            (vec!["10".to_string()], vec!["10".to_string()]),
            "{name}"
        );
    }
}

/// The server goes away for good while a job writes: the sink retries `'sink.max-retries'`
/// times with backoff, then the job fails, naming the table (it does not skip the rows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stays_away_fails_the_job_after_its_retries() {
    let dir = crate::slt::tempdir();
    let (broker, pg) = servers(&dir).await;
    pg.psql("CREATE TABLE gone (auction bigint, price bigint)");
    let sql = format!(
        "{}\n{}\n{}\nINSERT INTO gone SELECT auction, price FROM bids;",
        settings(&dir.join("ck")),
        bids(&broker, Some(2000)),
        sink(&pg, "gone", "auction BIGINT, price BIGINT", "at-least-once")
            .replace("'sink.delivery-guarantee'", "'sink.max-retries' = '2', 'sink.delivery-guarantee'")
    );
    let child = Command::new(weir_bin())
        .arg("run")
        .arg(write_sql(&dir, "gone.sql", sql))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weir");
    let deadline = Instant::now() + Duration::from_secs(20);
    while pg.count("gone") == 0 {
        assert!(Instant::now() < deadline, "nothing written");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The whole server, at once: its postmaster and every backend.
    let _ = Command::new("pkill").args(["-KILL", "-P", &pg.pid.to_string()]).status();
    let _ = Command::new("kill").args(["-KILL", &pg.pid.to_string()]).status();
    let started = Instant::now();
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the job went on without its server");
    assert!(stderr.contains("table 'gone', after 2 retries"), "{stderr}");
    assert!(stderr.contains("retry 2 of 2 on a new connection"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(30), "it took {:?} to give up", started.elapsed());
}

/// An updating result into a table without a key, exactly once: each retraction deletes one
/// equal row in the checkpoint's transaction; killed a few times, the table holds exactly
/// the final rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_retractions_without_a_key_delete_one_equal_row() {
    let dir = crate::slt::tempdir();
    let (broker, pg) = servers(&dir).await;
    load_bid_log(&dir, &broker, &pg);
    let want = pg.psql(BY_COUNT_PG);
    pg.psql("CREATE TABLE by_count (n bigint, auctions bigint, lowest bigint, highest bigint, total numeric(20, 2))");
    let checkpoints = dir.join("checkpoints");
    let sql = format!(
        "{}\n{}\n{}\nINSERT INTO by_count {BY_COUNT_QUERY};",
        settings(&checkpoints),
        bids(&broker, Some(2000)),
        sink(&pg, "by_count", &BY_COUNT.replace(", PRIMARY KEY (n) NOT ENFORCED", ""), "exactly-once")
            .replace("'sink.delivery-guarantee'", "'sink.buffer-flush.max-rows' = '30', 'sink.delivery-guarantee'")
    );
    let sql = write_sql(&dir, "job.sql", sql);
    let faults = dir.join("faults");
    kill_in_phases(
        &[Phase::Processing, Phase::PreCommitted, Phase::Committing],
        Phase::Processing,
        1,
        3,
        |phase| start(&sql, phase, &faults, "postgres"),
        |phase| in_phase(phase, &faults, "postgres"),
    );
    run_to_end(&sql);
    let got = pg.psql("SELECT * FROM by_count ORDER BY n");
    assert!(got == want, "rows differ from PostgreSQL's own GROUP BY:\n{got:?}\n{want:?}");
}

/// Checkpoints given up: each sink task's barrier is slowed past the checkpoint timeout, so
/// the coordinator abandons checkpoints whose transactions are prepared. The next barrier
/// rolls each back and writes its rows again, and the end of the input commits them all
/// through the final checkpoint: the table is exact and nothing stays prepared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_of_checkpoints_given_up_are_written_again() {
    let dir = crate::slt::tempdir();
    let (broker, pg) = servers(&dir).await;
    load_bid_log(&dir, &broker, &pg);
    let want = pg.psql(BY_COUNT_PG);
    pg.psql("CREATE TABLE by_count (n bigint PRIMARY KEY, auctions bigint, lowest bigint, highest bigint, total numeric(20, 2))");
    let sql = format!(
        // Every checkpoint times out here: far more than the default 10 in a row, after which
        // the job would fail (and this test is about the rows, not that limit).
        "{}\nSET 'checkpoint.timeout' = '150ms';\nSET 'checkpoint.tolerable-failures' = '100000';\n{}\n{}\nINSERT INTO by_count {BY_COUNT_QUERY};",
        settings(&dir.join("ck")),
        bids(&broker, Some(6000)),
        sink(&pg, "by_count", BY_COUNT, "exactly-once")
    );
    let out = Command::new(weir_bin())
        .arg("run")
        .arg(write_sql(&dir, "job.sql", sql))
        .env("WEIR_FAULT_POSTGRES_PREPARE_MS", "250")
        .env("WEIR_LOG", "info")
        .output()
        .expect("run weir");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("timed out after"), "no checkpoint was given up:\n{stderr}");
    assert!(stderr.contains("was given up: its transaction"), "no transaction was written again:\n{stderr}");
    let got = pg.psql("SELECT * FROM by_count ORDER BY n");
    assert!(got == want, "rows differ from PostgreSQL's own GROUP BY");
    assert!(pg.psql("SELECT gid FROM pg_prepared_xacts").is_empty(), "a prepared transaction was left behind");
}

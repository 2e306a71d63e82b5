//! The Iceberg sink, read back by pyiceberg (scripts/lake.sh), an independent reader: rows,
//! snapshots (one per checkpoint, each recording it), the SQL catalog on a real PostgreSQL
//! server, partition pruning, errors, and exactly-once under SIGKILL with a reader polling.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as Json;

use crate::kills::{in_phase, kill_in_phases, start, Phase};
use crate::{repo, weir_bin};

/// `scripts/lake.sh args…`, its JSON output.
pub fn lake(args: &[&str]) -> Json {
    let out = Command::new(repo().join("scripts/lake.sh")).args(args).output().expect("run scripts/lake.sh");
    assert!(out.status.success(), "lake.sh {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("lake.sh prints JSON")
}

/// A server `scripts/lake.sh` serves (`registry`, `rest-catalog`), on the port it writes
/// into the file given after its first argument; killed on drop.
pub struct StandIn {
    child: std::process::Child,
    pub url: String,
}

impl StandIn {
    pub fn start(dir: &Path, args: &[&str]) -> StandIn {
        let port_file = dir.join(format!("{}-port", args[0]));
        let child = Command::new(repo().join("scripts/lake.sh"))
            .arg(args[0])
            .arg(&port_file)
            .args(&args[1..])
            .spawn()
            .expect("start a stand-in server");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !port_file.exists() {
            assert!(std::time::Instant::now() < deadline, "{} did not start", args[0]);
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let port = std::fs::read_to_string(&port_file).expect("port").trim().to_string();
        StandIn { child, url: format!("http://127.0.0.1:{port}") }
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A datagen table `name (id BIGINT)` of `rows` ids from `from` on, at `rate` rows a second.
pub fn sequence(name: &str, rows: u64, rate: u64, from: u64) -> String {
    format!(
        "CREATE TABLE {name} (id BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '{rows}',
  'rows-per-second' = '{rate}', 'fields.id.kind' = 'sequence', 'fields.id.start' = '{from}', 'fields.id.end' = '{}');\n",
        from + rows - 1
    )
}

/// The newest `v<N>.metadata.json` of a hadoop-catalog table.
pub fn newest_metadata(table: &Path) -> PathBuf {
    let dir = table.join("metadata");
    let n = std::fs::read_dir(&dir)
        .expect("metadata dir")
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().to_string();
            name.strip_prefix('v')?.strip_suffix(".metadata.json")?.parse::<u64>().ok()
        })
        .max()
        .expect("a metadata file");
    dir.join(format!("v{n}.metadata.json"))
}

pub fn read_table(table: &Path) -> Json {
    lake(&["table", newest_metadata(table).to_str().expect("utf-8 path")])
}

pub fn rows(t: &Json) -> Vec<String> {
    t["rows"].as_array().expect("rows").iter().map(|r| r.as_str().unwrap_or_default().to_string()).collect()
}

/// `weir run sql`, which must succeed: what it printed (stdout, then stderr).
pub fn run_ok(sql: &Path) -> String {
    let out = Command::new(weir_bin()).arg("run").arg(sql).output().expect("run weir");
    assert!(out.status.success(), "weir run failed: {}", String::from_utf8_lossy(&out.stderr));
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

pub fn run_err(sql: &Path) -> String {
    let out = Command::new(weir_bin()).arg("run").arg(sql).output().expect("run weir");
    assert!(!out.status.success(), "weir run should have failed: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The checkpoint a data file's name records: `<job uuid>-<task>-<checkpoint>-<seq>-<tag>.parquet`.
fn checkpoint_of(file: &str) -> u64 {
    let parts: Vec<&str> = file.split('-').collect();
    assert!(parts.len() >= 9, "unexpected data file name {file}");
    parts[6].parse().expect("checkpoint in a data file name")
}

/// Every snapshot records a distinct checkpoint, holds the rows its summary counts, and
/// adds exactly the data files of its checkpoint (a reader sees whole checkpoints only).
/// Returns the checkpoints committed, in order.
pub fn assert_one_snapshot_per_checkpoint(t: &Json) -> Vec<u64> {
    let snapshots = t["snapshots"].as_array().expect("snapshots");
    assert!(!snapshots.is_empty(), "no snapshot");
    let mut before: BTreeSet<String> = BTreeSet::new();
    let mut checkpoints = Vec::new();
    for s in snapshots {
        let summary = &s["summary"];
        let n: u64 = summary["weir.max-committed-checkpoint-id"].as_str().expect("checkpoint id").parse().expect("id");
        assert!(summary["weir.job-id"].as_str().is_some_and(|j| !j.is_empty()), "no job id: {summary}");
        let files: BTreeSet<String> =
            s["files"].as_array().expect("files").iter().map(|f| f.as_str().unwrap_or_default().to_string()).collect();
        let added: Vec<&String> = files.difference(&before).collect();
        assert!(!added.is_empty(), "snapshot of checkpoint {n} adds no file");
        for f in &added {
            assert_eq!(checkpoint_of(f), n, "snapshot of checkpoint {n} adds {f}");
        }
        let total: u64 = summary["total-records"].as_str().expect("total-records").parse().expect("count");
        if summary.get("total-equality-deletes").and_then(Json::as_str).is_none_or(|d| d == "0") {
            assert_eq!(s["rows"].as_u64(), Some(total), "snapshot of checkpoint {n}: rows read vs its summary");
        }
        checkpoints.push(n);
        before = files;
    }
    let distinct: BTreeSet<u64> = checkpoints.iter().copied().collect();
    assert_eq!(distinct.len(), checkpoints.len(), "a checkpoint committed twice: {checkpoints:?}");
    checkpoints
}

const BIDS: &str = "CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP(3), \
     WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)";

/// [`window_job`] and, in the same file, an updating aggregate into an upsert table.
fn window_and_upsert_job(dir: &Path, name: &str, events: u64, rate: u64, warehouse: &Path) -> String {
    format!(
        "{}CREATE TABLE totals (auction BIGINT, cnt BIGINT, total BIGINT, PRIMARY KEY (auction) NOT ENFORCED)
  WITH ({}, 'upsert-enabled' = 'true');
INSERT INTO totals SELECT auction, COUNT(*), SUM(price) FROM bid GROUP BY auction;
",
        window_job(dir, name, events, rate, &hadoop(warehouse)),
        hadoop(warehouse)
    )
}

fn window_job(dir: &Path, name: &str, events: u64, rate: u64, sink: &str) -> String {
    format!(
        "SET 'checkpoint.interval' = '150ms';
SET 'checkpoint.dir' = '{ck}';
SET 'state.backend' = 'rocksdb';
SET 'state.dir' = '{state}';
{BIDS} WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '{events}', 'rate' = '{rate}');
CREATE TABLE out (auction BIGINT, window_start TIMESTAMP(3), cnt BIGINT, total BIGINT) WITH ({sink});
INSERT INTO out
SELECT auction, window_start, COUNT(*), SUM(price)
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND))
GROUP BY auction, window_start, window_end;
",
        ck = dir.join(format!("{name}-checkpoints")).display(),
        state = dir.join(format!("{name}-state")).display(),
    )
}

pub fn hadoop(warehouse: &Path) -> String {
    format!(
        "'connector' = 'iceberg', 'catalog-type' = 'hadoop', 'warehouse' = '{}', 'catalog-database' = 'db'",
        warehouse.display()
    )
}

/// A window aggregate into Iceberg holds exactly what the same job writes into CSV files,
/// and its history is one snapshot per checkpoint.
#[test]
fn window_aggregate_into_iceberg_equals_the_file_sink_one_snapshot_per_checkpoint() {
    let dir = crate::slt::tempdir();
    let wh = dir.join("wh");
    let sql = dir.join("ice.sql");
    std::fs::write(&sql, window_job(&dir, "ice", 200_000, 400_000, &hadoop(&wh))).expect("sql");
    run_ok(&sql);
    let csv = dir.join("csv.sql");
    let files = format!("'connector' = 'filesystem', 'format' = 'csv', 'path' = '{}'", dir.join("csv").display());
    std::fs::write(&csv, window_job(&dir, "csv", 200_000, 400_000, &files)).expect("sql");
    run_ok(&csv);

    let t = read_table(&wh.join("db").join("out"));
    let got = rows(&t);
    let mut want = crate::kills::published(&dir.join("csv"));
    // CSV writes `2015-07-15 00:00:00` as pyiceberg prints it, and the rest as numbers.
    want.iter_mut().for_each(|r| *r = r.replace(".000", ""));
    want.sort();
    assert!(want.len() > 1000, "only {} rows", want.len());
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
    let checkpoints = assert_one_snapshot_per_checkpoint(&t);
    assert!(checkpoints.len() >= 2, "one snapshot only: {checkpoints:?}");
    assert!(t["schema"].as_str().is_some_and(|s| s.contains("1: auction: optional long")), "{}", t["schema"]);
}

/// The SQL catalog in PostgreSQL, read by pyiceberg's own `SqlCatalog`; a second job appends;
/// a sink whose column types differ from the table's is refused naming the column; an
/// unreachable catalog is named.
#[test]
fn sql_catalog_on_postgresql_is_read_by_pyiceberg() {
    let dir = crate::slt::tempdir();
    let pg = crate::postgres::Postgres::start(&dir);
    let wh = dir.join("wh");
    let sink = |port: u16, columns: &str, checkpoints: &str| {
        format!(
            "SET 'checkpoint.interval' = '200ms';
SET 'checkpoint.dir' = '{ck}';
CREATE TABLE src (id BIGINT, name STRING) WITH ('connector' = 'datagen', 'number-of-rows' = '3000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '3000', 'fields.name.length' = '6');
CREATE TABLE out ({columns}) WITH ('connector' = 'iceberg', 'catalog-type' = 'sql', 'catalog-name' = 'lake',
  'uri' = 'jdbc:postgresql://127.0.0.1:{port}/weir', 'jdbc.user' = 'weir', 'warehouse' = '{wh}',
  'catalog-database' = 'sales', 'catalog-table' = 'items');
INSERT INTO out SELECT id, name FROM src;
",
            ck = dir.join(checkpoints).display(),
            wh = wh.display(),
        )
    };
    let sql = dir.join("job.sql");
    std::fs::write(&sql, sink(pg.port, "id BIGINT, name STRING", "ck1")).expect("sql");
    run_ok(&sql);
    let uri = format!("postgresql+psycopg2://weir@127.0.0.1:{}/weir", pg.port);
    let t = lake(&["sql-table", &uri, "lake", "sales.items"]);
    let first = rows(&t);
    assert_eq!(first.len(), 3000);
    let ids: BTreeSet<u64> = first.iter().filter_map(|r| r.split(',').next()?.parse().ok()).collect();
    assert_eq!(ids, (1..=3000).collect::<BTreeSet<u64>>());
    assert_one_snapshot_per_checkpoint(&t);
    assert_eq!(
        pg.psql("SELECT catalog_name, table_namespace, table_name, iceberg_type FROM iceberg_tables"),
        vec!["lake|sales|items|TABLE".to_string()]
    );

    // Another job (its own checkpoints, so its own job id) appends to the existing table.
    let again = dir.join("again.sql");
    std::fs::write(&again, sink(pg.port, "id BIGINT, name STRING", "ck2")).expect("sql");
    run_ok(&again);
    let t = lake(&["sql-table", &uri, "lake", "sales.items"]);
    assert_eq!(rows(&t).len(), 6000);
    let jobs: BTreeSet<&str> = t["snapshots"]
        .as_array()
        .expect("snapshots")
        .iter()
        .filter_map(|s| s["summary"]["weir.job-id"].as_str())
        .collect();
    assert_eq!(jobs.len(), 2, "two jobs' snapshots");

    let mismatch = dir.join("mismatch.sql");
    std::fs::write(&mismatch, sink(pg.port, "id INT, name STRING", "ck3")).expect("sql");
    let err = run_err(&mismatch);
    assert!(err.contains("column 'id' is INT here but long in the Iceberg table"), "{err}");

    // A closed port: nothing listens there once this listener is dropped.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let unreachable = dir.join("unreachable.sql");
    std::fs::write(&unreachable, sink(closed, "id BIGINT, name STRING", "ck4")).expect("sql");
    let err = run_err(&unreachable);
    assert!(err.contains("the sql catalog 'lake' cannot be reached"), "{err}");
    assert_eq!(rows(&lake(&["sql-table", &uri, "lake", "sales.items"])).len(), 6000, "nothing written by failed runs");
}

/// A table partitioned by day (and bucket) of its timestamps: pyiceberg plans only the files
/// of the days a filter asks for, and reads the same rows.
#[test]
fn day_partitions_are_pruned_by_pyiceberg() {
    let dir = crate::slt::tempdir();
    let input = dir.join("input");
    std::fs::create_dir_all(&input).expect("input dir");
    let mut csv = String::new();
    let mut second_day = 0;
    for i in 0..3000u64 {
        // Three days from 2024-03-01, a row every 86 s.
        let secs = 1_709_251_200 + i * 86;
        second_day += usize::from(secs / 86_400 - 19_783 == 1);
        let (d, s) = (secs / 86_400 - 19_783, secs % 86_400);
        csv.push_str(&format!("{i},2024-03-{:02} {:02}:{:02}:{:02}\n", d + 1, s / 3600, s / 60 % 60, s % 60));
    }
    std::fs::write(input.join("rows.csv"), csv).expect("csv");
    let wh = dir.join("wh");
    let sql = dir.join("job.sql");
    std::fs::write(
        &sql,
        format!(
            "CREATE TABLE src (id BIGINT, ts TIMESTAMP(3)) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
CREATE TABLE out (id BIGINT, ts TIMESTAMP(3)) WITH ({}, 'partition-by' = 'day(ts), bucket(4, id)');
INSERT INTO out SELECT id, ts FROM src;
",
            input.display(),
            hadoop(&wh)
        ),
    )
    .expect("sql");
    run_ok(&sql);
    let meta = newest_metadata(&wh.join("db").join("out"));
    let p = lake(&["prune", meta.to_str().expect("path"), "ts", "2024-03-02T00:00:00", "2024-03-03T00:00:00"]);
    let list = |k: &str| -> Vec<String> {
        p[k].as_array().expect("files").iter().map(|f| f.as_str().unwrap_or_default().to_string()).collect()
    };
    let (planned, all) = (list("planned"), list("all"));
    assert_eq!(all.len(), 12, "3 days x 4 buckets: {all:?}");
    assert_eq!(planned.len(), 4, "{planned:?}");
    assert!(planned.iter().all(|f| f.starts_with("data/ts_day=2024-03-02/id_bucket=")), "{planned:?}");
    let got = p["rows"].as_array().expect("rows").len();
    assert_eq!(got, second_day, "rows of 2024-03-02");
    assert!(p["rows"].as_array().expect("rows").iter().all(|r| r.as_str().is_some_and(|r| r.contains(",2024-03-02 "))));
}

/// Table options that cannot work are refused when the table is declared, naming the
/// option and its place.
#[test]
fn iceberg_options_are_checked_at_declaration() {
    let dir = crate::slt::tempdir();
    let cases = [
        ("'partition-by' = 'week(ts)'", "unsupported partition transform 'week'"),
        ("'partition-by' = 'bucket(0, id)'", "'0' is not a positive whole number"),
        ("'partition-by' = 'day(id)'", "the partition transform day does not apply to column 'id' of type long"),
        ("'format-version' = '1'", "Weir writes Iceberg format version 2"),
        ("'write.format.default' = 'orc'", "Weir writes Iceberg data as parquet only"),
        ("'catalog-type' = 'hive'", "not a catalog type Weir has"),
    ];
    for (option, want) in cases {
        let sql = dir.join("bad.sql");
        let base = hadoop(&dir.join("wh"));
        let base =
            if option.starts_with("'catalog-type'") { base.replace("'catalog-type' = 'hadoop', ", "") } else { base };
        std::fs::write(&sql, format!("CREATE TABLE out (id BIGINT, ts TIMESTAMP(3)) WITH ({base},\n  {option});\n"))
            .expect("sql");
        let err = run_err(&sql);
        assert!(err.contains(want), "{option}: {err}");
        assert!(err.contains("bad.sql:2:"), "{option}: no line:column in {err}");
        assert_eq!(err.trim().lines().count(), 1, "{option}: one line: {err}");
    }
}

/// Exactly-once under SIGKILL: a window job (appends) and an updating aggregate (upserts:
/// equality deletes) into Iceberg, killed 20 times across processing, pre-committed,
/// committing, between the catalog's commit and its acknowledgement, and restoring, with a
/// reader polling the window table all along. Both tables end with the rows of an
/// uninterrupted run, no checkpoint twice, and every snapshot the reader saw held whole
/// checkpoints.
#[test]
fn exactly_once_into_iceberg_under_sigkill() {
    let dir = crate::slt::tempdir();
    let reference = dir.join("reference.sql");
    std::fs::write(&reference, window_and_upsert_job(&dir, "reference", 600_000, 60_000, &dir.join("ref-wh")))
        .expect("sql");
    run_ok(&reference);
    let want = rows(&read_table(&dir.join("ref-wh").join("db").join("out")));
    let want_totals = rows(&read_table(&dir.join("ref-wh").join("db").join("totals")));
    assert!(want_totals.len() > 100, "{} totals", want_totals.len());

    let wh = dir.join("wh");
    let sql = dir.join("job.sql");
    std::fs::write(&sql, window_and_upsert_job(&dir, "job", 600_000, 60_000, &wh)).expect("sql");
    let metadata = wh.join("db").join("out").join("metadata");
    std::fs::create_dir_all(&metadata).expect("metadata dir");
    let (stop, seen) = (dir.join("stop-polling"), dir.join("seen.jsonl"));
    let mut poller = Command::new(repo().join("scripts/lake.sh"))
        .args(["poll", metadata.to_str().expect("path"), stop.to_str().expect("path"), seen.to_str().expect("path")])
        .spawn()
        .expect("start the poller");
    let faults = dir.join("faults");
    let phases = [Phase::Processing, Phase::PreCommitted, Phase::Committing, Phase::DuringCommit, Phase::Restoring];
    let kills = kill_in_phases(
        &phases,
        Phase::Processing,
        3,
        20,
        |phase| start(&sql, phase, &faults, "iceberg"),
        |phase| in_phase(phase, &faults, "iceberg"),
    );
    println!("kills: {kills:?}");
    run_ok(&sql);
    std::fs::write(&stop, "").expect("stop the poller");
    assert!(poller.wait().expect("poller").success());

    let t = read_table(&wh.join("db").join("out"));
    let got = rows(&t);
    crate::kills::assert_same_rows(&got, &want);
    assert_one_snapshot_per_checkpoint(&t);
    let totals = read_table(&wh.join("db").join("totals"));
    crate::kills::assert_same_rows(&rows(&totals), &want_totals);
    assert_one_snapshot_per_checkpoint(&totals);

    // What the reader saw during the runs: each snapshot it read held the rows the final
    // history says that snapshot holds (whole checkpoints, none in part).
    let by_id: BTreeMap<i64, u64> = t["snapshots"]
        .as_array()
        .expect("snapshots")
        .iter()
        .map(|s| (s["id"].as_i64().expect("id"), s["rows"].as_u64().expect("rows")))
        .collect();
    let text = std::fs::read_to_string(&seen).expect("what the poller saw");
    let mut polled = 0;
    for line in text.lines() {
        let v: Json = serde_json::from_str(line).expect("json line");
        let id = v["id"].as_i64().expect("id");
        let rows = v["rows"].as_u64().expect("rows");
        assert_eq!(by_id.get(&id), Some(&rows), "the reader saw snapshot {id} with {rows} rows");
        polled += 1;
    }
    assert!(polled >= 3, "the reader saw only {polled} snapshots");
}

/// Two jobs append to one table at once, each committing every 30 ms, so that their commits
/// race through the catalog's compare-and-swap; then the same file runs again, restoring both
/// jobs from their final checkpoints. Every row is in the table once, and each job's
/// checkpoints are one snapshot each.
#[test]
fn concurrent_writers_retry_and_a_restart_from_the_final_checkpoint_adds_nothing() {
    let dir = crate::slt::tempdir();
    let wh = dir.join("wh");
    let source = |name: &str, from: u64| sequence(name, 20_000, 40_000, from);
    let sql = dir.join("job.sql");
    std::fs::write(
        &sql,
        format!(
            "SET 'checkpoint.interval' = '30ms';
SET 'checkpoint.dir' = '{}';
{}{}CREATE TABLE out (id BIGINT) WITH ({});
SET 'pipeline.name' = 'writer-a';
INSERT INTO out SELECT id FROM a;
SET 'pipeline.name' = 'writer-b';
INSERT INTO out SELECT id FROM b;
",
            dir.join("ck").display(),
            source("a", 1),
            source("b", 20_001),
            hadoop(&wh)
        ),
    )
    .expect("sql");
    let out = run_ok(&sql);
    let check = |t: &Json| {
        let got = rows(t);
        let want: Vec<String> = {
            let mut w: Vec<String> = (1..=40_000u64).map(|i| i.to_string()).collect();
            w.sort();
            w
        };
        assert_eq!(got.len(), want.len(), "rows");
        assert_eq!(got, want);
        let mut by_job: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for s in t["snapshots"].as_array().expect("snapshots") {
            let job = s["summary"]["weir.job-id"].as_str().expect("job").to_string();
            let n = s["summary"]["weir.max-committed-checkpoint-id"].as_str().expect("id").parse().expect("n");
            by_job.entry(job).or_default().push(n);
        }
        assert_eq!(by_job.len(), 2, "two jobs");
        for (job, ids) in &by_job {
            let distinct: BTreeSet<u64> = ids.iter().copied().collect();
            assert_eq!(distinct.len(), ids.len(), "job {job} committed a checkpoint twice: {ids:?}");
        }
        t["snapshots"].as_array().map_or(0, Vec::len)
    };
    let t = read_table(&wh.join("db").join("out"));
    let snapshots = check(&t);
    assert!(snapshots >= 6, "{snapshots} snapshots: the commits did not interleave ({out})");
    // Again: both jobs restore from their final checkpoints and have nothing more to write.
    run_ok(&sql);
    let t = read_table(&wh.join("db").join("out"));
    assert_eq!(check(&t), snapshots, "a restart from the final checkpoint committed again");
}

/// The SQL catalog in a SQLite file (`jdbc:sqlite:` as Iceberg's JdbcCatalog writes it), read
/// by pyiceberg's `SqlCatalog` from `sqlite:///`; two runs of one job file append once each.
#[test]
fn sql_catalog_in_sqlite_is_read_by_pyiceberg() {
    let dir = crate::slt::tempdir();
    let db = dir.join("catalog.db");
    let job = |checkpoints: &str| {
        format!(
            "SET 'checkpoint.interval' = '100ms';
SET 'checkpoint.dir' = '{}';
CREATE TABLE src (id BIGINT, ts TIMESTAMP(3)) WITH ('connector' = 'datagen', 'number-of-rows' = '2000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '2000');
CREATE TABLE out (id BIGINT) WITH ('connector' = 'iceberg', 'catalog-type' = 'sql', 'catalog-name' = 'local',
  'uri' = 'jdbc:sqlite:{}', 'warehouse' = '{}', 'catalog-database' = 'ns');
INSERT INTO out SELECT id FROM src;
",
            dir.join(checkpoints).display(),
            db.display(),
            dir.join("wh").display()
        )
    };
    for (i, checkpoints) in ["ck1", "ck2"].into_iter().enumerate() {
        let sql = dir.join(format!("{checkpoints}.sql"));
        std::fs::write(&sql, job(checkpoints)).expect("sql");
        run_ok(&sql);
        let t = lake(&["sql-table", &format!("sqlite:///{}", db.display()), "local", "ns.out"]);
        let got = rows(&t);
        assert_eq!(got.len(), 2000 * (i + 1));
        let distinct: BTreeSet<&String> = got.iter().collect();
        assert_eq!(distinct.len(), 2000, "each id, once per run");
        assert_one_snapshot_per_checkpoint_per_job(&t);
    }
}

/// [`assert_one_snapshot_per_checkpoint`] for a table several jobs wrote: each job's
/// checkpoints once.
pub fn assert_one_snapshot_per_checkpoint_per_job(t: &Json) {
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    for s in t["snapshots"].as_array().expect("snapshots") {
        let key = (
            s["summary"]["weir.job-id"].as_str().expect("job").to_string(),
            s["summary"]["weir.max-committed-checkpoint-id"].as_str().expect("checkpoint").to_string(),
        );
        assert!(seen.insert(key.clone()), "committed twice: {key:?}");
    }
}

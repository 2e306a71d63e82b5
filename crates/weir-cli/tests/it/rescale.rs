//! Rescaling from a checkpoint: a tumble aggregate, a session aggregate and a window join,
//! stopped with a checkpoint at parallelism 2, resume at 3, at 1 and at 2 (key groups move
//! between tasks; the Nexmark source's unread blocks are split anew; every earlier sink
//! task's pre-commit is published), with memory and with RocksDB state, and publish exactly
//! the rows of a run that never stopped.

use std::path::Path;

use weir::{Engine, JobState};

fn job_sql(dir: &Path, out: &str, parallelism: usize, backend: &str, query: &str) -> String {
    format!(
        "SET 'parallelism' = '{parallelism}';
         SET 'checkpoint.interval' = '10min';
         SET 'checkpoint.dir' = '{ck}';
         SET 'state.backend' = '{backend}';
         SET 'state.dir' = '{state}';
         CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP(3),
           WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
           WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '600000', 'rate' = '300000');
         CREATE TABLE out (auction BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), cnt BIGINT, total BIGINT)
           WITH ('connector' = 'filesystem', 'path' = '{out_dir}', 'format' = 'csv');
         {query}",
        ck = dir.join(format!("{out}-checkpoints")).display(),
        state = dir.join(format!("{out}-state")).display(),
        out_dir = dir.join(out).display(),
    )
}

const TUMBLE: &str = "INSERT INTO out SELECT auction, window_start, window_end, COUNT(*), SUM(price)
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
  GROUP BY auction, window_start, window_end";

const SESSION: &str = "INSERT INTO out SELECT auction, window_start, window_end, COUNT(*), SUM(price)
  FROM TABLE(SESSION(TABLE bid PARTITION BY auction, DESCRIPTOR(date_time), INTERVAL '2' SECOND))
  GROUP BY auction, window_start, window_end";

/// Nexmark q7 as a window join: each window's highest bids.
const JOIN: &str = "INSERT INTO out SELECT B.auction, B.window_start, B.window_end, B.price, B1.maxprice
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) B
  JOIN (SELECT MAX(price) AS maxprice, window_start, window_end
        FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
        GROUP BY window_start, window_end) B1
  ON B.window_start = B1.window_start AND B.window_end = B1.window_end AND B.price = B1.maxprice";

fn rows(dir: &Path) -> Vec<String> {
    let mut rows = Vec::new();
    for entry in std::fs::read_dir(dir).expect("output").flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with('_') {
            continue;
        }
        assert!(!name.starts_with('.'), "unpublished file {name}");
        rows.extend(std::fs::read_to_string(entry.path()).expect("read").lines().map(String::from));
    }
    rows.sort();
    rows
}

pub(crate) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create copy");
    for entry in std::fs::read_dir(from).expect("read dir").flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// Run `query` at parallelism `p` on `out` to its end.
async fn run_to_end(dir: &Path, out: &str, p: usize, backend: &str, query: &str) -> weir::Result<()> {
    let engine = Engine::new();
    engine.execute_all(&job_sql(dir, out, p, backend, "")).await?;
    engine.submit(query).await?.wait().await
}

/// Stopped with a checkpoint at p=2 after half a second, in `out`.
async fn stop_at_two(dir: &Path, out: &str, backend: &str, query: &str) -> usize {
    let engine = Engine::new();
    let sql = job_sql(dir, out, 2, backend, "");
    engine.execute_all(&sql).await.expect("setup");
    let job = engine.submit(query).await.expect("submit");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    job.stop_with_checkpoint();
    job.wait().await.expect("stopped");
    assert!(matches!(job.state(), JobState::Stopped), "state {}", job.state().name());
    rows(&dir.join(out)).len()
}

async fn rescale(backend: &str, query: &str, least: usize) {
    let dir = crate::slt::tempdir();
    run_to_end(&dir, "reference", 2, backend, query).await.expect("reference run");
    let want = rows(&dir.join("reference"));
    assert!(want.len() > least, "reference has {} rows", want.len());

    let published = stop_at_two(&dir, "stopped", backend, query).await;
    assert!(published < want.len(), "{published} of {} rows published at the stop", want.len());
    for p in [3, 1, 2] {
        let out = format!("p{p}");
        copy_dir(&dir.join("stopped"), &dir.join(&out));
        copy_dir(&dir.join("stopped-checkpoints"), &dir.join(format!("{out}-checkpoints")));
        run_to_end(&dir, &out, p, backend, query).await.unwrap_or_else(|e| panic!("resumed at p={p}: {e}"));
        let got = rows(&dir.join(&out));
        assert_eq!(got.len(), want.len(), "{backend}: resumed at p={p}: row count");
        assert!(got == want, "{backend}: resumed at p={p}: rows differ from the uninterrupted run");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_operators_resume_at_another_parallelism_in_memory() {
    rescale("memory", TUMBLE, 10_000).await;
    rescale("memory", SESSION, 10_000).await;
    rescale("memory", JOIN, 50).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_operators_resume_at_another_parallelism_in_rocksdb() {
    rescale("rocksdb", TUMBLE, 10_000).await;
    rescale("rocksdb", SESSION, 10_000).await;
    rescale("rocksdb", JOIN, 50).await;
}

/// A checkpoint restores into a plan that keeps the same state, at any parallelism; a query
/// that keeps other state (another aggregate) is rebuilt by replay, at another parallelism
/// too, and runs to its end. (Its rows from the cut-over on are checked in `upgrades.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_that_keeps_other_state_is_rebuilt_at_another_parallelism() {
    let dir = crate::slt::tempdir();
    stop_at_two(&dir, "stopped", "memory", TUMBLE).await;
    let other = TUMBLE.replace("SUM(price)", "MAX(price)");
    run_to_end(&dir, "stopped", 3, "memory", &other).await.expect("rebuilt at parallelism 3");
}

/// The test's view of an updating result: a table connector `'connector' = 'collect'` whose
/// sink tasks hand every chunk, ops included, to the test as it is written. At a stop with a
/// checkpoint, what it has is exactly what came before the final barrier.
pub(crate) struct Collect {
    pub(crate) builtin: weir::connector::Connectors,
    pub(crate) chunks: std::sync::Arc<std::sync::Mutex<Vec<weir::Chunk>>>,
    /// If given, each table's chunks go here instead, by table.
    pub(crate) by_table: Option<ByTable>,
}

/// Chunks each `'connector' = 'collect'` table was written, by table.
pub(crate) type ByTable = std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, Vec<weir::Chunk>>>>;

struct CollectSink {
    table: String,
    chunks: std::sync::Arc<std::sync::Mutex<Vec<weir::Chunk>>>,
    by_table: Option<ByTable>,
}

#[async_trait::async_trait]
impl weir::connector::Sink for CollectSink {
    async fn write_chunk(&mut self, chunk: weir::Chunk) -> weir::Result<()> {
        let poisoned = || weir::WeirError::internal("poisoned");
        match &self.by_table {
            Some(map) => map.lock().map_err(|_| poisoned())?.entry(self.table.clone()).or_default().push(chunk),
            None => self.chunks.lock().map_err(|_| poisoned())?.push(chunk),
        }
        Ok(())
    }

    async fn finish(&mut self) -> weir::Result<()> {
        Ok(())
    }
}

impl weir::connector::ConnectorFactory for Collect {
    fn validate(&self, table: &weir::connector::TableDef) -> weir::Result<()> {
        match table.options.get("connector") {
            Some("collect") => Ok(()),
            _ => self.builtin.validate(table),
        }
    }

    fn source(
        &self,
        table: &weir::connector::TableDef,
        projection: Option<Vec<usize>>,
        split: weir::connector::Split,
    ) -> weir::Result<Box<dyn weir::connector::Source>> {
        self.builtin.source(table, projection, split)
    }

    fn sink(
        &self,
        table: &weir::connector::TableDef,
        schema: weir::arrow::datatypes::SchemaRef,
        split: weir::connector::Split,
    ) -> weir::Result<Box<dyn weir::connector::Sink>> {
        match table.options.get("connector") {
            Some("collect") => Ok(Box::new(CollectSink {
                table: table.name.clone(),
                chunks: self.chunks.clone(),
                by_table: self.by_table.clone(),
            })),
            _ => self.builtin.sink(table, schema, split),
        }
    }

    fn check_sink_input(
        &self,
        table: &weir::connector::TableDef,
        changelog: &weir::Changelog,
        key: Option<&[usize]>,
    ) -> weir::Result<()> {
        match table.options.get("connector") {
            Some("collect") => Ok(()),
            _ => self.builtin.check_sink_input(table, changelog, key),
        }
    }

    fn source_replays(&self, table: &weir::connector::TableDef) -> Result<(), String> {
        self.builtin.source_replays(table)
    }
}

/// Group aggregates (one over a retracting input, whose MIN and MAX keep value counts).
const GROUPED: &str = "INSERT INTO out SELECT n, COUNT(*), MIN(k), MAX(k), SUM(k) FROM (
    SELECT auction % 500 AS k, COUNT(*) AS n, COUNT(DISTINCT bidder) AS d, MAX(price) AS m
    FROM bid GROUP BY auction % 500) GROUP BY n";

/// A left join of appended rows with an updating input (rows padded, then joined, then
/// joined with a new maximum), and a Top-N whose order leaves no ties.
const JOINED: &str = "INSERT INTO out SELECT a.id, a.seller, b.m, b.n, 0 FROM auction a LEFT JOIN
    (SELECT auction, MAX(price) AS m, COUNT(*) AS n FROM bid GROUP BY auction) b ON a.id = b.auction";
const TOP_N: &str = "INSERT INTO out SELECT * FROM (SELECT auction % 100, bidder, price, auction,
    ROW_NUMBER() OVER (PARTITION BY auction % 100 ORDER BY price DESC, bidder, auction) AS rn FROM bid) WHERE rn <= 3";

/// An anti join (auctions without a high bid: rows retracted as high bids come), a semi join
/// over an updating input (auctions whose bid count is even, coming and going), and an OVER
/// aggregate over the last second of each auction (a RANGE frame: rows of one time are
/// peers, so the sums do not depend on which source task a row came from).
const ANTI: &str = "INSERT INTO out SELECT a.id, a.seller, a.id % 7, a.seller % 5, 0 FROM auction a
    WHERE NOT EXISTS (SELECT 1 FROM bid b WHERE b.auction = a.id AND b.price > 5000000)";
const SEMI: &str = "INSERT INTO out SELECT a.id, a.seller, a.id % 7, a.seller % 5, 0 FROM auction a
    WHERE a.id IN (SELECT auction FROM bid GROUP BY auction HAVING COUNT(*) % 2 = 0)";
const OVER: &str = "INSERT INTO out SELECT auction, price, SUM(price) OVER w, COUNT(*) OVER w, MAX(price) OVER w
    FROM bid WINDOW w AS (PARTITION BY auction ORDER BY date_time RANGE BETWEEN INTERVAL '1' SECOND PRECEDING AND CURRENT ROW)";

/// MATCH_RECOGNIZE: a price, higher ones, then a higher one still, per auction within 10
/// seconds (bids have distinct times, so the order does not depend on source tasks).
const MATCH: &str = "INSERT INTO out SELECT * FROM bid MATCH_RECOGNIZE (PARTITION BY auction ORDER BY date_time
    MEASURES A.price AS a, LAST(B.price) AS b, C.price AS c, COUNT(B.price) AS nb AFTER MATCH SKIP PAST LAST ROW
    PATTERN (A B+? C) WITHIN INTERVAL '10' SECOND DEFINE B AS B.price > LAST(A.price), C AS C.price > LAST(B.price)) AS T";

async fn grouped_run(dir: &Path, p: usize, backend: &str, stop: bool) -> Vec<weir::Chunk> {
    run_query(GROUPED, dir, p, backend, stop).await
}

/// Run `query` at parallelism `p` with its checkpoints in `dir`; `stop`: stop it with a
/// checkpoint after a while. Returns its changelog.
async fn run_query(query: &str, dir: &Path, p: usize, backend: &str, stop: bool) -> Vec<weir::Chunk> {
    let chunks = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let engine = Engine::with_connectors(std::sync::Arc::new(Collect {
        by_table: None,
        builtin: weir::connector::Connectors,
        chunks: chunks.clone(),
    }));
    let setup = format!(
        "SET 'parallelism' = '{p}';
         SET 'checkpoint.interval' = '10min';
         SET 'checkpoint.dir' = '{ck}';
         SET 'state.backend' = '{backend}';
         SET 'state.dir' = '{state}';
         CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3),
           WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
           WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '400000', 'rate' = '300000');
         CREATE TABLE auction (id BIGINT, seller BIGINT)
           WITH ('connector' = 'nexmark', 'table' = 'auction', 'events' = '400000', 'rate' = '300000');
         CREATE TABLE out (n BIGINT, groups BIGINT, lo BIGINT, hi BIGINT, total BIGINT) WITH ('connector' = 'collect')",
        ck = dir.join("checkpoints").display(),
        state = dir.join("state").display(),
    );
    engine.execute_all(&setup).await.expect("setup");
    let job = engine.submit(query).await.expect("submit");
    if stop {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        job.stop_with_checkpoint();
    }
    job.wait().await.unwrap_or_else(|e| panic!("at p={p}: {e}"));
    if stop {
        assert!(matches!(job.state(), JobState::Stopped), "state {}", job.state().name());
    }
    let taken = std::mem::take(&mut *chunks.lock().expect("chunks"));
    taken
}

/// The rows changelogs leave, applied in turn.
fn applied(changelogs: &[&[weir::Chunk]]) -> Vec<String> {
    let first = changelogs.iter().find_map(|c| c.first()).expect("some change");
    let mut table = weir::Materialized::new(first.schema()).expect("table");
    for chunk in changelogs.iter().copied().flatten() {
        table.apply(chunk).expect("apply");
    }
    assert_eq!(table.unmatched, 0, "a retraction of a row that was never there");
    crate::rows(&[table.table().expect("table")])
}

/// A group aggregate stopped with a checkpoint at p=2 resumes at 3 and at 1: the changelog of
/// the stopped run and of the resumed one, applied in turn, leave the rows of a run that
/// never stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_aggregates_resume_at_another_parallelism() {
    for backend in ["memory", "rocksdb"] {
        let dir = crate::slt::tempdir();
        let want = applied(&[&grouped_run(&dir.join("reference"), 2, backend, false).await]);
        assert!(want.len() > 5, "{backend}: reference has {} rows", want.len());
        let stopped = grouped_run(&dir.join("stopped"), 2, backend, true).await;
        assert!(!stopped.is_empty(), "{backend}: nothing before the stop");
        assert_ne!(applied(&[&stopped]), want, "{backend}: the stop came after the end");
        for p in [3, 1] {
            let resumed = dir.join(format!("p{p}"));
            copy_dir(&dir.join("stopped"), &resumed);
            let rest = grouped_run(&resumed, p, backend, false).await;
            assert_eq!(applied(&[&stopped, &rest]), want, "{backend}: resumed at p={p}");
        }
    }
}

/// A regular join, a Top-N, semi and anti joins, an OVER aggregate and a MATCH_RECOGNIZE stopped with a
/// checkpoint at p=2 resume at 3: what the two runs emitted, applied in turn, leaves the rows
/// of a run that never stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_and_top_n_resume_at_another_parallelism() {
    for (name, query) in
        [("join", JOINED), ("top-n", TOP_N), ("anti join", ANTI), ("semi join", SEMI), ("over", OVER), ("match", MATCH)]
    {
        for backend in ["memory", "rocksdb"] {
            let dir = crate::slt::tempdir();
            let want = applied(&[&run_query(query, &dir.join("reference"), 2, backend, false).await]);
            assert!(want.len() > 100, "{name}, {backend}: reference has {} rows", want.len());
            let stopped = run_query(query, &dir.join("stopped"), 2, backend, true).await;
            assert!(!stopped.is_empty(), "{name}, {backend}: nothing before the stop");
            assert_ne!(applied(&[&stopped]), want, "{name}, {backend}: the stop came after the end");
            let resumed = dir.join("p3");
            copy_dir(&dir.join("stopped"), &resumed);
            let rest = run_query(query, &resumed, 3, backend, false).await;
            assert_eq!(applied(&[&stopped, &rest]), want, "{name}, {backend}: resumed at p=3");
        }
    }
}

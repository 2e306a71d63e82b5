//! Updating queries against references, each at parallelism 1 and 2 with memory and with
//! RocksDB state, over a 20,000-bid file (`tests/data/nexmark`):
//! - Nexmark q15, q16 and q17 in Flink's own text: the rows their changelog leaves equal
//!   Flink 1.20.5's final rows (kept beside the file, see its README);
//! - DISTINCT, UNION, HAVING, a global aggregate, and aggregates over retracting inputs (an
//!   average of per-group maxima, MIN and MAX of groups that move): DataFusion's batch SQL
//!   over the same file.

use std::path::{Path, PathBuf};

use datafusion::arrow::array::{Array, Float64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::prelude::{CsvReadOptions, SessionContext};
use weir::Engine;

pub(crate) fn data() -> PathBuf {
    crate::repo().join("crates/weir-cli/tests/data/nexmark")
}

fn prelude(bids: &Path) -> String {
    format!(
        "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, `dateTime` TIMESTAMP(3),
           WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
        bids.display()
    )
}

/// The sink's declared column types of a Nexmark file's `CREATE TABLE nexmark_qN (…)`.
pub(crate) fn sink_types(text: &str) -> Vec<DataType> {
    let body =
        text.split_once("CREATE TABLE nexmark_").and_then(|(_, t)| t.split_once('(')).map(|(_, t)| t).expect("sink");
    let body = body.split_once(") WITH").map(|(b, _)| b).expect("sink columns");
    body.split(',')
        .filter(|column| !column.trim().is_empty())
        .map(|column| match column.split_whitespace().nth(1).expect("column type") {
            "BIGINT" => DataType::Int64,
            "INT" => DataType::Int32,
            "DOUBLE" => DataType::Float64,
            "VARCHAR" | "STRING" => DataType::Utf8,
            "TIMESTAMP(3)" => DataType::Timestamp(TimeUnit::Millisecond, None),
            other => panic!("sink type {other}"),
        })
        .collect()
}

/// Rows as Flink's reference writes them: each column cast to the sink's type, `,`-joined,
/// NULL empty; sorted.
pub(crate) fn canonical(batches: &[weir::arrow::record_batch::RecordBatch], types: &[DataType]) -> Vec<String> {
    // Flink writes every millisecond digit.
    let options = weir::display_options().with_null("").with_timestamp_format(Some("%Y-%m-%d %H:%M:%S%.3f"));
    let mut out = Vec::new();
    for b in batches {
        let columns: Vec<_> =
            b.columns().iter().zip(types).map(|(c, t)| cast(c, t).expect("cast to the sink's type")).collect();
        let f: Vec<_> = columns
            .iter()
            .map(|c| weir::arrow::util::display::ArrayFormatter::try_new(c.as_ref(), &options).expect("formatter"))
            .collect();
        for r in 0..b.num_rows() {
            let fields = f.iter().zip(&columns).map(|(f, c)| match c.as_any().downcast_ref::<Float64Array>() {
                // As the reference writes a double: rounded to 6 places, shortest form.
                Some(d) if d.is_valid(r) => format!("{:?}", (d.value(r) * 1e6).round() / 1e6),
                _ => f.value(r).to_string(),
            });
            out.push(fields.collect::<Vec<_>>().join(","));
        }
    }
    out.sort();
    out
}

pub(crate) const SETUPS: [(usize, &str); 4] = [(1, "memory"), (2, "memory"), (1, "rocksdb"), (2, "rocksdb")];

async fn engine_at(parallelism: usize, backend: &str, state: &Path) -> Engine {
    engine_in_setup(parallelism, backend, state, &prelude(&data().join("bids_20k.csv"))).await
}

/// An engine at `parallelism` with `backend` state under `state`, after `prelude`.
pub(crate) async fn engine_in_setup(parallelism: usize, backend: &str, state: &Path, prelude: &str) -> Engine {
    let engine = Engine::new();
    crate::run(
        &engine,
        &format!(
            "SET 'parallelism' = '{parallelism}'; SET 'state.backend' = '{backend}'; SET 'state.dir' = '{}'; {prelude}",
            state.display(),
        ),
    )
    .await;
    engine
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nexmark_q15_q16_q17_leave_flinks_rows() {
    let state = crate::slt::tempdir();
    for q in ["q15", "q16", "q17"] {
        let text = std::fs::read_to_string(data().join(format!("{q}.sql"))).expect("query file");
        let types = sink_types(&text);
        let select = text.split_once("INSERT INTO").and_then(|(_, t)| t.split_once('\n')).map(|(_, s)| s);
        let select = select.expect("INSERT … SELECT").trim().trim_end_matches(';');
        let want: Vec<String> = {
            let mut lines: Vec<String> = std::fs::read_to_string(data().join(format!("{q}.flink.csv")))
                .expect("Flink's rows")
                .lines()
                .map(String::from)
                .collect();
            lines.sort();
            lines
        };
        assert!(!want.is_empty(), "{q}: no reference rows");
        for (parallelism, backend) in SETUPS {
            let engine = engine_at(parallelism, backend, &state).await;
            let got = engine.query(select).await.unwrap_or_else(|e| panic!("{q}: {e}"));
            let got = canonical(&got.collect().await.unwrap_or_else(|e| panic!("{q}: {e}")), &types);
            assert_eq!(got.len(), want.len(), "{q} at parallelism {parallelism}, {backend} state: row count");
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g, w, "{q} at parallelism {parallelism}, {backend} state");
            }
        }
    }
}

/// Each query as Weir runs it, and as DataFusion's batch SQL runs it.
const QUERIES: &[&str] = &[
    "SELECT DISTINCT channel FROM bid",
    "SELECT auction % 10 AS k FROM bid UNION SELECT bidder % 7 FROM bid",
    "SELECT channel, count(*) AS n FROM bid GROUP BY channel HAVING count(*) > 3",
    "SELECT count(*), sum(price), min(price), max(price), count(DISTINCT bidder), avg(price) FILTER (WHERE price < 1000) FROM bid",
    // Nexmark q4's shape: an average of per-group maxima. Each new maximum takes back the
    // group's old one from the average.
    "SELECT auction % 5 AS k, avg(m) AS a, count(*) AS c FROM (SELECT auction, max(price) AS m FROM bid GROUP BY auction) GROUP BY auction % 5",
    // Groups move as their counts grow: MIN and MAX must find the next value when theirs leaves.
    "SELECT n, min(auction), max(auction), count(*), sum(auction) FROM (SELECT auction, count(*) AS n FROM bid GROUP BY auction) GROUP BY n",
    "SELECT n, min(channel), max(channel), count(DISTINCT channel) FROM (SELECT channel, count(*) AS n FROM bid GROUP BY channel) GROUP BY n",
    "SELECT c FROM (SELECT count(*) AS c FROM bid GROUP BY bidder) GROUP BY c HAVING max(c) >= 10",
    // DISTINCT aggregates sharing their values (one argument, several filters), over appends
    // and over retractions.
    "SELECT channel, count(DISTINCT bidder), count(DISTINCT bidder) FILTER (WHERE price > 1000), \
       sum(DISTINCT bidder) FILTER (WHERE price < 5000), avg(DISTINCT auction) FROM bid GROUP BY channel",
    "SELECT n % 5, count(DISTINCT m), sum(DISTINCT m) FILTER (WHERE n > 2), count(*) \
       FROM (SELECT auction, count(*) AS n, max(price) % 7 AS m FROM bid GROUP BY auction) GROUP BY n % 5",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updating_queries_equal_datafusion_batch_sql() {
    let ctx = SessionContext::new();
    let schema = Schema::new(vec![
        Field::new("auction", DataType::Int64, true),
        Field::new("bidder", DataType::Int64, true),
        Field::new("price", DataType::Int64, true),
        Field::new("channel", DataType::Utf8, true),
        Field::new("dateTime", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]);
    let options = CsvReadOptions::new().has_header(false).schema(&schema).file_extension("csv");
    let path = data().join("bids_20k.csv");
    ctx.register_csv("bid", path.to_string_lossy().as_ref(), options).await.expect("register csv");
    let state = crate::slt::tempdir();
    let mut engines = Vec::new();
    for (parallelism, backend) in SETUPS {
        engines.push((parallelism, backend, engine_at(parallelism, backend, &state).await));
    }
    equal_datafusion(&ctx, &engines, QUERIES).await;
}

/// Each query's rows in every engine (parallelism, backend, engine) equal DataFusion's batch
/// SQL's in `ctx`, after the changelog is applied.
pub(crate) async fn equal_datafusion(ctx: &SessionContext, engines: &[(usize, &str, Engine)], queries: &[&str]) {
    for sql in queries {
        let want = crate::rows(&ctx.sql(sql).await.expect("reference plan").collect().await.expect("reference run"));
        assert!(!want.is_empty(), "{sql}: empty reference");
        for (parallelism, backend, engine) in engines {
            let got = engine.query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
            let got = crate::rows(&got.collect().await.unwrap_or_else(|e| panic!("{sql}: {e}")));
            assert_eq!(got, want, "{sql} at parallelism {parallelism}, {backend} state");
        }
    }
}

/// The changelog itself: one change per group per chunk, update pairs together, and what it
/// leaves equals the collected result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_aggregate_emits_one_change_per_group_per_chunk() {
    let state = crate::slt::tempdir();
    let engine = engine_at(1, "memory", &state).await;
    let sql = "SELECT channel, count(*) AS n FROM bid WHERE channel IN ('Apple', 'Google') GROUP BY channel";
    let chunks = engine.query(sql).await.expect("query").collect_changes().await.expect("changes");
    let mut table = weir::Materialized::new(chunks[0].schema()).expect("table");
    for chunk in &chunks {
        let ops = chunk.ops();
        // Per chunk, each group appears once (+I) or as one -U/+U pair.
        let names = crate::rows(std::slice::from_ref(&chunk.batch));
        assert!(ops.len() <= 4, "more than one change per group in a chunk: {ops:?}");
        for pair in ops.chunks(2).filter(|p| p[0] == weir::Op::UpdateBefore) {
            assert_eq!(pair.get(1), Some(&weir::Op::UpdateAfter), "an update pair was split: {ops:?} {names:?}");
        }
        table.apply(chunk).expect("apply");
    }
    assert_eq!(table.unmatched, 0, "a retraction of a row that was not there");
    assert_eq!(crate::rows(&[table.table().expect("table")]), vec!["Apple|2444", "Google|2440"]);
    assert!(chunks.len() > 1, "the file is read in several chunks");
}

//! Results do not depend on parallelism; a slow reader slows the sources down instead of
//! piling rows up in memory.

use std::fmt::Write as _;
use std::time::Duration;

use futures::StreamExt;
use weir::Engine;

use crate::{rows, run};

async fn query(engine: &Engine, sql: &str) -> Vec<String> {
    let stream = engine.query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    rows(&stream.collect().await.unwrap_or_else(|e| panic!("{sql}: {e}")))
}

const QUERIES: &[&str] = &[
    "SELECT * FROM csv_t",
    "SELECT id, upper(name), amount * 2 FROM json_t WHERE amount % 7 = 3",
    "SELECT id, ts FROM parquet_t WHERE name LIKE 'n1%' UNION ALL SELECT id, ts FROM csv_t WHERE amount > 990",
    "SELECT auction, price FROM bid WHERE MOD(auction, 13) = 0",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_do_not_depend_on_parallelism() {
    let dir = crate::slt::tempdir();
    // 40,000 rows, about 2.2 MB: large enough to be read by byte ranges.
    let mut csv = String::new();
    for i in 0..40_000u64 {
        let _ = writeln!(
            csv,
            "{i},n{},{},2023-01-01 00:{:02}:{:02}.{:03}",
            i * 7919 % 1000,
            i * 31 % 1000,
            (i / 60_000) % 60,
            (i / 1000) % 60,
            i % 1000
        );
    }
    std::fs::write(dir.join("rows.csv"), &csv).expect("write csv");
    let engine = Engine::new().with_base_dir(&dir);
    let columns = "id BIGINT, name STRING, amount INT, ts TIMESTAMP(3)";
    run(&engine, &format!(
        "SET 'parallelism' = '1';
         CREATE TABLE csv_t ({columns}) WITH ('connector' = 'filesystem', 'path' = 'rows.csv', 'format' = 'csv');
         CREATE TABLE json_t ({columns}) WITH ('connector' = 'filesystem', 'path' = 'json', 'format' = 'json');
         CREATE TABLE parquet_t ({columns}) WITH ('connector' = 'filesystem', 'path' = 'parquet', 'format' = 'parquet', 'parquet.row-group-size' = '3000');
         CREATE TABLE bid (auction BIGINT, price BIGINT) WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '200000');
         SET 'table.dml-sync' = 'true';
         INSERT INTO json_t SELECT * FROM csv_t;
         INSERT INTO parquet_t SELECT * FROM csv_t;"
    ))
    .await;

    let expected: Vec<Vec<String>> = {
        let mut all = Vec::new();
        for q in QUERIES {
            all.push(query(&engine, q).await);
        }
        all
    };
    assert_eq!(expected[0].len(), 40_000);
    assert_eq!(expected[0].iter().filter(|r| r.starts_with("39999|")).count(), 1);
    assert_eq!(expected[1].len(), (0..40_000u64).filter(|i| i * 31 % 1000 % 7 == 3).count());
    assert!(expected[2].len() > 1000 && !expected[3].is_empty());

    for parallelism in [2, 4] {
        run(&engine, &format!("SET 'parallelism' = '{parallelism}'")).await;
        for (q, want) in QUERIES.iter().zip(&expected) {
            let got = query(&engine, q).await;
            assert_eq!(got.len(), want.len(), "{q} at parallelism {parallelism}");
            assert!(got == *want, "{q} at parallelism {parallelism}: rows differ");
        }
    }

    // At parallelism 2 both source tasks read part of the one CSV file.
    run(&engine, "SET 'parallelism' = '2'").await;
    let stream = engine.query("SELECT id FROM csv_t").await.expect("query");
    let job = stream.job().clone();
    let read = rows(&stream.collect().await.expect("rows"));
    assert_eq!(read.len(), 40_000);
    let per_task: Vec<u64> =
        job.status().operators.iter().filter(|o| o.name.starts_with("Source: csv_t")).map(|o| o.rows_out).collect();
    assert_eq!(per_task.len(), 2);
    assert!(per_task.iter().all(|n| *n > 10_000), "uneven split: {per_task:?}");
    assert_eq!(per_task.iter().sum::<u64>(), 40_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_holds_back_an_unbounded_source() {
    let engine = Engine::new();
    run(
        &engine,
        "SET 'parallelism' = '2';
        CREATE TABLE bid (auction BIGINT, price BIGINT, extra STRING) WITH ('connector' = 'nexmark', 'table' = 'bid')",
    )
    .await;
    let mut stream = engine.query("SELECT auction, price, extra FROM bid WHERE price > 0").await.expect("query");
    let job = stream.job().clone();
    let mut consumed = 0u64;
    for _ in 0..40 {
        let batch = stream.next().await.expect("unbounded").expect("batch").batch;
        consumed += batch.num_rows() as u64;
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let status = job.status();
    let produced = status.rows_read();
    // What is produced but not yet consumed sits in channels: at most CHANNEL_CAPACITY batches
    // per edge (source -> merge, merge -> caller) and one batch in each task's hands.
    let batch = 8188u64;
    let edges = 2 * 2 + 1; // two source tasks, each into a merge; one merge into the caller
    let bound = (weir::CHANNEL_CAPACITY as u64 * edges + 2 * 3) * batch;
    assert!(produced >= consumed);
    assert!(produced - consumed <= bound, "{} rows buffered, bound {bound}", produced - consumed);
    let waited: u64 = status.operators.iter().map(|o| o.backpressure_ms).sum();
    assert!(waited > 0, "the sources never waited for the reader");
    drop(stream);
    job.wait().await.expect("cancelled cleanly");
    assert_eq!(job.state().name(), "CANCELLED");
}

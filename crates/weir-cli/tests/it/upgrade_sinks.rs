//! A job's sink swapped between a file, Kafka and PostgreSQL across savepoints: a window
//! aggregate writes to files, is stopped with a savepoint, resumes writing to an
//! exactly-once Kafka topic, is stopped again, and resumes writing to PostgreSQL. The three
//! sinks together hold exactly the rows of a run that never stopped: none twice, none lost.

use std::path::Path;

use weir::{Engine, JobUpgrade, Outcome};

use crate::kafka::Broker;
use crate::postgres::Postgres;

const WIN: &str = "INSERT INTO win SELECT auction, window_start, window_end, COUNT(*) AS c, SUM(price) AS t
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
  GROUP BY auction, window_start, window_end";

/// The bids and the sink `win` (its options `sink`), checkpoints of this version in
/// `dir/<version>`, savepoints in `dir/savepoints`.
fn setup(dir: &Path, version: &str, sink: &str) -> String {
    format!(
        "SET 'parallelism' = '2';
         SET 'checkpoint.interval' = '10min';
         SET 'checkpoint.dir' = '{ck}';
         SET 'state.savepoints.dir' = '{sp}';
         SET 'pipeline.name' = 'shop';
         CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP(3),
           WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
           WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '400000', 'rate' = '150000');
         CREATE TABLE win (auction BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), c BIGINT, t BIGINT)
           WITH ({sink});",
        ck = dir.join(version).display(),
        sp = dir.join("savepoints").display(),
    )
}

fn file_sink(dir: &Path) -> String {
    format!("'connector' = 'filesystem', 'path' = '{}', 'format' = 'csv'", dir.join("files").display())
}

/// A row as `auction|start|end|c|t`, times to the second (each reader prints them its way).
fn normal(fields: &[String]) -> String {
    let cut = |s: &String| s.replace('T', " ").chars().take(19).collect::<String>();
    format!("{}|{}|{}|{}|{}", fields[0], cut(&fields[1]), cut(&fields[2]), fields[3], fields[4])
}

fn file_rows(dir: &Path) -> Vec<String> {
    let rows = crate::identities::file_rows(dir);
    rows.iter().map(|r| normal(&r.split('|').map(str::to_string).collect::<Vec<_>>())).collect()
}

/// Version `version` started (on `savepoint` if given) with the sink `sink`: its verdict on
/// the sink, and its engine and job, running.
async fn start(dir: &Path, version: &str, sink: &str, savepoint: Option<&str>) -> (Engine, weir::JobHandle, String) {
    let engine = Engine::new();
    engine.execute_all(&setup(dir, version, sink)).await.expect("setup");
    let mut verdict = String::new();
    if let Some(path) = savepoint {
        engine.execute_all(&format!("SET 'execution.savepoint.path' = '{path}'")).await.expect("savepoint path");
        let mut jobs: Vec<JobUpgrade> = Engine::new()
            .check_upgrades(&format!("{}\n{WIN};", setup(dir, version, sink)), Some(path))
            .await
            .expect("check");
        let up = jobs.remove(0);
        assert!(!up.refused(), "{}", up.describe());
        verdict = up.describe();
    }
    let job = engine.submit(WIN).await.expect("submit");
    (engine, job, verdict)
}

/// Stop with a savepoint after a moment; its path.
async fn stop(engine: &Engine, job: &weir::JobHandle) -> String {
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(matches!(job.state(), weir::JobState::Running), "ended before its savepoint: {}", job.state().name());
    let Outcome::Table(batches) = engine.execute_all("STOP JOB 'shop' WITH SAVEPOINT").await.expect("stop").remove(0)
    else {
        panic!("a table")
    };
    crate::rows(&batches).remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_swapped_from_files_to_kafka_to_postgresql_across_savepoints_loses_and_doubles_nothing() {
    let dir = crate::slt::tempdir();
    let broker = Broker::start(&dir);
    broker.create_topic("win_k", 2).await;
    let pg = Postgres::start(&dir);
    pg.psql("CREATE TABLE win (auction bigint, window_start timestamp, window_end timestamp, c bigint, t bigint)");

    // A run that never stops.
    let reference = dir.join("reference");
    let (_, job, _) = start(&reference, "v0", &file_sink(&reference), None).await;
    job.wait().await.expect("reference run");
    let mut want = file_rows(&reference.join("files"));
    assert!(want.len() > 1000, "{} rows", want.len());

    // Files, then Kafka, then PostgreSQL.
    let (engine, job, _) = start(&dir, "v1", &file_sink(&dir), None).await;
    let first = stop(&engine, &job).await;
    let kafka = format!(
        "'connector' = 'kafka', 'topic' = 'win_k', 'properties.bootstrap.servers' = '{}', 'format' = 'json', \
         'sink.delivery-guarantee' = 'exactly-once', 'sink.transactional-id-prefix' = 'weir-shop'",
        broker.bootstrap
    );
    let (engine, job, verdict) = start(&dir, "v2", &kafka, Some(&first)).await;
    assert!(verdict.contains("new       Sink: win") && verdict.contains("filesystem replaced by kafka"), "{verdict}");
    let second = stop(&engine, &job).await;
    let jdbc = format!(
        "'connector' = 'jdbc', 'url' = '{}', 'table-name' = 'win', 'username' = 'weir', \
         'sink.delivery-guarantee' = 'exactly-once'",
        pg.url()
    );
    let (_, job, verdict) = start(&dir, "v3", &jdbc, Some(&second)).await;
    assert!(verdict.contains("new       Sink: win") && verdict.contains("kafka replaced by jdbc"), "{verdict}");
    job.wait().await.expect("version 3 run");

    let in_files = file_rows(&dir.join("files"));
    let in_kafka: Vec<String> = broker
        .read_committed("win_k")
        .iter()
        .map(|v| {
            let v: serde_json::Value = serde_json::from_str(v).expect("json");
            let field = |k: &str| match &v[k] {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            normal(&["auction", "window_start", "window_end", "c", "t"].map(field))
        })
        .collect();
    let in_postgres: Vec<String> = pg
        .psql("SELECT auction, window_start, window_end, c, t FROM win")
        .iter()
        .map(|r| normal(&r.split('|').map(str::to_string).collect::<Vec<_>>()))
        .collect();
    println!("{} rows in files, {} in Kafka, {} in PostgreSQL", in_files.len(), in_kafka.len(), in_postgres.len());
    assert!(!in_files.is_empty() && !in_kafka.is_empty() && !in_postgres.is_empty(), "each sink has rows");
    let mut got = [in_files, in_kafka, in_postgres].concat();
    got.sort();
    want.sort();
    assert_eq!(got.len(), want.len(), "rows in the three sinks");
    assert!(got == want, "the three sinks' rows differ from the uninterrupted run's");
}

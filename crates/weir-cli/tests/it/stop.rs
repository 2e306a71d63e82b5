//! Stop with a checkpoint: a job asked to stop takes one last checkpoint, publishes what it
//! covers and stops; started again, it resumes there and the output is exactly that of a run
//! that never stopped.

use weir::{Engine, JobState, Outcome};

async fn run(engine: &Engine, sql: &str) -> Vec<Outcome> {
    engine.execute_all(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"))
}

fn rows(dir: &std::path::Path) -> (Vec<String>, usize) {
    let mut rows = Vec::new();
    let mut hidden = 0;
    for entry in std::fs::read_dir(dir).expect("output").flatten() {
        if entry.file_name().to_string_lossy().starts_with('_') {
            continue;
        }
        if entry.file_name().to_string_lossy().starts_with('.') {
            hidden += 1;
            continue;
        }
        rows.extend(std::fs::read_to_string(entry.path()).expect("read").lines().map(String::from));
    }
    rows.sort();
    (rows, hidden)
}

fn job_sql(dir: &std::path::Path, out: &str) -> String {
    format!(
        "SET 'parallelism' = '2';
         SET 'checkpoint.interval' = '10min';
         SET 'checkpoint.dir' = '{ck}';
         CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP(3)) WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '600000', 'rate' = '400000');
         CREATE TABLE out (auction BIGINT, price BIGINT, date_time TIMESTAMP(3)) WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv');",
        ck = dir.join(format!("{out}-checkpoints")).display(),
        out = dir.join(out).display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_job_resumes_where_it_stopped() {
    let dir = crate::slt::tempdir();
    let insert = "INSERT INTO out SELECT auction, price, date_time FROM bid WHERE MOD(auction, 3) = 0";

    // Uninterrupted.
    let engine = Engine::new();
    run(&engine, &job_sql(&dir, "reference")).await;
    engine.submit(insert).await.expect("submit").wait().await.expect("reference run");
    let (want, _) = rows(&dir.join("reference"));
    assert!(want.len() > 50_000);

    // Stopped after about half a second (the checkpoint interval is far longer: the only
    // checkpoint is the one the stop takes), then resumed.
    let engine = Engine::new();
    run(&engine, &job_sql(&dir, "out")).await;
    let job = engine.submit(insert).await.expect("submit");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    job.stop_with_checkpoint();
    job.wait().await.expect("stopped");
    assert!(matches!(job.state(), JobState::Stopped), "state {}", job.state().name());
    assert_eq!(job.status().checkpoints.len(), 1);
    let (published, hidden) = rows(&dir.join("out"));
    assert_eq!(hidden, 0, "unpublished files after the stop");
    assert!(
        !published.is_empty() && published.len() < want.len(),
        "{} of {} rows published at the stop",
        published.len(),
        want.len()
    );

    let engine = Engine::new();
    run(&engine, &job_sql(&dir, "out")).await;
    engine.submit(insert).await.expect("submit").wait().await.expect("resumed run");
    let (got, hidden) = rows(&dir.join("out"));
    assert_eq!(hidden, 0);
    assert_eq!(got.len(), want.len());
    assert!(got == want, "rows differ from the uninterrupted run");
}

/// At-least-once checkpoints (no barrier alignment): after a stop and a resume nothing is
/// missing; a row may appear more than once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_loses_nothing() {
    let dir = crate::slt::tempdir();
    let union = "INSERT INTO out SELECT auction, price, date_time FROM bid WHERE MOD(auction, 3) = 0 \
                 UNION ALL SELECT auction, price, date_time FROM bid WHERE MOD(auction, 3) = 1";
    let engine = Engine::new();
    run(&engine, &job_sql(&dir, "reference")).await;
    engine.submit(union).await.expect("submit").wait().await.expect("reference run");
    let (want, _) = rows(&dir.join("reference"));

    let engine = Engine::new();
    run(&engine, &format!("{} SET 'checkpoint.mode' = 'at-least-once';", job_sql(&dir, "out"))).await;
    let job = engine.submit(union).await.expect("submit");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    job.stop_with_checkpoint();
    job.wait().await.expect("stopped");
    assert!(matches!(job.state(), JobState::Stopped), "state {}", job.state().name());

    let engine = Engine::new();
    run(&engine, &format!("{} SET 'checkpoint.mode' = 'at-least-once';", job_sql(&dir, "out"))).await;
    engine.submit(union).await.expect("submit").wait().await.expect("resumed run");
    let (got, hidden) = rows(&dir.join("out"));
    assert_eq!(hidden, 0);
    let got_set: std::collections::BTreeSet<&String> = got.iter().collect();
    let missing = want.iter().filter(|r| !got_set.contains(r)).count();
    assert_eq!(missing, 0, "{missing} rows lost");
    assert!(got.len() >= want.len());
}

/// A statement set whose small INSERT has read all of its input and ended before the stop:
/// its sink waits for the final checkpoint, and the stop checkpoint must stand for it (the
/// job used to run on forever). Both outputs are then exactly an uninterrupted run's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_after_one_insert_of_a_set_has_ended_publishes_both() {
    let dir = crate::slt::tempdir();
    let tables = |name: &str| {
        format!(
            "{} CREATE TABLE person (id BIGINT, city STRING) WITH ('connector' = 'nexmark', 'table' = 'person', \
               'events' = '2000');
             CREATE TABLE few (id BIGINT, city STRING) WITH ('connector' = 'filesystem', 'path' = '{}', \
               'format' = 'csv');",
            job_sql(&dir, name),
            dir.join(format!("{name}-few")).display()
        )
    };
    let set = "EXECUTE STATEMENT SET BEGIN
        INSERT INTO out SELECT auction, price, date_time FROM bid WHERE MOD(auction, 3) = 0;
        INSERT INTO few SELECT id, city FROM person; END";
    let engine = Engine::new();
    run(&engine, &tables("reference")).await;
    engine.submit(set).await.expect("submit").wait().await.expect("reference run");
    let (want, _) = rows(&dir.join("reference"));
    let (want_few, _) = rows(&dir.join("reference-few"));
    assert!(!want_few.is_empty());

    let engine = Engine::new();
    run(&engine, &tables("out")).await;
    let job = engine.submit(set).await.expect("submit");
    // Until the small INSERT's sink has every row (its source has then ended); a hang guard,
    // not a timing bound.
    let few_in = |job: &weir::JobHandle| -> u64 {
        job.status().operators.iter().filter(|o| o.name.starts_with("Sink: few")).map(|o| o.rows_in).sum()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while few_in(&job) < want_few.len() as u64 {
        assert!(std::time::Instant::now() < deadline, "the small INSERT never read its input");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(matches!(job.state(), JobState::Running), "the big INSERT still runs");
    job.stop_with_checkpoint();
    tokio::time::timeout(std::time::Duration::from_secs(120), job.wait())
        .await
        .expect("the job stops (hang guard)")
        .expect("stopped");
    assert!(matches!(job.state(), JobState::Stopped), "state {}", job.state().name());
    let (few, hidden) = rows(&dir.join("out-few"));
    assert_eq!((few.len(), hidden), (want_few.len(), 0));
    assert!(few == want_few, "the ended INSERT's rows are published by the stop");
    let (published, _) = rows(&dir.join("out"));
    assert!(published.len() < want.len(), "{} of {} rows at the stop", published.len(), want.len());

    let engine = Engine::new();
    run(&engine, &tables("out")).await;
    engine.submit(set).await.expect("submit").wait().await.expect("resumed run");
    let (got, _) = rows(&dir.join("out"));
    let (few, _) = rows(&dir.join("out-few"));
    assert_eq!((got.len(), few.len()), (want.len(), want_few.len()));
    assert!(got == want && few == want_few, "rows differ from the uninterrupted run");
}

//! Stable operator identities: a job stopped with a checkpoint, then restored after an
//! unrelated change to its SQL (a filter added after its aggregate, a second INSERT, its sink
//! replaced by another connector), keeps the state of every unchanged operator, and its
//! output is exactly that of a run that never stopped. A changed operator is rebuilt by
//! replay, named with its id, the id `EXPLAIN` shows and the checkpoint lists.

use std::path::Path;

use weir::arrow::array::{Array, AsArray};
use weir::{Engine, JobState, Outcome};

use crate::rescale::{copy_dir, Collect};

/// The window aggregate every variant keeps.
const WINDOWED: &str = "SELECT auction, window_start, window_end, COUNT(*) AS c, SUM(price) AS t
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
  GROUP BY auction, window_start, window_end";

fn insert(filter: &str) -> String {
    format!("INSERT INTO out SELECT auction, window_start, window_end, c, t FROM ({WINDOWED}){filter}")
}

const PEOPLE: &str = "INSERT INTO people SELECT id, city FROM person WHERE MOD(id, 3) = 0";

/// The tables of a run named `name`, under `dir/name`; `out` is written by `out_connector`.
fn setup(dir: &Path, name: &str, out_connector: &str) -> String {
    let root = dir.join(name);
    let out = match out_connector {
        "collect" => "'connector' = 'collect'".to_string(),
        _ => format!("'connector' = 'filesystem', 'path' = '{}', 'format' = 'csv'", root.join("out").display()),
    };
    format!(
        "SET 'parallelism' = '2';
         SET 'checkpoint.interval' = '10min';
         SET 'checkpoint.dir' = '{ck}';
         SET 'pipeline.name' = 'windows';
         CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP(3),
           WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
           WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '600000', 'rate' = '300000');
         CREATE TABLE person (id BIGINT, city STRING)
           WITH ('connector' = 'nexmark', 'table' = 'person', 'events' = '200000');
         CREATE TABLE out (auction BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), c BIGINT, t BIGINT)
           WITH ({out});
         CREATE TABLE people (id BIGINT, city STRING)
           WITH ('connector' = 'filesystem', 'path' = '{people}', 'format' = 'csv');",
        ck = root.join("checkpoints").display(),
        people = root.join("people").display(),
    )
}

/// The rows of a file sink's published files, each as `a|b|…`, sorted.
pub(crate) fn file_rows(dir: &Path) -> Vec<String> {
    let mut rows = Vec::new();
    for entry in std::fs::read_dir(dir).expect("output").flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with('_') || name.starts_with('.') {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).expect("read");
        rows.extend(text.lines().map(|l| l.replace(',', "|").replace('T', " ")));
    }
    rows.sort();
    rows
}

/// An engine whose `'connector' = 'collect'` tables hand their chunks to `chunks`.
pub(crate) fn engine(chunks: &std::sync::Arc<std::sync::Mutex<Vec<weir::Chunk>>>) -> Engine {
    Engine::with_connectors(std::sync::Arc::new(Collect {
        by_table: None,
        builtin: weir::connector::Connectors,
        chunks: chunks.clone(),
    }))
}

/// Run `statements` (after the tables of `name`) to their end.
async fn run(dir: &Path, name: &str, out_connector: &str, statements: &str) -> weir::Result<Vec<String>> {
    let chunks = Default::default();
    let engine = engine(&chunks);
    engine.execute_all(&setup(dir, name, out_connector)).await?;
    for outcome in engine.execute_all(statements).await? {
        if let Outcome::Job(job) = outcome {
            job.wait().await?;
        }
    }
    let taken = std::mem::take(&mut *chunks.lock().expect("chunks"));
    let batches: Vec<_> = taken.iter().map(|c| c.batch.clone()).collect();
    Ok(crate::rows(&batches).into_iter().map(|r| r.replace('T', " ")).collect())
}

/// The stopped run, copied for a variant to resume.
fn copy_of_stopped(dir: &Path, name: &str) {
    copy_dir(&dir.join("stopped"), &dir.join(name));
}

/// The ids a manifest lists, and the ids of the parts it holds state of.
fn manifest_ids(checkpoints: &Path) -> (Vec<String>, Vec<String>) {
    let job = checkpoints.join("windows");
    let chk = std::fs::read_dir(&job)
        .expect("checkpoints")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("chk-")))
        .max()
        .expect("a checkpoint");
    let text = std::fs::read_to_string(chk.join("manifest.json")).expect("manifest");
    let manifest: serde_json::Value = serde_json::from_str(&text).expect("json");
    let parts = manifest["parts"].as_array().expect("parts");
    let ids = |with_state: bool| -> Vec<String> {
        let mut ids: Vec<String> = parts
            .iter()
            .filter(|p| !with_state || p["has_state"] == true)
            .map(|p| p["id"].as_str().expect("id").to_string())
            .collect();
        ids.sort();
        ids
    };
    (ids(false), ids(true))
}

/// The `State` lines of `EXPLAIN`: (id, slot and name).
async fn explained_ids(dir: &Path, statement: &str) -> Vec<(String, String)> {
    let engine = Engine::new();
    engine.execute_all(&setup(dir, "explain", "filesystem")).await.expect("setup");
    let Some(Outcome::Table(batches)) =
        engine.execute_all(&format!("EXPLAIN {statement}")).await.expect("explain").pop()
    else {
        panic!("EXPLAIN shows a table");
    };
    // One row per line, in order.
    let lines: Vec<String> = batches
        .iter()
        .flat_map(|b| {
            let lines = b.column(0).as_string::<i32>();
            (0..lines.len()).map(|i| lines.value(i).to_string()).collect::<Vec<_>>()
        })
        .collect();
    let at = lines.iter().position(|l| l.starts_with("State, by stable id")).expect("EXPLAIN lists the state's ids");
    lines[at + 1..]
        .iter()
        .take_while(|l| l.starts_with("  "))
        .map(|l| {
            let (id, rest) = l.trim().split_once("  ").expect("id and slot");
            (id.to_string(), rest.to_string())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unrelated_changes_keep_the_state_of_every_unchanged_operator() {
    let dir = crate::slt::tempdir();
    let both = format!("EXECUTE STATEMENT SET BEGIN {}; {PEOPLE}; END", insert(""));
    run(&dir, "reference", "filesystem", &both).await.expect("reference run");
    let want = file_rows(&dir.join("reference").join("out"));
    let want_people = file_rows(&dir.join("reference").join("people"));
    assert!(want.len() > 10_000 && want_people.len() > 1_000, "{} and {} rows", want.len(), want_people.len());
    // Every bid is counted once: what a lost or doubled state would change.
    let bids = |rows: &[String]| -> u64 {
        rows.iter().map(|r| r.split('|').nth(3).expect("c").parse::<u64>().expect("count")).sum()
    };

    // Stopped with a checkpoint after half a second (the interval is far longer).
    let engine = Engine::new();
    engine.execute_all(&setup(&dir, "stopped", "filesystem")).await.expect("setup");
    let job = engine.submit(&insert("")).await.expect("submit");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    job.stop_with_checkpoint();
    job.wait().await.expect("stopped");
    assert!(matches!(job.state(), JobState::Stopped), "state {}", job.state().name());
    let published = file_rows(&dir.join("stopped").join("out"));
    assert!(!published.is_empty() && published.len() < want.len(), "{} of {} rows", published.len(), want.len());
    let rest: Vec<String> = want.iter().filter(|r| published.binary_search(r).is_err()).cloned().collect();

    // The checkpoint lists the ids EXPLAIN shows, and holds the aggregate's state under its id.
    let (listed, held) = manifest_ids(&dir.join("stopped").join("checkpoints"));
    let explained = explained_ids(&dir, &insert("")).await;
    let mut shown: Vec<String> = explained.iter().map(|(id, _)| id.clone()).collect();
    shown.sort();
    assert_eq!(listed, shown, "the checkpoint's parts are those EXPLAIN shows: {explained:?}");
    let aggregate = explained.iter().find(|(_, what)| what.contains("WindowAggregate")).expect("the aggregate's id");
    assert!(held.contains(&aggregate.0), "the checkpoint holds the aggregate's state: {held:?}");

    // 1. A filter added after the aggregate: the rows still to come, filtered.
    copy_of_stopped(&dir, "filtered");
    run(&dir, "filtered", "filesystem", &insert(" WHERE c > 1")).await.expect("resumed with a filter");
    let mut expected: Vec<String> = published.clone();
    expected.extend(rest.iter().filter(|r| r.split('|').nth(3).is_some_and(|c| c != "1")).cloned());
    expected.sort();
    let got = file_rows(&dir.join("filtered").join("out"));
    assert_eq!(got.len(), expected.len(), "filter added: row count");
    assert!(got == expected, "filter added: rows differ from the uninterrupted run's, filtered");

    // 2. A second INSERT added: the first's state kept, the second new (from the start).
    copy_of_stopped(&dir, "second");
    run(&dir, "second", "filesystem", &both).await.expect("resumed with a second INSERT");
    let got = file_rows(&dir.join("second").join("out"));
    assert_eq!((got.len(), bids(&got)), (want.len(), bids(&want)), "second INSERT: rows and bids counted");
    assert!(got == want, "second INSERT: rows differ from the uninterrupted run's");
    assert!(file_rows(&dir.join("second").join("people")) == want_people, "the new INSERT's rows");

    // 3. The sink replaced by another connector: refused while its pre-commits would be
    //    dropped, unless asked; then the aggregate's state carries on into the new sink.
    copy_of_stopped(&dir, "swapped");
    let err = run(&dir, "swapped", "collect", &insert("")).await.expect_err("the file sink's pre-commits");
    assert!(err.message.contains("'Sink: out'") && err.message.contains("replaces the sink"), "{}", err.message);
    assert!(!err.message.contains('\n'), "one line: {}", err.message);
    let ignore = "SET 'execution.savepoint.ignore-unclaimed-state' = 'true';";
    let got = run(&dir, "swapped", "collect", &format!("{ignore} {}", insert(""))).await.expect("resumed into collect");
    assert_eq!((got.len(), bids(&got)), (rest.len(), bids(&rest)), "sink swapped: rows and bids counted");
    assert!(got == rest, "sink swapped: rows differ from the uninterrupted run's");
}

/// A changed operator is rebuilt by reading its input again, named by the id `EXPLAIN`
/// shows; the job then runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_operator_is_rebuilt_and_named_with_its_id() {
    let dir = crate::slt::tempdir();
    let engine = Engine::new();
    engine.execute_all(&setup(&dir, "stopped", "filesystem")).await.expect("setup");
    let job = engine.submit(&insert("")).await.expect("submit");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    job.stop_with_checkpoint();
    job.wait().await.expect("stopped");

    let changed = insert("").replace("SUM(price)", "MAX(price)");
    let explained = explained_ids(&dir, &changed).await;
    let (id, _) = explained.iter().find(|(_, what)| what.contains("WindowAggregate")).expect("the aggregate's id");
    let script = format!("{}\n{changed};", setup(&dir, "stopped", "filesystem"));
    let mut jobs = Engine::new().check_upgrades(&script, None).await.expect("checked");
    let said = jobs.remove(0).describe();
    let line = said.lines().find(|l| l.contains(id.as_str())).unwrap_or_else(|| panic!("{id} not named: {said}"));
    for part in ["rebuilt", "WindowAggregate", "has changed", "reading its input again"] {
        assert!(line.contains(part), "'{part}' missing: {line}");
    }
    let rows = run(&dir, "stopped", "filesystem", &changed).await.expect("rebuilt and run");
    assert!(rows.is_empty(), "a file sink: nothing collected");
}

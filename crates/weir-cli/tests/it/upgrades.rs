//! Changing a job's SQL and keeping its state: a job of several INSERTs is stopped with a
//! savepoint, and each of a matrix of changes to its SQL gets the verdicts `weir upgrade
//! --check` prints (asserted part by part); some are then resumed, and their output is that
//! of the new SQL from the cut-over on.

use std::path::Path;

use weir::arrow::array::{Array, AsArray};
use weir::{Engine, JobUpgrade, Outcome};

/// The INSERTs of version 1, by target.
const WIN: &str = "INSERT INTO win SELECT auction, window_start, window_end, COUNT(*) AS c, SUM(price) AS t
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
  GROUP BY auction, window_start, window_end";
const GRP: &str = "INSERT INTO grp SELECT auction, COUNT(*) AS c, MAX(price) AS m FROM bid GROUP BY auction";
const TOP: &str = "INSERT INTO top SELECT auction, price FROM (SELECT auction, price,
  ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rn FROM bid) WHERE rn <= 3";
const FIRST: &str = "INSERT INTO firsts SELECT bidder, auction, price FROM (SELECT bidder, auction, price,
  ROW_NUMBER() OVER (PARTITION BY bidder ORDER BY date_time ASC) AS rn FROM bid) WHERE rn = 1";
const JOINED: &str = "INSERT INTO joined SELECT p.id, p.name, a.id FROM person p JOIN auction a ON p.id = a.seller";
const PEOPLE: &str = "INSERT INTO people SELECT id, city FROM person WHERE MOD(id, 3) = 0";

/// The tables, checkpoints in `dir/checkpoints`, savepoints in `dir/savepoints`.
pub(crate) fn setup(dir: &Path, parallelism: u32) -> String {
    format!(
        "SET 'parallelism' = '{parallelism}';
         SET 'checkpoint.interval' = '10min';
         SET 'checkpoint.dir' = '{ck}';
         SET 'state.savepoints.dir' = '{sp}';
         SET 'pipeline.name' = 'shop';
         CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3),
           WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
           WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '400000', 'rate' = '200000');
         CREATE TABLE person (id BIGINT, name STRING, city STRING)
           WITH ('connector' = 'nexmark', 'table' = 'person', 'events' = '200000', 'rate' = '50000');
         CREATE TABLE auction (id BIGINT, seller BIGINT)
           WITH ('connector' = 'nexmark', 'table' = 'auction', 'events' = '200000', 'rate' = '50000');
         CREATE TABLE win (auction BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), c BIGINT, t BIGINT)
           WITH ('connector' = 'filesystem', 'path' = '{win}', 'format' = 'csv');
         CREATE TABLE grp (auction BIGINT, c BIGINT, m BIGINT) WITH ('connector' = 'blackhole');
         CREATE TABLE top (auction BIGINT, price BIGINT) WITH ('connector' = 'blackhole');
         CREATE TABLE firsts (bidder BIGINT, auction BIGINT, price BIGINT) WITH ('connector' = 'blackhole');
         CREATE TABLE joined (id BIGINT, name STRING, auction BIGINT) WITH ('connector' = 'blackhole');
         CREATE TABLE people (id BIGINT, city STRING)
           WITH ('connector' = 'filesystem', 'path' = '{people}', 'format' = 'csv');",
        ck = dir.join("checkpoints").display(),
        sp = dir.join("savepoints").display(),
        win = dir.join("win").display(),
        people = dir.join("people").display(),
    )
}

fn set(inserts: &[&str]) -> String {
    format!("EXECUTE STATEMENT SET BEGIN {}; END", inserts.join(";\n"))
}

const V1: [&str; 6] = [WIN, GRP, TOP, FIRST, JOINED, PEOPLE];

/// The rows of the one table `outcome` holds, one string per row.
fn table_rows(outcome: Outcome) -> Vec<String> {
    let Outcome::Table(batches) = outcome else { panic!("a table") };
    batches
        .iter()
        .flat_map(|b| {
            let col = b.column(0).as_string::<i32>();
            (0..col.len()).map(|i| col.value(i).to_string()).collect::<Vec<_>>()
        })
        .collect()
}

/// A batch's rows as `a|b|c`, in their order (each with its op at the same index).
fn rows_in_order(batch: &weir::arrow::record_batch::RecordBatch) -> Vec<String> {
    let options = weir::display_options();
    let columns = batch.columns().iter();
    let f: Vec<_> = columns
        .map(|c| weir::arrow::util::display::ArrayFormatter::try_new(c.as_ref(), &options).expect("formatter"))
        .collect();
    (0..batch.num_rows()).map(|r| f.iter().map(|f| f.value(r).to_string()).collect::<Vec<_>>().join("|")).collect()
}

/// A chunk's rows as `a|b|c`, each with +1 (an insert or update after) or -1.
pub(crate) fn signed_rows(chunk: &weir::Chunk) -> Vec<(i64, String)> {
    let rows = rows_in_order(&chunk.batch).into_iter().enumerate();
    rows.map(|(i, row)| match chunk.op(i) {
        weir::Op::Insert | weir::Op::UpdateAfter => (1, row),
        weir::Op::Delete | weir::Op::UpdateBefore => (-1, row),
    })
    .collect()
}

/// Version 1 run for a moment, then stopped with a savepoint; its path.
pub(crate) async fn savepoint_of_v1(dir: &Path) -> String {
    let engine = Engine::new();
    engine.execute_all(&setup(dir, 2)).await.expect("setup");
    let job = engine.submit(&set(&V1)).await.expect("version 1");
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    assert!(matches!(job.state(), weir::JobState::Running), "still running: {}", job.state().name());
    let mut out = engine.execute_all("STOP JOB 'shop' WITH SAVEPOINT").await.expect("stop with savepoint");
    let rows = table_rows(out.pop().expect("an outcome"));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(matches!(job.state(), weir::JobState::Stopped), "state {}", job.state().name());
    rows[0].clone()
}

/// The verdicts on `statements` (after the tables) against the savepoint.
async fn check(dir: &Path, parallelism: u32, statements: &str, savepoint: &str) -> JobUpgrade {
    let engine = Engine::new();
    let mut jobs = engine
        .check_upgrades(&format!("{}\n{statements}", setup(dir, parallelism)), Some(savepoint))
        .await
        .expect("checked");
    assert_eq!(jobs.len(), 1);
    jobs.remove(0)
}

/// Each part's verdict, as `word name`.
fn verdicts(up: &JobUpgrade) -> Vec<String> {
    let (_, found) = up.found.as_ref().expect("a checkpoint");
    found.entries.iter().map(|e| format!("{} {}", e.verdict.word(), e.name)).collect()
}

/// Every part kept but those named, with their verdicts (`word name-prefix`, one per part).
fn assert_verdicts(label: &str, up: &JobUpgrade, changed: &[&str]) {
    let mut rest = verdicts(up);
    for c in changed {
        let at = rest.iter().position(|l| l.starts_with(c));
        let Some(at) = at else { panic!("{label}: no '{c}'\n{}", up.describe()) };
        rest.remove(at);
    }
    for line in &rest {
        assert!(line.starts_with("kept "), "{label}: '{line}' is not kept\n{}", up.describe());
    }
    let refused = changed.iter().any(|c| c.starts_with("refused"));
    assert_eq!(up.refused(), refused, "{label}: refused\n{}", up.describe());
}

/// The INSERTs of version 1 reading `bid` share its scan: an operator of one rebuilt by replay
/// rebuilds them all (9 parts), whichever it is.
fn rebuilt_with_bid() -> Vec<&'static str> {
    let mut parts = vec!["rebuilt Source: bid", "rebuilt WindowAggregate", "rebuilt GroupAggregate", "rebuilt TopN"];
    parts.extend(["rebuilt Watermark"; 4]);
    parts.push("rebuilt "); // the first row's operator, or what it became
    parts
}

/// The join's parts, rebuilt: it reads its own scans.
const JOIN_REBUILT: [&str; 3] = ["rebuilt Source: person", "rebuilt Source: auction", "rebuilt Join"];

/// One change to version 1's SQL: its label, the parallelism it runs at, its statements (after
/// the tables), and the verdicts it gets (`word name-prefix`, every other part kept).
pub(crate) type Case = (&'static str, u32, String, Vec<&'static str>);

/// The matrix of changes.
pub(crate) fn cases() -> Vec<Case> {
    let ignore = "SET 'execution.savepoint.ignore-unclaimed-state' = 'true';";
    let swapped_win = "DROP TABLE win; CREATE TABLE win (auction BIGINT, window_start TIMESTAMP(3), \
        window_end TIMESTAMP(3), c BIGINT, t BIGINT) WITH ('connector' = 'blackhole');";
    let wider_grp = "DROP TABLE grp; CREATE TABLE grp (auction BIGINT, c BIGINT, m BIGINT, a2 BIGINT) \
        WITH ('connector' = 'blackhole');";
    let timed_win = "DROP TABLE win; CREATE TABLE win (auction BIGINT, window_start TIMESTAMP(3), \
        window_end TIMESTAMP(3), c BIGINT, t BIGINT, wt TIMESTAMP(3)) WITH ('connector' = 'blackhole');";
    let extra = "CREATE TABLE extra (id BIGINT, city STRING) WITH ('connector' = 'blackhole');";
    let with = |i: usize, new: &str| -> String {
        let mut v: Vec<String> = V1.iter().map(|s| s.to_string()).collect();
        v[i] = new.to_string();
        set(&v.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let without = |i: usize| -> String {
        let v: Vec<&str> = V1.iter().enumerate().filter(|(k, _)| *k != i).map(|(_, s)| *s).collect();
        set(&v)
    };
    vec![
        ("unchanged", 2, set(&V1), vec![]),
        ("a filter after the window aggregate", 2, with(0, &format!("{WIN} HAVING COUNT(*) > 1")), vec![]),
        ("a HAVING on the group aggregate", 2, with(1, &format!("{GRP} HAVING MAX(price) > 10")), vec![]),
        (
            "a filter before the group aggregate",
            2,
            with(1, &GRP.replace("FROM bid", "FROM bid WHERE price > 0")),
            vec![],
        ),
        ("an output column renamed", 2, with(1, &GRP.replace("AS c,", "AS cnt,")), vec![]),
        ("a projection after the join", 2, with(4, &JOINED.replace("p.name,", "UPPER(p.name),")), vec![]),
        (
            "a scan reading another column",
            2,
            with(5, &PEOPLE.replace("id, city FROM", "id, name FROM")),
            vec!["migrated Source: person"],
        ),
        ("the parallelism and a filter", 1, with(0, &format!("{WIN} HAVING COUNT(*) > 1")), vec![]),
        (
            "an INSERT added to the set",
            2,
            format!(
                "{extra} {}",
                set(&[WIN, GRP, TOP, FIRST, JOINED, PEOPLE, "INSERT INTO extra SELECT id, city FROM person"])
            ),
            vec!["new Sink: extra"],
        ),
        (
            "the window sink swapped for another connector",
            2,
            format!("{swapped_win} {}", set(&V1)),
            vec!["new Sink: win"],
        ),
        ("an INSERT removed", 2, without(3), vec!["migrated Source: bid", "refused Watermark", "refused FirstRow"]),
        (
            "an INSERT removed, dropping asked for",
            2,
            format!("{ignore} {}", without(3)),
            vec!["migrated Source: bid", "dropped Watermark", "dropped FirstRow"],
        ),
        (
            "SUM became MAX in the window aggregate",
            2,
            with(0, &WIN.replace("SUM(price)", "MAX(price)")),
            rebuilt_with_bid(),
        ),
        (
            "a column computed from the group key added to the output",
            2,
            format!(
                "{wider_grp} {}",
                with(1, "INSERT INTO grp SELECT auction, COUNT(*) AS c, MAX(price) AS m, auction * 2 AS a2 FROM bid GROUP BY auction")
            ),
            vec![],
        ),
        (
            "window_time added to the window aggregate's output",
            2,
            format!(
                "{timed_win} {}",
                with(0, &WIN.replace("SUM(price) AS t", "SUM(price) AS t, window_time AS wt").replace("BY auction, window_start, window_end", "BY auction, window_start, window_end, window_time"))
            ),
            vec!["new Sink: win"],
        ),
        (
            "the window aggregate's SUM over another column",
            2,
            with(0, &WIN.replace("SUM(price)", "SUM(bidder)")),
            rebuilt_with_bid(),
        ),
        (
            "an aggregate added to the group aggregate",
            2,
            with(1, &format!("{GRP} HAVING SUM(price) > 0")),
            rebuilt_with_bid(),
        ),
        (
            "another group key",
            2,
            with(1, &GRP.replace("SELECT auction,", "SELECT bidder,").replace("BY auction", "BY bidder")),
            rebuilt_with_bid(),
        ),
        ("Top-N keeping more rows", 2, with(2, &TOP.replace("rn <= 3", "rn <= 5")), rebuilt_with_bid()),
        (
            "the first row became the last",
            2,
            with(3, &FIRST.replace("date_time ASC", "date_time DESC")),
            rebuilt_with_bid(),
        ),
        ("an inner join made outer", 2, with(4, &JOINED.replace(" JOIN ", " LEFT JOIN ")), JOIN_REBUILT.to_vec()),
        (
            "a state TTL set",
            2,
            format!("SET 'table.exec.state.ttl' = '1h'; {}", set(&V1)),
            [rebuilt_with_bid(), JOIN_REBUILT.to_vec()].concat(),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_changes_get_the_verdicts_their_state_allows() {
    let dir = crate::slt::tempdir();
    let savepoint = savepoint_of_v1(&dir).await;
    assert!(savepoint.ends_with("savepoint-shop-1"), "{savepoint}");
    let cases = cases();
    assert!(cases.len() >= 19);
    for (label, parallelism, statements, changed) in &cases {
        let up = check(&dir, *parallelism, statements, &savepoint).await;
        assert_verdicts(label, &up, changed);
        // Of the parts rebuilt, one is the operator that changed, and it says how.
        let (_, found) = up.found.as_ref().expect("a checkpoint");
        let changed_ones =
            found.entries.iter().filter(|e| e.verdict.why().is_some_and(|w| w.starts_with("has changed")));
        let rebuilt = changed.iter().any(|c| c.starts_with("rebuilt"));
        assert_eq!(changed_ones.count(), usize::from(rebuilt) * if label.contains("TTL") { 2 } else { 1 }, "{label}");
    }
    // Another state layout is refused before any part is looked at.
    let engine = Engine::new();
    let rocksdb = format!("{}\nSET 'state.backend' = 'rocksdb';\n{}", setup(&dir, 2), set(&V1));
    let err = engine.check_upgrades(&rocksdb, Some(&savepoint)).await.expect_err("another layout");
    assert!(err.message.contains("laid out for") && !err.message.contains('\n'), "{}", err.message);

    // An operator that needs rebuilding over input that cannot be read again is refused: a
    // Parquet table's job (its positions count rows inside a file), checked against its final
    // checkpoint.
    let files = dir.join("files");
    let parquet = format!(
        "CREATE TABLE f (k BIGINT, v BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'parquet')",
        files.join("in").display()
    );
    let writer = Engine::new();
    writer.execute_all(&format!("{parquet}; SET 'table.dml-sync' = 'true'")).await.expect("parquet table");
    writer.execute_all("INSERT INTO f VALUES (1, 10), (2, 20), (1, 30)").await.expect("write parquet");
    let tables = format!(
        "SET 'checkpoint.interval' = '10min'; SET 'checkpoint.dir' = '{}'; SET 'pipeline.name' = 'files'; {parquet};
         CREATE TABLE g (k BIGINT, c BIGINT, m BIGINT) WITH ('connector' = 'blackhole');",
        files.join("checkpoints").display(),
    );
    let engine = Engine::new();
    engine.execute_all(&tables).await.expect("setup");
    let v1 = "INSERT INTO g SELECT k, COUNT(*), MAX(v) FROM f GROUP BY k";
    engine.submit(v1).await.expect("files v1").wait().await.expect("files v1 run");
    let v2 = format!("{tables}\n{}", v1.replace("MAX(v)", "MIN(v)"));
    let mut jobs = Engine::new().check_upgrades(&v2, None).await.expect("checked");
    let up = jobs.remove(0);
    assert!(up.refused(), "{}", up.describe());
    let (_, found) = up.found.as_ref().expect("the final checkpoint");
    let refused = found.refusal().unwrap_or_default();
    assert!(refused.contains("table 'f'") && refused.contains("Parquet files are not read again"), "{refused}");
}

/// A CSV table's job restored from its final checkpoint with its aggregate changed, after a
/// file was added: the aggregate is rebuilt by reading the first file again up to the
/// checkpoint's position (the end of that file), and the new file's keys get the new SQL's
/// rows over both files; keys it does not have keep the old rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_tables_job_is_rebuilt_from_its_final_checkpoint_and_reads_a_new_file_after_it() {
    let dir = crate::slt::tempdir();
    let input = dir.join("in");
    std::fs::create_dir_all(&input).expect("dir");
    std::fs::write(input.join("a.csv"), "1,10\n2,20\n1,30\n3,5\n").expect("write");
    let tables = format!(
        "SET 'parallelism' = '1'; SET 'checkpoint.interval' = '10min'; SET 'checkpoint.dir' = '{}';
         SET 'pipeline.name' = 'files';
         CREATE TABLE f (k BIGINT, v BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         CREATE TABLE g (k BIGINT, c BIGINT, x BIGINT) WITH ('connector' = 'collect');",
        dir.join("checkpoints").display(),
        input.display()
    );
    let v1 = "INSERT INTO g SELECT k, COUNT(*), MAX(v) FROM f GROUP BY k";
    let v2 = "INSERT INTO g SELECT k, COUNT(*), MIN(v) FROM f GROUP BY k";
    let chunks = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let engine = crate::identities::engine(&chunks);
    engine.execute_all(&tables).await.expect("setup");
    engine.submit(v1).await.expect("v1").wait().await.expect("v1 run");
    let before = last_rows(&chunks);
    assert_eq!(before.values().cloned().collect::<Vec<_>>(), ["1|2|30", "2|1|20", "3|1|5"]);

    std::fs::write(input.join("b.csv"), "1,7\n4,40\n").expect("a new file");
    let engine = crate::identities::engine(&chunks);
    engine.execute_all(&tables).await.expect("setup");
    let upgrade = table_rows(engine.execute_all(&format!("EXPLAIN UPGRADE {v2}")).await.expect("explain").remove(0));
    assert!(upgrade.iter().any(|l| l.starts_with("  rebuilt   Source: f")), "{upgrade:?}");
    assert!(upgrade.iter().any(|l| l.starts_with("  rebuilt   GroupAggregate")), "{upgrade:?}");
    engine.submit(v2).await.expect("v2").wait().await.expect("v2 run");
    // Keys 1 and 4 are in the new file: their rows are v2's over both files. Nothing of the
    // first file was written again.
    let after = last_rows(&chunks);
    assert_eq!(after.values().cloned().collect::<Vec<_>>(), ["1|3|7", "4|1|40"]);
}

/// Version 2 changes the window aggregate's SUM to MAX: its state is rebuilt by reading the
/// generated bids again up to the savepoint's positions, with nothing written meanwhile. From
/// the cut-over on the sink gets exactly the rows of version 2 run from scratch, for the
/// windows that had not fired before it: windows straddling the cut-over hold every bid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_window_aggregate_is_rebuilt_by_replay_and_writes_exactly_the_new_rows_from_the_cut_over() {
    let dir = crate::slt::tempdir();
    let file_win =
        |dir: &Path| format!("'connector' = 'filesystem', 'path' = '{}', 'format' = 'csv'", dir.join("win").display());
    let v2 = WIN.replace("SUM(price)", "MAX(price)");
    // Version 2 from scratch.
    let reference = dir.join("reference");
    let engine = Engine::new();
    engine.execute_all(&setup(&reference, 2)).await.expect("setup");
    engine.submit(&v2).await.expect("reference").wait().await.expect("reference run");
    let want = crate::identities::file_rows(&reference.join("win"));
    assert!(want.len() > 1000, "{} rows", want.len());

    let first = dir.join("first");
    let engine = Engine::new();
    engine.execute_all(&setup(&first, 2)).await.expect("setup");
    let job = engine.submit(WIN).await.expect("version 1");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let savepoint = table_rows(engine.execute_all("STOP JOB 'shop' WITH SAVEPOINT").await.expect("stop").remove(0));
    assert!(matches!(job.state(), weir::JobState::Stopped));
    let window = |row: &String| row.split('|').take(3).collect::<Vec<_>>().join("|");
    let fired: std::collections::BTreeSet<String> =
        crate::identities::file_rows(&first.join("win")).iter().map(window).collect();
    let expected: Vec<String> = want.iter().filter(|r| !fired.contains(&window(r))).cloned().collect();
    assert!(!fired.is_empty() && expected.len() < want.len() && !expected.is_empty(), "{} fired", fired.len());

    let second = dir.join("second");
    let chunks = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let engine = crate::identities::engine(&chunks);
    engine.execute_all(&setup(&second, 2).replace(&file_win(&second), "'connector' = 'collect'")).await.expect("setup");
    engine.execute_all(&format!("SET 'execution.savepoint.path' = '{}'", savepoint[0])).await.expect("set");
    let upgrade = table_rows(engine.execute_all(&format!("EXPLAIN UPGRADE {v2}")).await.expect("explain").remove(0));
    for line in ["  rebuilt   Source: bid", "  rebuilt   WindowAggregate", "  new       Sink: win"] {
        assert!(upgrade.iter().any(|l| l.starts_with(line)), "{line}: {upgrade:?}");
    }
    engine.submit(&v2).await.expect("version 2").wait().await.expect("version 2 run");
    let taken = std::mem::take(&mut *chunks.lock().expect("chunks"));
    let batches: Vec<_> = taken.iter().map(|c| c.batch.clone()).collect();
    let mut got: Vec<String> = crate::rows(&batches).into_iter().map(|r| r.replace('T', " ")).collect();
    got.sort();
    assert_eq!(got.len(), expected.len(), "rows after the cut-over");
    assert!(got == expected, "rows after the cut-over differ from version 2's from scratch");
}

/// Each key's last row in the changes collected (the key is the first column).
fn last_rows(chunks: &std::sync::Mutex<Vec<weir::Chunk>>) -> std::collections::BTreeMap<String, String> {
    let mut rows = std::collections::BTreeMap::new();
    for chunk in std::mem::take(&mut *chunks.lock().expect("chunks")).iter() {
        for (i, row) in rows_in_order(&chunk.batch).into_iter().enumerate() {
            let key = row.split('|').next().unwrap_or_default().to_string();
            match chunk.op(i) {
                weir::Op::Insert | weir::Op::UpdateAfter => rows.insert(key, row),
                weir::Op::Delete | weir::Op::UpdateBefore => rows.remove(&key),
            };
        }
    }
    rows
}

/// The tables, `grp` collected with a fourth column.
fn collect_grp(dir: &Path, parallelism: u32) -> String {
    setup(dir, parallelism).replace(
        "CREATE TABLE grp (auction BIGINT, c BIGINT, m BIGINT) WITH ('connector' = 'blackhole')",
        "CREATE TABLE grp (auction BIGINT, c BIGINT, m BIGINT, s BIGINT) WITH ('connector' = 'collect')",
    )
}

/// A window rebuilt by replay over a table with a late-data table: the late row the replay
/// meets again was written by version 1 already and is not written twice; a late row after
/// the cut-over is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_rows_met_again_by_a_replay_are_not_written_twice() {
    let dir = crate::slt::tempdir();
    let input = dir.join("in");
    std::fs::create_dir_all(&input).expect("dir");
    // One file per batch: the watermark after a.csv (00:10) makes b.csv's row late.
    std::fs::write(input.join("a.csv"), "a,2023-01-01 00:00:01,10\na,2023-01-01 00:00:12,40\n").expect("a");
    std::fs::write(input.join("b.csv"), "a,2023-01-01 00:00:04,60\n").expect("b");
    let tables = format!(
        "SET 'parallelism' = '1'; SET 'checkpoint.interval' = '10min'; SET 'checkpoint.dir' = '{ck}';
         SET 'pipeline.name' = 'late';
         CREATE TABLE late_events (k STRING, ts TIMESTAMP(3), v INT)
           WITH ('connector' = 'filesystem', 'path' = '{late}', 'format' = 'csv');
         CREATE TABLE events (k STRING, ts TIMESTAMP(3), v INT, WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
           WITH ('connector' = 'filesystem', 'path' = '{input}', 'format' = 'csv', 'late-data.table' = 'late_events');
         CREATE TABLE out (k STRING, n BIGINT) WITH ('connector' = 'blackhole');",
        ck = dir.join("checkpoints").display(),
        late = dir.join("late").display(),
        input = input.display(),
    );
    let v1 = "INSERT INTO out SELECT k, COUNT(*) FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '10' SECOND))
      GROUP BY k, window_start, window_end";
    let engine = Engine::new();
    engine.execute_all(&tables).await.expect("setup");
    engine.submit(v1).await.expect("v1").wait().await.expect("v1 run");
    assert_eq!(crate::identities::file_rows(&dir.join("late")), ["a|2023-01-01 00:00:04|60"]);

    std::fs::write(input.join("c.csv"), "a,2023-01-01 00:00:05,70\n").expect("c");
    let v2 = v1.replace("COUNT(*)", "SUM(CAST(v AS BIGINT))");
    let engine = Engine::new();
    engine.execute_all(&tables).await.expect("setup");
    let upgrade = table_rows(engine.execute_all(&format!("EXPLAIN UPGRADE {v2}")).await.expect("explain").remove(0));
    assert!(upgrade.iter().any(|l| l.starts_with("  rebuilt   WindowAggregate")), "{upgrade:?}");
    engine.submit(&v2).await.expect("v2").wait().await.expect("v2 run");
    let late = crate::identities::file_rows(&dir.join("late"));
    assert_eq!(late, ["a|2023-01-01 00:00:04|60", "a|2023-01-01 00:00:05|70"]);
}

/// A table joined into an INSERT whose aggregate is rebuilt: its scan is new, and reads from
/// its start only once the replay is over (a row of it read during the replay would meet the
/// replayed bids with the output dropped, and be written nowhere). Every join match comes
/// after the cut-over, so every key's last row is version 2's from scratch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_joined_into_a_rebuilt_insert_is_read_after_the_cut_over_and_nothing_is_lost() {
    let dir = crate::slt::tempdir();
    let v1 = "INSERT INTO grp SELECT auction, COUNT(*) AS c, MAX(price) AS m, CAST(NULL AS BIGINT) FROM bid GROUP BY auction";
    let v2 = "INSERT INTO grp SELECT b.auction, COUNT(*) AS c, MAX(b.price) AS m, MAX(a.seller) AS s
      FROM bid b JOIN auction a ON b.auction = a.id GROUP BY b.auction";
    let chunks = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let engine = crate::identities::engine(&chunks);
    engine.execute_all(&collect_grp(&dir.join("reference"), 2)).await.expect("setup");
    engine.submit(v2).await.expect("reference").wait().await.expect("reference run");
    let want = last_rows(&chunks);
    assert!(want.len() > 100, "{} keys", want.len());

    let engine = crate::identities::engine(&chunks);
    engine.execute_all(&collect_grp(&dir, 2)).await.expect("setup");
    engine.submit(v1).await.expect("version 1");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let savepoint = table_rows(engine.execute_all("STOP JOB 'shop' WITH SAVEPOINT").await.expect("stop").remove(0));
    assert!(!last_rows(&chunks).is_empty(), "version 1 wrote nothing");

    let engine = crate::identities::engine(&chunks);
    engine.execute_all(&collect_grp(&dir, 2)).await.expect("setup");
    engine.execute_all(&format!("SET 'execution.savepoint.path' = '{}'", savepoint[0])).await.expect("set");
    let upgrade = table_rows(engine.execute_all(&format!("EXPLAIN UPGRADE {v2}")).await.expect("explain").remove(0));
    assert!(upgrade.iter().any(|l| l.starts_with("  rebuilt   GroupAggregate")), "{upgrade:?}");
    assert!(
        upgrade.iter().any(|l| l.starts_with("  new       Source: auction") && l.contains("once the replay")),
        "{upgrade:?}"
    );
    engine.submit(v2).await.expect("version 2").wait().await.expect("version 2 run");
    let after = last_rows(&chunks);
    assert_eq!(after.len(), want.len(), "keys written after the cut-over");
    assert!(after == want, "rows after the cut-over differ from version 2's from scratch");
}

/// An aggregate added to a GROUP BY, resumed at parallelism 1 from a savepoint of parallelism
/// 2: the group aggregate is rebuilt by replay, and every key's last row after the cut-over
/// is its row in version 2 run from scratch; keys not updated since keep version 1's row,
/// which agrees with version 2 on the columns both have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aggregate_added_at_another_parallelism_is_rebuilt_and_each_keys_last_row_is_the_new_sqls() {
    let dir = crate::slt::tempdir();
    let collect = collect_grp;
    let v1 = "INSERT INTO grp SELECT auction, COUNT(*) AS c, MAX(price) AS m, CAST(NULL AS BIGINT) FROM bid GROUP BY auction";
    let v2 =
        "INSERT INTO grp SELECT auction, COUNT(*) AS c, MAX(price) AS m, SUM(price) AS s FROM bid GROUP BY auction";
    let chunks = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let engine = crate::identities::engine(&chunks);
    engine.execute_all(&collect(&dir.join("reference"), 1)).await.expect("setup");
    engine.submit(v2).await.expect("reference").wait().await.expect("reference run");
    let want = last_rows(&chunks);
    assert!(want.len() > 100, "{} keys", want.len());

    let engine = crate::identities::engine(&chunks);
    engine.execute_all(&collect(&dir, 2)).await.expect("setup");
    engine.submit(v1).await.expect("version 1");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let savepoint = table_rows(engine.execute_all("STOP JOB 'shop' WITH SAVEPOINT").await.expect("stop").remove(0));
    let before = last_rows(&chunks);
    assert!(!before.is_empty() && before.len() < want.len(), "{} keys before", before.len());

    let engine = crate::identities::engine(&chunks);
    engine.execute_all(&collect(&dir, 1)).await.expect("setup");
    engine.execute_all(&format!("SET 'execution.savepoint.path' = '{}'", savepoint[0])).await.expect("set");
    let upgrade = table_rows(engine.execute_all(&format!("EXPLAIN UPGRADE {v2}")).await.expect("explain").remove(0));
    assert!(upgrade.iter().any(|l| l.starts_with("  rebuilt   GroupAggregate")), "{upgrade:?}");
    engine.submit(v2).await.expect("version 2").wait().await.expect("version 2 run");
    let after = last_rows(&chunks);
    assert!(after.len() > want.len() / 2, "{} keys updated after the cut-over", after.len());
    for (key, row) in &want {
        match (after.get(key), before.get(key)) {
            (Some(got), old) => {
                assert_eq!(got, row, "key {key}");
                // Written after the cut-over only for bids after it: the replay wrote nothing.
                let count = |r: &String| r.split('|').nth(1).and_then(|c| c.parse::<u64>().ok());
                assert!(old.is_none_or(|old| count(old) < count(got)), "key {key}: {old:?} then {got}");
            }
            // Not updated since the cut-over: version 1's row, the same on c and m.
            (None, Some(old)) => {
                assert_eq!(old.rsplit_once('|').map(|p| p.0), row.rsplit_once('|').map(|p| p.0), "key {key}")
            }
            (None, None) => panic!("key {key} lost: {row}"),
        }
    }
    assert_eq!(after.keys().filter(|k| !want.contains_key(*k)).count(), 0, "keys version 2 does not have");
}

/// Version 2 resumed from a savepoint moved to another directory, at parallelism 1 where
/// version 1 ran at 2: its sink swapped for another connector (allowed after a savepoint, whose pre-commits were published) and a filter added
/// after the aggregate; output from the cut-over on is the filtered uninterrupted run's. A
/// second start with the same savepoint resumes from the job's own checkpoints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_resumes_from_a_moved_savepoint_with_its_sink_swapped_and_only_once() {
    let dir = crate::slt::tempdir();
    let only_win = |dir: &Path, win: &str| -> String {
        setup(dir, 2).replace(
            &format!("'connector' = 'filesystem', 'path' = '{}', 'format' = 'csv'", dir.join("win").display()),
            win,
        )
    };
    let file_win =
        |dir: &Path| format!("'connector' = 'filesystem', 'path' = '{}', 'format' = 'csv'", dir.join("win").display());
    // The uninterrupted run.
    let reference = dir.join("reference");
    let engine = Engine::new();
    engine.execute_all(&only_win(&reference, &file_win(&reference))).await.expect("setup");
    engine.submit(WIN).await.expect("reference").wait().await.expect("reference run");
    let want = crate::identities::file_rows(&reference.join("win"));
    assert!(want.len() > 1000, "{} rows", want.len());

    let first = dir.join("first");
    let engine = Engine::new();
    engine.execute_all(&only_win(&first, &file_win(&first))).await.expect("setup");
    let job = engine.submit(WIN).await.expect("version 1");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let savepoint = table_rows(engine.execute_all("STOP JOB 'shop' WITH SAVEPOINT").await.expect("stop").remove(0));
    assert!(matches!(job.state(), weir::JobState::Stopped));
    let published = crate::identities::file_rows(&first.join("win"));
    assert!(!published.is_empty() && published.len() < want.len(), "{} of {}", published.len(), want.len());
    let rest: Vec<String> = want.iter().filter(|r| published.binary_search(r).is_err()).cloned().collect();
    let expected: Vec<String> = rest.iter().filter(|r| r.split('|').nth(3) != Some("1")).cloned().collect();

    // Moved elsewhere: a savepoint is self-contained.
    let moved = dir.join("moved");
    std::fs::rename(&savepoint[0], &moved).expect("move the savepoint");
    let second = dir.join("second");
    let chunks = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let engine = crate::identities::engine(&chunks);
    engine.execute_all(&only_win(&second, "'connector' = 'collect'")).await.expect("setup");
    // At another parallelism too: key groups move between tasks.
    engine.execute_all("SET 'parallelism' = '1'").await.expect("parallelism");
    engine.execute_all(&format!("SET 'execution.savepoint.path' = '{}'", moved.display())).await.expect("set");
    let filtered = format!("{WIN} HAVING COUNT(*) > 1");
    let upgrade =
        table_rows(engine.execute_all(&format!("EXPLAIN UPGRADE {filtered}")).await.expect("explain").remove(0));
    assert!(upgrade.iter().any(|l| l.starts_with("  new       Sink: win")), "{upgrade:?}");
    assert!(upgrade.last().is_some_and(|l| l.contains("the job can start")), "{upgrade:?}");
    engine.submit(&filtered).await.expect("version 2").wait().await.expect("version 2 run");
    let taken = std::mem::take(&mut *chunks.lock().expect("chunks"));
    let batches: Vec<_> = taken.iter().map(|c| c.batch.clone()).collect();
    let mut got: Vec<String> = crate::rows(&batches).into_iter().map(|r| r.replace('T', " ")).collect();
    got.sort();
    assert_eq!(got.len(), expected.len(), "rows after the cut-over");
    assert!(got == expected, "rows after the cut-over differ from the uninterrupted run's, filtered");

    // The same savepoint again: the job's own checkpoints (its final one) win, nothing is
    // written twice.
    let engine = crate::identities::engine(&chunks);
    engine.execute_all(&only_win(&second, "'connector' = 'collect'")).await.expect("setup");
    engine.execute_all(&format!("SET 'execution.savepoint.path' = '{}'", moved.display())).await.expect("set");
    engine.submit(&filtered).await.expect("again").wait().await.expect("again run");
    assert!(chunks.lock().expect("chunks").iter().all(|c| c.batch.num_rows() == 0), "rows written twice");
}

/// `weir upgrade --check`: the verdicts on stdout, exit 0 when the job can start, 1 when a part
/// is refused, 2 with the file's position when it cannot be checked; and `weir run
/// --from-savepoint` starts the job from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weir_upgrade_check_prints_verdicts_and_exits_by_them() {
    let dir = crate::slt::tempdir();
    let engine = Engine::new();
    engine.execute_all(&setup(&dir, 2)).await.expect("setup");
    let job = engine.submit(GRP).await.expect("version 1");
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let savepoint = table_rows(engine.execute_all("STOP JOB 'shop' WITH SAVEPOINT").await.expect("stop").remove(0));
    assert!(matches!(job.state(), weir::JobState::Stopped));
    let check = |name: &str, sql: String| {
        let file = dir.join(name);
        std::fs::write(&file, format!("{}\n{sql};\n", setup(&dir, 2))).expect("write");
        std::process::Command::new(crate::weir_bin())
            .args(["upgrade", "--check"])
            .arg(&file)
            .args(["--from", &savepoint[0]])
            .output()
            .expect("weir upgrade")
    };
    let kept = check("kept.sql", format!("{GRP} HAVING MAX(price) > 10"));
    let out = String::from_utf8_lossy(&kept.stdout);
    assert_eq!(kept.status.code(), Some(0), "{out}{}", String::from_utf8_lossy(&kept.stderr));
    assert!(out.contains("from savepoint") && out.contains("  kept      GroupAggregate"), "{out}");
    let rebuilt = check("rebuilt.sql", GRP.replace("MAX(price)", "MIN(price)"));
    let out = String::from_utf8_lossy(&rebuilt.stdout);
    assert_eq!(rebuilt.status.code(), Some(0), "{out}");
    assert!(out.contains("  rebuilt   GroupAggregate") && out.contains("reading its input again"), "{out}");
    // Another INSERT in the job's place: the aggregate's state is claimed by nothing.
    let refused = check("refused.sql", TOP.into());
    let out = String::from_utf8_lossy(&refused.stdout);
    assert_eq!(refused.status.code(), Some(1), "{out}");
    assert!(out.contains("  refused   GroupAggregate") && out.contains("the job would not start"), "{out}");
    let broken = check("broken.sql", "INSERT INTO nowhere SELECT 1".into());
    let err = String::from_utf8_lossy(&broken.stderr);
    assert_eq!(broken.status.code(), Some(2), "{err}");
    assert!(err.contains("broken.sql:") && err.contains("nowhere") && err.lines().count() == 1, "{err}");

    // `weir run --from-savepoint`: the job starts on a copy of it, recorded in its own
    // checkpoint directory (a restart of the same command resumes from its own checkpoints).
    let run_file = dir.join("run.sql");
    std::fs::write(&run_file, format!("{}\nSET 'table.dml-sync' = 'true';\n{GRP};\n", setup(&dir, 2))).expect("write");
    let run = std::process::Command::new(crate::weir_bin())
        .args(["run", "--from-savepoint", &savepoint[0]])
        .arg(&run_file)
        .output()
        .expect("weir run");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let started = std::fs::read_to_string(dir.join("checkpoints").join("shop").join("started-from-savepoint"))
        .expect("the savepoint it started from");
    assert_eq!(started, format!("{} 1", savepoint[0]));
}

/// What cannot be done is refused in one line, naming what to do: stopping a job that is not
/// there, draining, a savepoint without its directory or of a job without checkpoints, an
/// upgrade of a query, `--from` for a script of several jobs, a savepoint that holds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cannot_be_stopped_or_upgraded_is_refused_in_one_line() {
    let dir = crate::slt::tempdir();
    let refused = |sql: &'static str, engine: std::sync::Arc<Engine>| async move {
        let Err(err) = engine.execute_all(sql).await else { panic!("{sql}: not refused") };
        assert!(!err.message.contains('\n'), "one line: {}", err.message);
        err.message
    };
    let engine = std::sync::Arc::new(Engine::new());
    engine.execute_all(&setup(&dir, 2)).await.expect("setup");
    assert!(refused("STOP JOB 'nope'", engine.clone()).await.contains("no job 'nope'"));
    assert!(refused("STOP JOB 'shop' WITH DRAIN", engine.clone()).await.contains("WITH DRAIN"));
    assert!(refused("STOP JOB shop", engine.clone()).await.contains("in quotes"));
    assert!(refused("EXPLAIN UPGRADE SELECT 1", engine.clone()).await.contains("INSERT or a statement set"));

    // A savepoint needs its directory.
    engine.execute_all("RESET 'state.savepoints.dir'").await.expect("reset");
    let job = engine.submit(GRP).await.expect("a job");
    let message = refused("STOP JOB 'shop' WITH SAVEPOINT", engine.clone()).await;
    assert!(message.contains("SET 'state.savepoints.dir'"), "{message}");
    assert!(matches!(job.state(), weir::JobState::Running), "a refused stop leaves the job running");
    let stopped = engine.execute_all("STOP JOB 'shop'").await.expect("stop without a savepoint");
    assert!(matches!(stopped.last(), Some(Outcome::Done(m)) if m.contains("stopped")));
    assert!(matches!(job.state(), weir::JobState::Stopped));

    // A job without checkpoints has no savepoint.
    let plain = std::sync::Arc::new(Engine::new());
    plain.execute_all(&setup(&dir, 2).replace("SET 'checkpoint.interval' = '10min';", "")).await.expect("setup");
    plain.submit(GRP).await.expect("a job");
    assert!(refused("STOP JOB 'shop' WITH SAVEPOINT", plain.clone()).await.contains("takes no checkpoints"));
    let cancelled = plain.execute_all("STOP JOB 'shop'").await.expect("cancelled");
    assert!(matches!(cancelled.last(), Some(Outcome::Done(m)) if m.contains("cancelled (it takes no checkpoints)")));

    // `--from` names one job's checkpoint.
    let two = format!("{}\n{GRP};\n{TOP};", setup(&dir, 2));
    let err = Engine::new().check_upgrades(&two, Some("/nowhere")).await.expect_err("two jobs");
    assert!(err.message.contains("2 jobs"), "{}", err.message);
    // A savepoint path that holds nothing: refused when the job starts.
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).expect("dir");
    let engine = Engine::new();
    engine.execute_all(&setup(&dir, 2)).await.expect("setup");
    engine.execute_all(&format!("SET 'execution.savepoint.path' = '{}'", empty.display())).await.expect("set");
    let err = engine.execute_all(GRP).await.err().expect("nothing to start from");
    assert!(err.message.contains("holds no complete checkpoint"), "{}", err.message);
}

//! Every change of the upgrade matrix that may start, resumed: version 2 starts on version 1's
//! savepoint with its verdicts, and again with every operator rebuilt by replay
//! (`execution.savepoint.rebuild` = 'all': version 2 run from scratch over the whole input,
//! its output from the cut-over on). Each sink's changes from the cut-over on, net, are the
//! same in both: what was kept or migrated is what version 2 would have built itself.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use weir::connector::Connectors;
use weir::{Engine, Outcome};

use crate::rescale::{ByTable, Collect};
use crate::upgrades::{cases, savepoint_of_v1, setup};

/// Every sink collected: the matrix's blackhole and file sinks become `collect`.
fn collected(sql: &str, dir: &Path) -> String {
    let mut sql = sql.replace("'connector' = 'blackhole'", "'connector' = 'collect'");
    for table in ["win", "people"] {
        let file = format!("'connector' = 'filesystem', 'path' = '{}', 'format' = 'csv'", dir.join(table).display());
        sql = sql.replace(&file, "'connector' = 'collect'");
    }
    sql
}

/// Version 2 (`statements`) started on `savepoint` at version 1's parallelism, to its end:
/// each table's net changes, rows with counts. (At another parallelism neither run is one from
/// scratch: a restored watermark is the lowest of the old tasks', and a replay reads the
/// blocks a slower old task had left after the others' frontier, so rows can be late in one
/// and not the other. `upgrades.rs` resumes at another parallelism against a run from scratch
/// where lateness cannot differ.)
async fn resumed(
    dir: &Path,
    statements: &str,
    savepoint: &str,
    rebuild_all: bool,
) -> BTreeMap<String, BTreeMap<String, i64>> {
    let chunks: ByTable = Default::default();
    let collect = Collect { builtin: Connectors, chunks: Default::default(), by_table: Some(chunks.clone()) };
    let engine = Engine::with_connectors(Arc::new(collect));
    engine.execute_all(&collected(&setup(dir, 2), dir)).await.expect("setup");
    engine.execute_all(&format!("SET 'execution.savepoint.path' = '{savepoint}'")).await.expect("savepoint path");
    if rebuild_all {
        engine.execute_all("SET 'execution.savepoint.rebuild' = 'all'").await.expect("rebuild all");
    }
    for outcome in engine.execute_all(&collected(statements, dir)).await.expect("version 2") {
        if let Outcome::Job(job) = outcome {
            job.wait().await.expect("version 2 run");
        }
    }
    let taken = std::mem::take(&mut *chunks.lock().expect("chunks"));
    let mut net = BTreeMap::new();
    for (table, chunks) in taken {
        let rows: &mut BTreeMap<String, i64> = net.entry(table).or_default();
        for (sign, row) in chunks.iter().flat_map(crate::upgrades::signed_rows) {
            *rows.entry(row).or_insert(0) += sign;
        }
        rows.retain(|_, n| *n != 0);
    }
    net
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_change_that_starts_writes_from_the_cut_over_what_its_sql_from_scratch_writes() {
    let dir = crate::slt::tempdir();
    let savepoint = savepoint_of_v1(&dir).await;
    let mut resumed_cases = 0;
    for (k, (label, _, statements, changed)) in cases().iter().enumerate() {
        if changed.iter().any(|c| c.starts_with("refused")) {
            continue;
        }
        // At version 1's parallelism, whatever the case's (the one that changes it is here a
        // filter after an aggregate).
        let kept = resumed(&dir.join(format!("{k}-kept")), statements, &savepoint, false).await;
        let rebuilt = resumed(&dir.join(format!("{k}-rebuilt")), statements, &savepoint, true).await;
        let rows: usize = rebuilt.values().map(BTreeMap::len).sum();
        assert!(rows > 100, "{label}: {rows} rows after the cut-over");
        assert_eq!(kept.keys().collect::<Vec<_>>(), rebuilt.keys().collect::<Vec<_>>(), "{label}: tables written");
        for (table, want) in &rebuilt {
            let got = &kept[table];
            assert_eq!(got.len(), want.len(), "{label}: rows of '{table}' after the cut-over");
            let only_got: Vec<_> = got.iter().filter(|(r, n)| want.get(*r) != Some(n)).take(5).collect();
            let only_want: Vec<_> = want.iter().filter(|(r, n)| got.get(*r) != Some(n)).take(5).collect();
            assert!(
                got == want,
                "{label}: the rows of '{table}' after the cut-over differ from its SQL's from scratch: kept only \
                 {only_got:?}, rebuilt only {only_want:?}"
            );
        }
        println!("{label}: {rows} rows after the cut-over, the same");
        resumed_cases += 1;
    }
    assert!(resumed_cases >= 17, "{resumed_cases} changes resumed");
}

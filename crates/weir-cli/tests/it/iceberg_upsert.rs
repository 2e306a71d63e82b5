//! Upsert Iceberg tables (`'upsert-enabled'`): an updating aggregate with keys that come, change
//! and go is kept as a correct table by equality deletes, read back by the tests' reader
//! (pyiceberg's manifests, pyarrow's files, the spec's merge: pyiceberg plans no scan over
//! equality deletes), against the result computed here from the input.

use std::collections::BTreeMap;

use crate::iceberg::{assert_one_snapshot_per_checkpoint, hadoop, read_table, rows, run_err, run_ok};

/// `k = id % 97`, `SUM((id * 7) % 1000)`, `COUNT(*)` over ids 1..=6000, kept while a key has
/// fewer than 62 rows: 83 keys reach 62 and are deleted, 14 stay.
#[test]
fn updating_aggregate_with_deletes_into_an_upsert_table() {
    let dir = crate::slt::tempdir();
    let wh = dir.join("wh");
    let sql = dir.join("job.sql");
    std::fs::write(
        &sql,
        format!(
            "SET 'checkpoint.interval' = '50ms';
SET 'checkpoint.dir' = '{ck}';
CREATE TABLE src (id BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '6000', 'rows-per-second' = '15000',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '6000');
CREATE TABLE agg (k BIGINT, total BIGINT, cnt BIGINT, PRIMARY KEY (k) NOT ENFORCED)
  WITH ({}, 'upsert-enabled' = 'true');
INSERT INTO agg SELECT id % 97, SUM((id * 7) % 1000), COUNT(*) FROM src GROUP BY id % 97 HAVING COUNT(*) < 62;
",
            hadoop(&wh),
            ck = dir.join("ck").display()
        ),
    )
    .expect("sql");
    run_ok(&sql);
    let mut want: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for id in 1..=6000u64 {
        let e = want.entry(id % 97).or_default();
        e.0 += (id * 7) % 1000;
        e.1 += 1;
    }
    let mut want: Vec<String> =
        want.into_iter().filter(|(_, (_, c))| *c < 62).map(|(k, (s, c))| format!("{k},{s},{c}")).collect();
    want.sort();
    assert_eq!(want.len(), 14);
    let t = read_table(&wh.join("db").join("agg"));
    assert_eq!(rows(&t), want);
    let checkpoints = assert_one_snapshot_per_checkpoint(&t);
    assert!(checkpoints.len() >= 3, "too few snapshots to update across: {checkpoints:?}");
    let last = &t["snapshots"].as_array().expect("snapshots").last().expect("a snapshot")["summary"];
    assert!(last["total-equality-deletes"].as_str().is_some_and(|d| d != "0"), "{last}");
    assert!(t["schema"].as_str().is_some_and(|s| s.contains("1: k: required long")), "{}", t["schema"]);
}

/// An updating result into an Iceberg table that appends, or an upsert table keyed otherwise
/// than the query's result, is refused at planning, saying what to do.
#[test]
fn updating_results_need_an_upsert_table_keyed_like_the_query() {
    let dir = crate::slt::tempdir();
    let case = |columns: &str, options: &str| {
        let sql = dir.join("bad.sql");
        std::fs::write(
            &sql,
            format!(
                "CREATE TABLE src (id BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '10');
CREATE TABLE agg ({columns}) WITH ({}{options});
INSERT INTO agg SELECT id % 3, COUNT(*) FROM src GROUP BY id % 3;
",
                hadoop(&dir.join("wh"))
            ),
        )
        .expect("sql");
        run_err(&sql)
    };
    let err = case("k BIGINT, cnt BIGINT", "");
    assert!(err.contains("an Iceberg table appends unless 'upsert-enabled' = 'true'"), "{err}");
    let err = case("k BIGINT, cnt BIGINT", ", 'upsert-enabled' = 'true'");
    assert!(err.contains("'upsert-enabled' needs the key"), "{err}");
    let err = case("k BIGINT, cnt BIGINT, PRIMARY KEY (cnt) NOT ENFORCED", ", 'upsert-enabled' = 'true'");
    assert!(err.contains("cnt"), "{err}");
    assert!(!dir.join("wh").exists(), "nothing written");
}

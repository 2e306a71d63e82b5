//! MATCH_RECOGNIZE against Flink: the queries of `sql-tests/flink-ref/match/` over
//! `sql-tests/data/ticks.csv` (the examples of Flink's documentation, each in a partition of
//! its own, and Weir's: several partitions, rows of one time, NULLs, patterns that overlap
//! and that never complete, every skip strategy, greedy and reluctant quantifiers, WITHIN).
//! Each query's rows equal Flink 1.20.5's at parallelism 1 and 2 with memory and RocksDB
//! state; queries Flink refuses are refused by Weir, with a reason.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn match_recognize_leaves_flinks_rows() {
    crate::flink_ref::compare_folder("match", 12).await;
}

/// `AFTER MATCH SKIP TO FIRST A` where A's first row starts the match would find the same
/// match forever: Flink fails the job ("Could not skip to first element of a match"), and so
/// does Weir, with one line that says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipping_to_where_a_match_started_fails_the_query_as_flink_does() {
    let state = crate::slt::tempdir();
    let engine = crate::flink_ref::engine_for("match", 1, "memory", &state).await;
    let query = "SELECT * FROM ticks MATCH_RECOGNIZE (PARTITION BY sym ORDER BY ts MEASURES SUM(A.price) AS s
        AFTER MATCH SKIP TO FIRST A PATTERN (A+ C) DEFINE A AS SUM(A.price) < 30) AS T";
    let failed = match engine.query(query).await {
        Ok(rows) => rows.collect().await.err().map(|e| e.to_string()),
        Err(e) => Some(e.to_string()),
    };
    let failed = failed.expect("the query ran to its end");
    assert!(failed.contains("could not skip to the first row of a match"), "{failed}");
    assert!(!failed.contains('\n'), "one line: {failed}");
}

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

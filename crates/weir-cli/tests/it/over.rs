//! OVER aggregates against Flink: the queries of `sql-tests/flink-ref/over/` (partitions,
//! rows of one time, NULLs, ROWS, RANGE and unbounded frames, LAG, named windows, computed
//! arguments and keys) over `sql-tests/data/over_events.csv`, at parallelism 1 and 2 with
//! memory and with RocksDB state: each query's rows equal Flink 1.20.5's (`qN.csv` beside
//! it). Queries Flink refuses (no `qN.csv`) are refused by Weir too, with a reason.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_aggregates_leave_flinks_rows() {
    crate::flink_ref::compare_folder("over", 12).await;
}

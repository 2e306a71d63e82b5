//! OVER aggregates against Flink: the queries of `sql-tests/flink-ref/over/` (partitions,
//! rows of one time, NULLs, ROWS, RANGE and unbounded frames, LAG, named windows, computed
//! arguments and keys) over `sql-tests/data/over_events.csv`, at parallelism 1 and 2 with
//! memory and with RocksDB state: each query's rows equal Flink 1.20.5's (`qN.csv` beside
//! it). Queries Flink refuses (no `qN.csv`) are refused by Weir too, with a reason.

use crate::updating::{canonical, sink_types, SETUPS};
use weir::Engine;

fn folder() -> std::path::PathBuf {
    crate::repo().join("sql-tests/flink-ref/over")
}

async fn engine_at(parallelism: usize, backend: &str, state: &std::path::Path) -> Engine {
    let prelude = std::fs::read_to_string(folder().join("prelude.sql")).expect("prelude");
    let data = crate::repo().join("sql-tests/data");
    // Flink reads an empty CSV field as NULL only when told; Weir always does.
    let prelude = prelude.replace("'data/", &format!("'{}/", data.display())).replace(", 'csv.null-literal' = ''", "");
    crate::updating::engine_in_setup(parallelism, backend, state, &prelude).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_aggregates_leave_flinks_rows() {
    let state = crate::slt::tempdir();
    let mut engines = Vec::new();
    for (parallelism, backend) in SETUPS {
        engines.push((parallelism, backend, engine_at(parallelism, backend, &state).await));
    }
    let mut compared = 0;
    for q in 1.. {
        let Ok(text) = std::fs::read_to_string(folder().join(format!("q{q}.sql"))) else { break };
        let select = text.split_once("INSERT INTO nexmark_q ").map(|(_, s)| s).expect("an INSERT");
        let select = select.trim().trim_end_matches(';');
        let Ok(reference) = std::fs::read_to_string(folder().join(format!("q{q}.csv"))) else {
            // Flink refuses it: so does Weir, saying why.
            for (parallelism, backend, engine) in &engines {
                let refused = match engine.query(select).await {
                    Err(e) => e.to_string(),
                    Ok(_) => {
                        panic!("q{q} at parallelism {parallelism}, {backend} state: Flink refuses it, Weir ran it")
                    }
                };
                assert!(refused.starts_with("not supported: "), "q{q}: {refused}");
            }
            continue;
        };
        let types = sink_types(&text);
        let mut want: Vec<String> = reference.lines().map(String::from).collect();
        want.sort();
        for (parallelism, backend, engine) in &engines {
            let got = engine.query(select).await.unwrap_or_else(|e| panic!("q{q}: {e}"));
            let got = canonical(&got.collect().await.unwrap_or_else(|e| panic!("q{q}: {e}")), &types);
            assert_eq!(got, want, "q{q} at parallelism {parallelism}, {backend} state");
        }
        compared += 1;
    }
    assert!(compared >= 12, "only {compared} queries compared");
}

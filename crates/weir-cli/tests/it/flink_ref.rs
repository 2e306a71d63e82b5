//! Queries against Flink's rows: each `qN.sql` of a folder of `sql-tests/flink-ref/` (a sink
//! DDL and an `INSERT`) runs in Weir at parallelism 1 and 2, with memory and with RocksDB
//! state, and its final rows must equal `qN.csv` beside it, Flink 1.20.5's. A query without
//! a `qN.csv` is one Flink refuses: Weir must refuse it too, saying why.

use crate::updating::{canonical, sink_types, SETUPS};
use weir::Engine;

/// An engine with the tables of `sql-tests/flink-ref/<name>/prelude.sql`.
pub async fn engine_for(name: &str, parallelism: usize, backend: &str, state: &std::path::Path) -> Engine {
    engine_at(&crate::repo().join("sql-tests/flink-ref").join(name), parallelism, backend, state).await
}

async fn engine_at(folder: &std::path::Path, parallelism: usize, backend: &str, state: &std::path::Path) -> Engine {
    let prelude = std::fs::read_to_string(folder.join("prelude.sql")).expect("prelude");
    let data = crate::repo().join("sql-tests/data");
    // Flink reads an empty CSV field as NULL only when told; Weir always does.
    let prelude = prelude.replace("'data/", &format!("'{}/", data.display())).replace(", 'csv.null-literal' = ''", "");
    crate::updating::engine_in_setup(parallelism, backend, state, &prelude).await
}

/// Compare every query of `sql-tests/flink-ref/<name>`; at least `least` must run.
pub async fn compare_folder(name: &str, least: usize) {
    let folder = crate::repo().join("sql-tests/flink-ref").join(name);
    let state = crate::slt::tempdir();
    let mut engines = Vec::new();
    for (parallelism, backend) in SETUPS {
        engines.push((parallelism, backend, engine_at(&folder, parallelism, backend, &state).await));
    }
    let mut compared = 0;
    for q in 1.. {
        let Ok(text) = std::fs::read_to_string(folder.join(format!("q{q}.sql"))) else { break };
        let select = text.split_once("INSERT INTO nexmark_q ").map(|(_, s)| s).expect("an INSERT");
        let select = select.trim().trim_end_matches(';');
        let Ok(reference) = std::fs::read_to_string(folder.join(format!("q{q}.csv"))) else {
            // Flink refuses it: so does Weir, saying why.
            for (parallelism, backend, engine) in &engines {
                let refused = match engine.query(select).await {
                    Err(e) => e.to_string(),
                    Ok(_) => {
                        panic!(
                            "{name} q{q} at parallelism {parallelism}, {backend} state: Flink refuses it, Weir ran it"
                        )
                    }
                };
                assert!(
                    refused.starts_with("not supported: ") || refused.contains("MATCH_RECOGNIZE"),
                    "{name} q{q}: {refused}"
                );
            }
            continue;
        };
        let types = sink_types(&text);
        let mut want: Vec<String> = reference.lines().map(String::from).collect();
        want.sort();
        for (parallelism, backend, engine) in &engines {
            let got = engine.query(select).await.unwrap_or_else(|e| panic!("{name} q{q}: {e}"));
            let got = canonical(&got.collect().await.unwrap_or_else(|e| panic!("{name} q{q}: {e}")), &types);
            assert_eq!(got, want, "{name} q{q} at parallelism {parallelism}, {backend} state");
        }
        compared += 1;
    }
    assert!(compared >= least, "{name}: only {compared} queries compared");
}

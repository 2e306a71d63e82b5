//! Weir's integration tests: one binary (links once), one module per concern.

mod avro;
mod committers;
mod crash;
mod datagen;
mod fixture;
mod flink_ref;
mod functions_doc;
mod guarantees;
mod iceberg;
mod iceberg_rest;
mod iceberg_upsert;
mod identities;
mod joins;
mod kafka;
mod kafka_computed;
mod kafka_front;
mod kafka_metadata;
mod kafka_over;
mod kafka_restarts;
mod kafka_security;
mod kafka_upsert;
mod kills;
mod match_recognize;
mod object_store;
mod over;
mod parallel;
mod partition_commit;
mod postgres;
mod postgres_crashes;
mod postgres_timeouts;
mod proctime;
mod quickstart;
mod repl;
mod rescale;
mod restart;
mod slt;
mod statement_set;
mod stop;
mod table_sink;
mod updating;
mod upgrade_kills;
mod upgrade_nexmark;
mod upgrade_resumes;
mod upgrade_sinks;
mod upgrades;
mod verify;
mod web;
mod windows;
mod workers;

use std::path::PathBuf;

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

/// The `weir` binary built for these tests.
pub fn weir_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_weir"))
}

/// Rows of batches as `a|b|c` strings, sorted: results compared whatever their order.
pub fn rows(batches: &[weir::arrow::record_batch::RecordBatch]) -> Vec<String> {
    let options = weir::display_options();
    let mut out = Vec::new();
    for b in batches {
        let f: Vec<_> = b
            .columns()
            .iter()
            .map(|c| weir::arrow::util::display::ArrayFormatter::try_new(c.as_ref(), &options).expect("formatter"))
            .collect();
        for r in 0..b.num_rows() {
            out.push(f.iter().map(|f| f.value(r).to_string()).collect::<Vec<_>>().join("|"));
        }
    }
    out.sort();
    out
}

/// Run statements; wait for the jobs they start.
pub async fn run(engine: &weir::Engine, sql: &str) {
    for outcome in engine.execute_all(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}")) {
        if let weir::Outcome::Job(job) = outcome {
            job.wait().await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }
}

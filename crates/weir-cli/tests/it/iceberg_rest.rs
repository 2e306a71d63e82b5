//! The Iceberg sink through a REST catalog. No REST catalog server can be installed here, so
//! `scripts/lake.py rest-catalog` serves the spec's calls a writer makes from pyiceberg's own
//! `SqlCatalog`: requirements and updates are checked and applied by pyiceberg's code, and
//! the table is read back through pyiceberg's `RestCatalog` client.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value as Json;

use crate::iceberg::{assert_one_snapshot_per_checkpoint_per_job, lake, rows, run_err, run_ok, sequence, StandIn};

fn rest_catalog(dir: &Path) -> StandIn {
    let db = format!("sqlite:///{}", dir.join("catalog.db").display());
    let wh = dir.join("wh");
    StandIn::start(dir, &["rest-catalog", &db, wh.to_str().expect("utf-8 path"), "tok"])
}

fn options(url: &str, auth: &str) -> String {
    format!("'connector' = 'iceberg', 'catalog-type' = 'rest', 'uri' = '{url}', {auth}, 'catalog-database' = 'ns'")
}

/// Two jobs append to one table at once through the REST catalog (the table created by the
/// first to get there, OAuth2 client credentials exchanged for a token), committing every
/// 30 ms so that their commits race through the catalog's requirements; a third keeps a
/// GROUP BY's result by equality deletes. The same file again restores all three from their
/// final checkpoints and adds nothing.
#[test]
fn rest_catalog_tables_are_created_committed_and_read_by_pyiceberg() {
    let dir = crate::slt::tempdir();
    let server = rest_catalog(&dir);
    let with = options(&server.url, "'credential' = 'weir:secret'");
    let source = |name: &str, from: u64| sequence(name, 5_000, 20_000, from);
    let sql = dir.join("job.sql");
    std::fs::write(
        &sql,
        format!(
            "SET 'checkpoint.interval' = '30ms';
SET 'checkpoint.dir' = '{}';
{}{}CREATE TABLE out (id BIGINT) WITH ({with});
CREATE TABLE agg (k BIGINT, n BIGINT, PRIMARY KEY (k) NOT ENFORCED) WITH ({with}, 'upsert-enabled' = 'true');
SET 'pipeline.name' = 'writer-a';
INSERT INTO out SELECT id FROM a;
SET 'pipeline.name' = 'writer-b';
INSERT INTO out SELECT id FROM b;
SET 'pipeline.name' = 'counts';
INSERT INTO agg SELECT id % 10, COUNT(*) FROM b GROUP BY id % 10;
",
            dir.join("ck").display(),
            source("a", 1),
            source("b", 5_001),
        ),
    )
    .expect("sql");
    let read = |table: &str| lake(&["rest-table", &server.url, "tok", &format!("ns.{table}")]);
    let check = |out: &Json, agg: &Json| {
        let mut want: Vec<String> = (1..=10_000u64).map(|i| i.to_string()).collect();
        want.sort();
        assert_eq!(rows(out), want, "each id once");
        assert_one_snapshot_per_checkpoint_per_job(out);
        let jobs: BTreeSet<&str> = out["snapshots"]
            .as_array()
            .expect("snapshots")
            .iter()
            .filter_map(|s| s["summary"]["weir.job-id"].as_str())
            .collect();
        assert_eq!(jobs.len(), 2, "two writers");
        let want: Vec<String> = (0..10).map(|k| format!("{k},500")).collect();
        assert_eq!(rows(agg), want, "the GROUP BY's final result, each key once");
        assert_one_snapshot_per_checkpoint_per_job(agg);
        (out["snapshots"].as_array().map_or(0, Vec::len), agg["snapshots"].as_array().map_or(0, Vec::len))
    };
    run_ok(&sql);
    let before = check(&read("out"), &read("agg"));
    // The table pyiceberg's catalog created: its location is the catalog's, under the warehouse.
    let meta = read("out");
    assert!(meta["schema"].as_str().unwrap_or_default().contains("id"), "{meta}");
    run_ok(&sql);
    assert_eq!(check(&read("out"), &read("agg")), before, "a restart from the final checkpoints committed again");
}

/// A wrong token, credentials the token endpoint refuses, and a catalog that is not there:
/// each a one-line error naming the catalog.
#[test]
fn rest_catalog_errors_name_the_catalog() {
    let dir = crate::slt::tempdir();
    let server = rest_catalog(&dir);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let cases = [
        (
            options(&server.url, "'token' = 'wrong'"),
            "refused to give its configuration: HTTP 401 NotAuthorizedException".to_string(),
        ),
        (
            options(&server.url, "'credential' = 'weir:nope'"),
            "refused to give a token for 'credential': HTTP 401".to_string(),
        ),
        (
            options(&format!("http://127.0.0.1:{closed}"), "'token' = 'tok'"),
            format!("the rest catalog at http://127.0.0.1:{closed} cannot be reached"),
        ),
    ];
    for (i, (with, want)) in cases.iter().enumerate() {
        let sql = dir.join(format!("bad{i}.sql"));
        std::fs::write(
            &sql,
            format!(
                "CREATE TABLE src (id BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '10');
CREATE TABLE out (id BIGINT) WITH ({with});
INSERT INTO out SELECT id FROM src;
"
            ),
        )
        .expect("sql");
        let err = run_err(&sql);
        assert!(err.contains(want.as_str()), "case {i}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
}

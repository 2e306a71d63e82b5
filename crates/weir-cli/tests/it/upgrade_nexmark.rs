//! Nexmark q5, q7, q15, q17 and q20 in Flink's own text, each stopped with a savepoint and
//! resumed with an output column or an aggregate added. The verdicts are printed (kept where
//! the column comes after the state, rebuilt by replay where the state changed; never
//! refused); the sink then holds what `docs/upgrades.md` says:
//! the old rows up to the cut-over and the new SQL's changes after it, which together are the
//! new SQL's result from scratch on the columns both have, and every row written after the
//! cut-over is one of the new SQL's from scratch, added column included.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use weir::{Chunk, Outcome};

/// Nexmark's tables with Flink's column names, generated; checkpoints and savepoints in `dir`.
fn prelude(dir: &Path) -> String {
    format!(
        "SET 'parallelism' = '2';
         SET 'checkpoint.interval' = '10min';
         SET 'checkpoint.dir' = '{ck}';
         SET 'state.savepoints.dir' = '{sp}';
         SET 'pipeline.name' = 'q';
         CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
           `dateTime` TIMESTAMP(3), extra VARCHAR, WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND)
           WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '100000', 'rate' = '60000');
         CREATE TABLE auction (id BIGINT, itemName VARCHAR, description VARCHAR, initialBid BIGINT, reserve BIGINT,
           `dateTime` TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT, extra VARCHAR,
           WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND)
           WITH ('connector' = 'nexmark', 'table' = 'auction', 'events' = '100000', 'rate' = '60000');",
        ck = dir.join("checkpoints").display(),
        sp = dir.join("savepoints").display(),
    )
}

/// A query's text with its blackhole sink collected, and version 2 of it: `replace` applied
/// (the sink's new last column and what fills it).
fn versions(query: &str, replace: &[(&str, &str)]) -> (String, String) {
    let path = crate::repo().join("crates/weir-cli/tests/data/nexmark").join(format!("{query}.sql"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v1 = text.replace("'connector' = 'blackhole'", "'connector' = 'collect'");
    let mut v2 = v1.clone();
    for (from, to) in replace {
        assert!(v2.contains(from), "{query}: no '{from}'");
        v2 = v2.replacen(from, to, 1);
    }
    (v1, v2)
}

/// Each change the sink got, as (+1 or -1, row), in order.
fn changes(chunks: &Mutex<Vec<Chunk>>) -> Vec<(i64, String)> {
    let taken = std::mem::take(&mut *chunks.lock().expect("chunks"));
    taken.iter().flat_map(crate::upgrades::signed_rows).collect()
}

/// The rows changes leave, with their counts; a row taken back more often than written is
/// kept with its negative count, so that a comparison shows it.
fn apply(into: &mut BTreeMap<String, i64>, changes: impl IntoIterator<Item = (i64, String)>) {
    for (sign, row) in changes {
        *into.entry(row).or_insert(0) += sign;
        into.retain(|_, n| *n != 0);
    }
}

/// A row without its last column (the one version 2 added).
fn common(row: &str) -> String {
    row.rsplit_once('|').map_or(row, |(head, _)| head).to_string()
}

/// Run `sql` after the prelude in `dir` with a collecting engine; its changes.
async fn run(dir: &Path, sql: &str, chunks: &Arc<Mutex<Vec<Chunk>>>, savepoint: Option<&str>) -> Vec<(i64, String)> {
    let engine = crate::identities::engine(chunks);
    engine.execute_all(&prelude(dir)).await.expect("prelude");
    if let Some(path) = savepoint {
        engine.execute_all(&format!("SET 'execution.savepoint.path' = '{path}'")).await.expect("savepoint path");
    }
    let (ddl, insert) = sql.split_at(sql.find("INSERT INTO").expect("an INSERT"));
    engine.execute_all(ddl).await.expect("the sink");
    if savepoint.is_some() {
        let Outcome::Table(batches) =
            engine.execute_all(&format!("EXPLAIN UPGRADE {insert}")).await.expect("explain").remove(0)
        else {
            panic!("a table")
        };
        let lines = crate::rows(&batches);
        println!("{}", lines.join("\n"));
        assert!(!lines.iter().any(|l| l.trim_start().starts_with("refused")), "{lines:?}");
    }
    engine.submit(insert.trim().trim_end_matches(';')).await.expect("submit").wait().await.expect("run");
    changes(chunks)
}

/// Version 1 for a moment, stopped with a savepoint: its changes and the savepoint's path.
async fn stopped(dir: &Path, sql: &str, chunks: &Arc<Mutex<Vec<Chunk>>>) -> (Vec<(i64, String)>, String) {
    let engine = crate::identities::engine(chunks);
    engine.execute_all(&prelude(dir)).await.expect("prelude");
    let (ddl, insert) = sql.split_at(sql.find("INSERT INTO").expect("an INSERT"));
    engine.execute_all(ddl).await.expect("the sink");
    let job = engine.submit(insert.trim().trim_end_matches(';')).await.expect("version 1");
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    assert!(matches!(job.state(), weir::JobState::Running), "version 1 ended before its savepoint");
    let Outcome::Table(batches) = engine.execute_all("STOP JOB 'q' WITH SAVEPOINT").await.expect("stop").remove(0)
    else {
        panic!("a table")
    };
    let path = crate::rows(&batches).remove(0);
    (changes(chunks), path)
}

/// Version 1 stopped with a savepoint, version 2 resumed from it, and version 2 from scratch.
async fn check(query: &str, replace: &[(&str, &str)]) {
    let dir = crate::slt::tempdir();
    let (v1, v2) = versions(query, replace);
    let chunks = Arc::new(Mutex::new(Vec::new()));
    let mut want = BTreeMap::new();
    apply(&mut want, run(&dir.join("reference"), &v2, &chunks, None).await);
    assert!(!want.is_empty(), "{query}: version 2 from scratch wrote nothing");
    let (before, savepoint) = stopped(&dir, &v1, &chunks).await;
    assert!(!before.is_empty(), "{query}: version 1 wrote nothing before its savepoint");
    println!("{query}: {} changes before the savepoint", before.len());
    let after = run(&dir, &v2, &chunks, Some(&savepoint)).await;
    assert!(!after.is_empty(), "{query}: version 2 wrote nothing after the cut-over");
    // The table the sink holds, on the columns both versions have: version 2's from scratch.
    let mut held = BTreeMap::new();
    apply(&mut held, before);
    apply(&mut held, after.iter().map(|(s, r)| (*s, common(r))));
    let mut want_common = BTreeMap::new();
    apply(&mut want_common, want.iter().map(|(r, n)| (*n, common(r))));
    assert_eq!(held.len(), want_common.len(), "{query}: rows held");
    assert!(held == want_common, "{query}: the rows held differ from version 2's from scratch");
    // Rows written after the cut-over and not taken back: version 2's, added column included.
    let mut written = BTreeMap::new();
    apply(&mut written, after);
    for (row, n) in &written {
        if *n > 0 {
            assert!(want.get(row).is_some_and(|w| w >= n), "{query}: {row} is not version 2's");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nexmark_q5_q7_q15_q17_q20_resume_from_a_savepoint_with_a_column_or_aggregate_added() {
    check(
        "q5",
        &[
            ("num  BIGINT\n)", "num  BIGINT,\n  starttime TIMESTAMP(3)\n)"),
            (
                "SELECT AuctionBids.auction, AuctionBids.num",
                "SELECT AuctionBids.auction, AuctionBids.num, AuctionBids.starttime",
            ),
        ],
    )
    .await;
    check(
        "q7",
        &[
            ("extra  VARCHAR\n)", "extra  VARCHAR,\n  channel VARCHAR\n)"),
            ("B.extra\nfrom bid B", "B.extra, B.channel\nfrom bid B"),
        ],
    )
    .await;
    check(
        "q15",
        &[
            ("rank3_auctions BIGINT\n)", "rank3_auctions BIGINT,\n  total_channels BIGINT\n)"),
            (
                "AS rank3_auctions\nFROM bid",
                "AS rank3_auctions,\n     count(distinct channel) AS total_channels\nFROM bid",
            ),
        ],
    )
    .await;
    check(
        "q17",
        &[
            ("sum_price BIGINT\n)", "sum_price BIGINT,\n  bidders BIGINT\n)"),
            (
                "sum(price) AS sum_price\nFROM bid",
                "sum(price) AS sum_price,\n     count(distinct bidder) AS bidders\nFROM bid",
            ),
        ],
    )
    .await;
    check(
        "q20",
        &[
            ("auction_extra  VARCHAR\n)", "auction_extra  VARCHAR,\n    auction_id BIGINT\n)"),
            ("A.extra\nFROM", "A.extra, A.id\nFROM"),
        ],
    )
    .await;
}

//! Window results against an independent path: the same data, written to a CSV file, and the
//! same windows computed by plain DataFusion batch SQL (date_bin and a join with the window
//! offsets; window functions for sessions) on that file. Every row must match, at parallelism 1 and 2.

use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::prelude::{CsvReadOptions, SessionContext};
use weir::Engine;

use crate::{rows, run};

const WEIR: &[(&str, &str)] = &[
    (
        "tumble",
        "SELECT auction, window_start, window_end, COUNT(*), SUM(price), MIN(price), MAX(price) \
         FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) \
         GROUP BY auction, window_start, window_end",
    ),
    (
        "hop",
        "SELECT auction, window_start, window_end, COUNT(*), SUM(price) \
         FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) \
         GROUP BY auction, window_start, window_end",
    ),
    (
        "cumulate",
        "SELECT window_start, window_end, COUNT(*), COUNT(DISTINCT bidder), AVG(price) \
         FROM TABLE(CUMULATE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '5' SECOND, INTERVAL '20' SECOND)) \
         GROUP BY window_start, window_end",
    ),
    (
        "session",
        "SELECT bidder, window_start, window_end, COUNT(*), SUM(price) \
         FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(date_time), INTERVAL '1' SECOND)) \
         GROUP BY bidder, window_start, window_end",
    ),
    (
        "nexmark q5 (hot items)",
        "SELECT AuctionBids.auction, AuctionBids.num, AuctionBids.starttime FROM ( \
           SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime \
           FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) \
           GROUP BY auction, window_start, window_end) AS AuctionBids \
         JOIN ( \
           SELECT max(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime FROM ( \
             SELECT count(*) AS num, window_start AS starttime, window_end AS endtime \
             FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) \
             GROUP BY auction, window_start, window_end) AS CountBids \
           GROUP BY CountBids.starttime, CountBids.endtime) AS MaxBids \
         ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime \
            AND AuctionBids.num >= MaxBids.maxn",
    ),
    (
        "nexmark q7 (highest bid, as a window join)",
        "SELECT B.auction, B.price, B.bidder, B.date_time \
         FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) B \
         JOIN (SELECT MAX(price) AS maxprice, window_start, window_end \
               FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) \
               GROUP BY window_start, window_end) B1 \
         ON B.window_start = B1.window_start AND B.window_end = B1.window_end AND B.price = B1.maxprice",
    ),
    (
        "nexmark q8 (new users who opened auctions)",
        "SELECT P.id, P.name, P.starttime FROM ( \
           SELECT id, name, window_start AS starttime, window_end AS endtime \
           FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) \
           GROUP BY id, name, window_start, window_end) P \
         JOIN ( \
           SELECT seller, window_start AS starttime, window_end AS endtime \
           FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) \
           GROUP BY seller, window_start, window_end) A \
         ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime",
    ),
    (
        "nexmark q11 (user sessions)",
        "SELECT bidder, count(*) AS bid_count, window_start, window_end \
         FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) \
         GROUP BY bidder, window_start, window_end",
    ),
];

/// The same windows in batch SQL: each row joined with the offsets of its windows.
const REFERENCE: &[&str] = &[
    "SELECT auction, date_bin(INTERVAL '10 seconds', date_time, TIMESTAMP '1970-01-01') AS ws, \
            date_bin(INTERVAL '10 seconds', date_time, TIMESTAMP '1970-01-01') + INTERVAL '10 seconds' AS we, \
            COUNT(*), SUM(price), MIN(price), MAX(price) \
     FROM bid GROUP BY 1, 2, 3",
    "SELECT auction, ws, ws + INTERVAL '10 seconds' AS we, COUNT(*), SUM(price) FROM ( \
       SELECT auction, price, date_bin(INTERVAL '2 seconds', date_time, TIMESTAMP '1970-01-01') - d AS ws, date_time \
       FROM bid CROSS JOIN (VALUES (INTERVAL '0 seconds'), (INTERVAL '2 seconds'), (INTERVAL '4 seconds'), \
                                   (INTERVAL '6 seconds'), (INTERVAL '8 seconds')) AS o(d)) \
     GROUP BY auction, ws, we",
    "SELECT ws, we, COUNT(*), COUNT(DISTINCT bidder), AVG(price) FROM ( \
       SELECT bidder, price, date_bin(INTERVAL '20 seconds', date_time, TIMESTAMP '1970-01-01') AS ws, \
              date_bin(INTERVAL '20 seconds', date_time, TIMESTAMP '1970-01-01') + d AS we, date_time \
       FROM bid CROSS JOIN (VALUES (INTERVAL '5 seconds'), (INTERVAL '10 seconds'), (INTERVAL '15 seconds'), \
                                   (INTERVAL '20 seconds')) AS o(d)) \
     WHERE we > date_time GROUP BY ws, we",
    // Sessions: per bidder, a new session starts at a time more than the gap after the
    // previous one (numbered per distinct time, so that equal times never split).
    "SELECT b.bidder, MIN(b.date_time) AS ws, MAX(b.date_time) + INTERVAL '1 second' AS we, COUNT(*), SUM(price) \
     FROM bid b JOIN ( \
       SELECT bidder, t, SUM(new) OVER (PARTITION BY bidder ORDER BY t ROWS UNBOUNDED PRECEDING) AS sid FROM ( \
         SELECT bidder, t, CASE WHEN arrow_cast(t, 'Int64') - arrow_cast(LAG(t) OVER (PARTITION BY bidder ORDER BY t), 'Int64') <= 1000 \
                                THEN 0 ELSE 1 END AS new \
         FROM (SELECT DISTINCT bidder, date_time AS t FROM bid))) s \
     ON b.bidder = s.bidder AND b.date_time = s.t \
     GROUP BY b.bidder, s.sid",
    "WITH c AS ( \
       SELECT auction, ws, COUNT(*) AS num FROM ( \
         SELECT auction, date_bin(INTERVAL '2 seconds', date_time, TIMESTAMP '1970-01-01') - d AS ws \
         FROM bid CROSS JOIN (VALUES (INTERVAL '0 seconds'), (INTERVAL '2 seconds'), (INTERVAL '4 seconds'), \
                                     (INTERVAL '6 seconds'), (INTERVAL '8 seconds')) AS o(d)) \
       GROUP BY auction, ws) \
     SELECT c.auction, c.num, c.ws FROM c JOIN (SELECT ws, MAX(num) AS maxn FROM c GROUP BY ws) m \
       ON c.ws = m.ws AND c.num >= m.maxn",
    "SELECT b.auction, b.price, b.bidder, b.date_time FROM bid b JOIN ( \
       SELECT date_bin(INTERVAL '10 seconds', date_time, TIMESTAMP '1970-01-01') AS ws, MAX(price) AS maxprice \
       FROM bid GROUP BY 1) m \
     ON date_bin(INTERVAL '10 seconds', b.date_time, TIMESTAMP '1970-01-01') = m.ws AND b.price = m.maxprice",
    "SELECT DISTINCT p.id, p.name, date_bin(INTERVAL '10 seconds', p.date_time, TIMESTAMP '1970-01-01') \
     FROM person p JOIN auction a ON p.id = a.seller \
       AND date_bin(INTERVAL '10 seconds', p.date_time, TIMESTAMP '1970-01-01') \
         = date_bin(INTERVAL '10 seconds', a.date_time, TIMESTAMP '1970-01-01')",
    "SELECT b.bidder, COUNT(*), MIN(b.date_time) AS ws, MAX(b.date_time) + INTERVAL '10 seconds' AS we \
     FROM bid b JOIN ( \
       SELECT bidder, t, SUM(new) OVER (PARTITION BY bidder ORDER BY t ROWS UNBOUNDED PRECEDING) AS sid FROM ( \
         SELECT bidder, t, CASE WHEN arrow_cast(t, 'Int64') - arrow_cast(LAG(t) OVER (PARTITION BY bidder ORDER BY t), 'Int64') <= 10000 \
                                THEN 0 ELSE 1 END AS new \
         FROM (SELECT DISTINCT bidder, date_time AS t FROM bid))) s \
     ON b.bidder = s.bidder AND b.date_time = s.t \
     GROUP BY b.bidder, s.sid",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_match_batch_sql_on_the_same_file() {
    let dir = crate::slt::tempdir();
    let engine = Engine::new().with_base_dir(&dir);
    // 300,000 Nexmark events (276,000 bids, 300 s of event time) written to one CSV file.
    run(
        &engine,
        "SET 'parallelism' = '1'; SET 'table.dml-sync' = 'true';
        CREATE TABLE gen (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3))
          WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '300000');
        CREATE TABLE out (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3))
          WITH ('connector' = 'filesystem', 'path' = 'bids', 'format' = 'csv');
        INSERT INTO out SELECT * FROM gen;
        CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3),
          WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
          WITH ('connector' = 'filesystem', 'path' = 'bids', 'format' = 'csv');
        CREATE TABLE gen_person (id BIGINT, name STRING, date_time TIMESTAMP(3))
          WITH ('connector' = 'nexmark', 'table' = 'person', 'events' = '300000');
        CREATE TABLE person (id BIGINT, name STRING, date_time TIMESTAMP(3),
          WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
          WITH ('connector' = 'filesystem', 'path' = 'persons', 'format' = 'csv');
        INSERT INTO person SELECT * FROM gen_person;
        CREATE TABLE gen_auction (id BIGINT, seller BIGINT, date_time TIMESTAMP(3))
          WITH ('connector' = 'nexmark', 'table' = 'auction', 'events' = '300000');
        CREATE TABLE auction (id BIGINT, seller BIGINT, date_time TIMESTAMP(3),
          WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
          WITH ('connector' = 'filesystem', 'path' = 'auctions', 'format' = 'csv');
        INSERT INTO auction SELECT * FROM gen_auction;",
    )
    .await;

    let ctx = SessionContext::new();
    let schema = datafusion::arrow::datatypes::Schema::new(vec![
        datafusion::arrow::datatypes::Field::new("auction", datafusion::arrow::datatypes::DataType::Int64, true),
        datafusion::arrow::datatypes::Field::new("bidder", datafusion::arrow::datatypes::DataType::Int64, true),
        datafusion::arrow::datatypes::Field::new("price", datafusion::arrow::datatypes::DataType::Int64, true),
        datafusion::arrow::datatypes::Field::new(
            "date_time",
            datafusion::arrow::datatypes::DataType::Timestamp(
                datafusion::arrow::datatypes::TimeUnit::Millisecond,
                None,
            ),
            true,
        ),
    ]);
    let options = CsvReadOptions::new().has_header(false).schema(&schema).file_extension("csv");
    ctx.register_csv("bid", dir.join("bids").to_string_lossy().as_ref(), options).await.expect("register csv");
    let table = |name: &str, columns: &[(&str, DataType)]| {
        let fields: Vec<Field> = columns.iter().map(|(n, t)| Field::new(*n, t.clone(), true)).collect();
        (name.to_string(), Schema::new(fields))
    };
    let ms = DataType::Timestamp(TimeUnit::Millisecond, None);
    for (name, schema) in [
        table("person", &[("id", DataType::Int64), ("name", DataType::Utf8), ("date_time", ms.clone())]),
        table("auction", &[("id", DataType::Int64), ("seller", DataType::Int64), ("date_time", ms.clone())]),
    ] {
        let options = CsvReadOptions::new().has_header(false).schema(&schema).file_extension("csv");
        let path = dir.join(format!("{name}s"));
        ctx.register_csv(&name, path.to_string_lossy().as_ref(), options).await.expect("register csv");
    }

    for ((name, weir_sql), reference) in WEIR.iter().zip(REFERENCE) {
        let want = rows(&ctx.sql(reference).await.expect("reference plan").collect().await.expect("reference run"));
        assert!(want.len() > 10, "{name}: reference has only {} rows", want.len());
        for (parallelism, backend) in [(1, "memory"), (2, "memory"), (1, "rocksdb"), (2, "rocksdb")] {
            run(&engine, &format!("SET 'parallelism' = '{parallelism}'; SET 'state.backend' = '{backend}'")).await;
            let got = engine.query(weir_sql).await.unwrap_or_else(|e| panic!("{name}: {e}"));
            let got = rows(&got.collect().await.unwrap_or_else(|e| panic!("{name}: {e}")));
            assert_eq!(got.len(), want.len(), "{name} at parallelism {parallelism}, {backend} state: row count");
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g, w, "{name} at parallelism {parallelism}, {backend} state");
            }
        }
    }
}

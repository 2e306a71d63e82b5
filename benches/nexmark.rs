//! Nexmark on Weir: events/s, events per CPU-second and peak memory per query.
//!
//!     cargo bench -p weir-cli --bench nexmark -- --source csv:/tmp/nexmark/bids_5m.csv \
//!         --queries q0,q1,q2 --parallelism 1 --repeat 3 --out /tmp/weir-nexmark.jsonl
//!
//! `--checkpoint-interval 1s` runs the jobs with checkpoints (in a temporary directory);
//! `--state-backend rocksdb` keeps window state in RocksDB.
//!
//! Sources: `csv:PATH`, `json:PATH`, `parquet:PATH`, `generator:BIDS` (the built-in Nexmark
//! source, producing BIDS bids) and `parse:PATH` (arrow-csv alone parsing the file, one
//! thread: the yardstick for CSV). Each (source, query) runs in a fresh child process so that
//! its CPU time (user + sys) and peak RSS are its own; the best of `--repeat` runs is reported.
//! See benches/README.md.

use std::io::Write;
use std::process::{Command, ExitCode};
use std::time::Instant;

/// Flink's Nexmark SQL (blackhole sink), as in ../shared/flink-anchor/sql and nexmark-flink.
fn query(name: &str) -> Option<(&'static str, &'static str)> {
    Some(match name {
        "q0" => (
            "auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3), extra STRING",
            "SELECT auction, bidder, price, date_time, extra FROM bid",
        ),
        "q1" => (
            "auction BIGINT, bidder BIGINT, price DECIMAL(24, 3), date_time TIMESTAMP(3), extra STRING",
            "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid",
        ),
        "q2" => ("auction BIGINT, price BIGINT", "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0"),
        // q14 without its UDF (count_char).
        "q14" => (
            "auction BIGINT, bidder BIGINT, price DECIMAL(24, 3), bidTimeType STRING, date_time TIMESTAMP(3), extra STRING",
            "SELECT auction, bidder, 0.908 * price AS price, \
               CASE WHEN HOUR(date_time) >= 8 AND HOUR(date_time) <= 18 THEN 'dayTime' \
                    WHEN HOUR(date_time) <= 6 OR HOUR(date_time) >= 20 THEN 'nightTime' \
                    ELSE 'otherTime' END AS bidTimeType, \
               date_time, extra \
             FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000",
        ),
        "q21" => (
            "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, channel_id STRING",
            "SELECT auction, bidder, price, channel, \
               CASE WHEN lower(channel) = 'apple' THEN '0' \
                    WHEN lower(channel) = 'google' THEN '1' \
                    WHEN lower(channel) = 'facebook' THEN '2' \
                    WHEN lower(channel) = 'baidu' THEN '3' \
                    ELSE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) END AS channel_id \
             FROM bid \
             WHERE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) IS NOT NULL \
                OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')",
        ),
        "q22" => (
            "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, dir1 STRING, dir2 STRING, dir3 STRING",
            "SELECT auction, bidder, price, channel, \
               SPLIT_INDEX(url, '/', 3) AS dir1, SPLIT_INDEX(url, '/', 4) AS dir2, SPLIT_INDEX(url, '/', 5) AS dir3 \
             FROM bid",
        ),
        "tumble" => (
            "auction BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), cnt BIGINT, sum_price BIGINT",
            "SELECT auction, window_start, window_end, COUNT(*) AS cnt, SUM(price) AS sum_price \
             FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) \
             GROUP BY auction, window_start, window_end",
        ),
        "q5_hop" => (
            "auction BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), num BIGINT",
            "SELECT auction, window_start, window_end, COUNT(*) AS num \
             FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) \
             GROUP BY auction, window_start, window_end",
        ),
        "q5" => (
            "auction BIGINT, num BIGINT, starttime TIMESTAMP(3), endtime TIMESTAMP(3)",
            "SELECT AuctionBids.auction, AuctionBids.num, AuctionBids.starttime, AuctionBids.endtime \
             FROM ( \
               SELECT auction, COUNT(*) AS num, window_start AS starttime, window_end AS endtime \
               FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) \
               GROUP BY auction, window_start, window_end \
             ) AS AuctionBids \
             JOIN ( \
               SELECT MAX(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime \
               FROM ( \
                 SELECT COUNT(*) AS num, window_start AS starttime, window_end AS endtime \
                 FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) \
                 GROUP BY auction, window_start, window_end \
               ) AS CountBids \
               GROUP BY CountBids.starttime, CountBids.endtime \
             ) AS MaxBids \
             ON AuctionBids.starttime = MaxBids.starttime \
              AND AuctionBids.endtime = MaxBids.endtime \
              AND AuctionBids.num >= MaxBids.maxn",
        ),
        // Nexmark q12 (Flink's text): processing-time windows over view `B`'s `PROCTIME()`.
        "q12" => (
            "bidder BIGINT, bid_count BIGINT, starttime TIMESTAMP(3), endtime TIMESTAMP(3)",
            "SELECT bidder, count(*) as bid_count, window_start AS starttime, window_end AS endtime \
             FROM TABLE(TUMBLE(TABLE B, DESCRIPTOR(p_time), INTERVAL '10' SECOND)) \
             GROUP BY bidder, window_start, window_end",
        ),
        // Nexmark q17 (Flink's text, with this table's column names): an unbounded group
        // aggregate, updating.
        "q17" => (
            "auction BIGINT, `day` VARCHAR, total_bids BIGINT, rank1_bids BIGINT, rank2_bids BIGINT, \
             rank3_bids BIGINT, min_price BIGINT, max_price BIGINT, avg_price BIGINT, sum_price BIGINT",
            "SELECT auction, DATE_FORMAT(date_time, 'yyyy-MM-dd') as `day`, count(*) AS total_bids, \
               count(*) filter (where price < 10000) AS rank1_bids, \
               count(*) filter (where price >= 10000 and price < 1000000) AS rank2_bids, \
               count(*) filter (where price >= 1000000) AS rank3_bids, \
               min(price) AS min_price, max(price) AS max_price, avg(price) AS avg_price, sum(price) AS sum_price \
             FROM bid GROUP BY auction, DATE_FORMAT(date_time, 'yyyy-MM-dd')",
        ),
        // OVER aggregates and an anti join (`benches/compare_flink_over.sh`): a moving average
        // per auction over its last 10 bids, each bidder's previous bid price, and the bids of
        // auctions that never had a bid over 9,000,000.
        "over_avg" => (
            "auction BIGINT, price BIGINT, avg_price DOUBLE",
            "SELECT auction, price, AVG(price) OVER (PARTITION BY auction ORDER BY date_time \
               ROWS BETWEEN 9 PRECEDING AND CURRENT ROW) AS avg_price FROM bid",
        ),
        "over_lag" => (
            "bidder BIGINT, price BIGINT, prev_price BIGINT",
            "SELECT bidder, price, LAG(price) OVER (PARTITION BY bidder ORDER BY date_time) AS prev_price FROM bid",
        ),
        "anti" => (
            "auction BIGINT, bidder BIGINT, price BIGINT",
            "SELECT auction, bidder, price FROM bid b \
             WHERE NOT EXISTS (SELECT 1 FROM bid b2 WHERE b2.auction = b.auction AND b2.price > 9000000)",
        ),
        // MATCH_RECOGNIZE: three rising prices in a row per auction within 10 seconds.
        "match" => (
            "auction BIGINT, first_price BIGINT, last_price BIGINT, last_time TIMESTAMP(3)",
            "SELECT * FROM bid MATCH_RECOGNIZE (PARTITION BY auction ORDER BY date_time \
               MEASURES A.price AS first_price, C.price AS last_price, MATCH_ROWTIME() AS last_time \
               AFTER MATCH SKIP PAST LAST ROW PATTERN (A B C) WITHIN INTERVAL '10' SECOND \
               DEFINE B AS B.price > A.price, C AS C.price > B.price) AS T",
        ),
        // Nexmark q18 (deduplication: each bidder's last bid per auction), q19 (Top-N: ten
        // bids per auction by price) and q20 (a regular join with the auctions).
        "q18" => (
            "auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, date_time TIMESTAMP(3), extra VARCHAR",
            "SELECT auction, bidder, price, channel, url, date_time, extra \
             FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC) AS rank_number \
                   FROM bid) \
             WHERE rank_number <= 1",
        ),
        "q19" => (
            "auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, date_time TIMESTAMP(3), \
             extra VARCHAR, rank_number BIGINT",
            "SELECT * FROM \
             (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number FROM bid) \
             WHERE rank_number <= 10",
        ),
        "q20" => (
            "auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, bid_dateTime TIMESTAMP(3), \
             bid_extra VARCHAR, itemName VARCHAR, description VARCHAR, initialBid BIGINT, reserve BIGINT, \
             auction_dateTime TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT, auction_extra VARCHAR",
            "SELECT auction, bidder, price, channel, url, B.date_time, B.extra, \
               item_name, description, initial_bid, reserve, A.date_time, expires, seller, category, A.extra \
             FROM bid AS B INNER JOIN auction AS A on B.auction = A.id \
             WHERE A.category = 10",
        ),
        // A group per bid (each has its own event time): state as large as the input.
        "keys" => (
            "date_time TIMESTAMP(3), n BIGINT, total BIGINT",
            "SELECT date_time, COUNT(*) AS n, SUM(price) AS total FROM bid GROUP BY date_time",
        ),
        _ => return None,
    })
}

const AUCTION_COLUMNS: &str = "id BIGINT, item_name STRING, description STRING, initial_bid BIGINT, reserve BIGINT, \
    date_time TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT, extra STRING, \
    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND";

/// The auctions of the same events as a bid source: a file `auctions_N` beside `bids_N`, or
/// the generator's.
fn auction_table(source: &str) -> Result<String, String> {
    let (kind, arg) = source.split_once(':').ok_or(format!("source '{source}' is not KIND:ARG"))?;
    Ok(match kind {
        "csv" | "json" | "parquet" => {
            let path = std::path::Path::new(arg);
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().replacen("bids_", "auctions_", 1);
            format!(
                "CREATE TABLE auction ({AUCTION_COLUMNS}) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = '{kind}')",
                path.with_file_name(name).display()
            )
        }
        "generator" => {
            let bids: u64 = arg.parse().map_err(|_| format!("'{arg}' is not a number of bids"))?;
            let events = (bids * 50).div_ceil(46);
            format!("CREATE TABLE auction ({AUCTION_COLUMNS}) WITH ('connector' = 'nexmark', 'table' = 'auction', 'events' = '{events}')")
        }
        other => return Err(format!("unknown source kind '{other}'")),
    })
}

const BID_COLUMNS: &str = "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, \
    date_time TIMESTAMP(3), extra STRING, WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND";

fn bid_table(source: &str) -> Result<String, String> {
    let (kind, arg) = source.split_once(':').ok_or(format!("source '{source}' is not KIND:ARG"))?;
    Ok(match kind {
        "csv" | "json" | "parquet" => format!(
            "CREATE TABLE bid ({BID_COLUMNS}) WITH ('connector' = 'filesystem', 'path' = '{arg}', 'format' = '{kind}')"
        ),
        "generator" => {
            let bids: u64 = arg.parse().map_err(|_| format!("'{arg}' is not a number of bids"))?;
            // 46 bids in every 50 events.
            let events = (bids * 50).div_ceil(46);
            format!("CREATE TABLE bid ({BID_COLUMNS}) WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '{events}')")
        }
        other => return Err(format!("unknown source kind '{other}'")),
    })
}

struct Usage {
    cpu_seconds: f64,
    peak_rss_mb: f64,
}

fn usage() -> Usage {
    // SAFETY: getrusage only writes into the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Usage { cpu_seconds: secs(ru.ru_utime) + secs(ru.ru_stime), peak_rss_mb: ru.ru_maxrss as f64 / 1024.0 }
}

/// One measured run, in this process.
async fn child(
    source: &str,
    query_name: &str,
    parallelism: usize,
    checkpoint: Option<&str>,
    backend: &str,
) -> Result<String, String> {
    let before = usage();
    let started = Instant::now();
    let (mut checkpoints, mut checkpoint_bytes, mut checkpoint_ms, mut rows_out) = (0usize, 0u64, 0u64, 0u64);
    let mut checkpoint_dir = None;
    let events = if let Some(path) = source.strip_prefix("parse:") {
        parse_only(path)?
    } else {
        // `a+b`: the queries as one statement set, each into its own blackhole table.
        let parts: Vec<&str> = query_name.split('+').collect();
        let mut queries = Vec::with_capacity(parts.len());
        for part in &parts {
            queries.push(query(part).ok_or(format!("unknown query '{part}'"))?);
        }
        let select = queries.iter().map(|(_, s)| *s).collect::<Vec<_>>().join(" ");
        let engine = weir::Engine::new();
        let mut setup = format!("{}; SET 'parallelism' = '{parallelism}'", bid_table(source)?);
        for (i, (sink_columns, _)) in queries.iter().enumerate() {
            setup.push_str(&format!("; CREATE TABLE sink{i} ({sink_columns}) WITH ('connector' = 'blackhole')"));
        }
        if select.contains("TABLE B,") {
            setup.push_str("; CREATE VIEW B AS SELECT *, PROCTIME() AS p_time FROM bid");
        }
        if select.contains(" auction AS A") {
            setup.push_str(&format!("; {}", auction_table(source)?));
        }
        setup.push_str(&format!("; SET 'state.backend' = '{backend}'"));
        if let Some(interval) = checkpoint {
            let dir = std::env::temp_dir().join(format!("weir-bench-checkpoints-{}", std::process::id()));
            // A fresh directory: an earlier run's (a process id used again) would be restored.
            let _ = std::fs::remove_dir_all(&dir);
            checkpoint_dir = Some(dir.clone());
            setup.push_str(&format!(
                "; SET 'checkpoint.interval' = '{interval}'; SET 'checkpoint.dir' = '{}'",
                dir.display()
            ));
        }
        engine.execute_all(&setup).await.map_err(|e| e.to_string())?;
        let inserts: Vec<String> =
            queries.iter().enumerate().map(|(i, (_, select))| format!("INSERT INTO sink{i} {select}")).collect();
        let job = match inserts.as_slice() {
            [one] => engine.submit(one).await,
            many => match engine.execute_all(&format!("EXECUTE STATEMENT SET BEGIN {}; END", many.join("; "))).await {
                Ok(mut outcomes) => match outcomes.pop() {
                    Some(weir::Outcome::Job(job)) => Ok(job),
                    _ => return Err("the statement set started no job".into()),
                },
                Err(e) => Err(e),
            },
        }
        .map_err(|e| e.to_string())?;
        job.wait().await.map_err(|e| e.to_string())?;
        let status = job.status();
        checkpoints = status.checkpoints.len();
        // Events are the bids of the input: a query that reads the table twice (q5) still
        // counts each bid once (as Flink, which shares the scan). A statement set's INSERTs
        // share theirs.
        let scans = status.operators.iter().filter(|o| o.name == "Source: bid [0]").count().max(1) as u64;
        checkpoint_bytes = status.checkpoints.iter().map(|c| c.bytes_written).sum::<u64>() / checkpoints.max(1) as u64;
        checkpoint_ms = status.checkpoints.iter().map(|c| c.duration_ms).sum::<u64>() / checkpoints.max(1) as u64;
        rows_out = status.rows_written();
        // Only the bids count (q20 reads the auctions too, as Flink's figures count bids).
        let bids: u64 =
            status.operators.iter().filter(|o| o.name.starts_with("Source: bid ")).map(|o| o.rows_out).sum();
        bids / scans
    };
    let wall = started.elapsed().as_secs_f64();
    let after = usage();
    if let Some(dir) = checkpoint_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    let cpu = after.cpu_seconds - before.cpu_seconds;
    Ok(format!(
        "{{\"engine\":\"weir\",\"query\":\"{query_name}\",\"source\":\"{source}\",\"parallelism\":{parallelism},\
\"events\":{events},\"wall_s\":{wall:.3},\"cpu_s\":{cpu:.3},\"events_per_s\":{:.0},\"events_per_cpu_s\":{:.0},\"peak_rss_mb\":{:.1},\
\"rows_out\":{rows_out},\"state_backend\":\"{backend}\",\"checkpoint_interval\":\"{}\",\"checkpoints\":{checkpoints},\"checkpoint_avg_bytes\":{checkpoint_bytes},\"checkpoint_avg_ms\":{checkpoint_ms}}}",
        events as f64 / wall,
        events as f64 / cpu,
        after.peak_rss_mb,
        checkpoint.unwrap_or("none")
    ))
}

/// arrow-csv alone: parse every record into the bid schema, one thread, nothing else.
fn parse_only(path: &str) -> Result<u64, String> {
    use weir::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    let schema = std::sync::Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, true),
        Field::new("bidder", DataType::Int64, true),
        Field::new("price", DataType::Int64, true),
        Field::new("channel", DataType::Utf8, true),
        Field::new("url", DataType::Utf8, true),
        Field::new("date_time", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("extra", DataType::Utf8, true),
    ]));
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let reader = weir::arrow::csv::ReaderBuilder::new(schema)
        .with_batch_size(8192)
        .build(std::io::BufReader::with_capacity(1 << 20, file))
        .map_err(|e| e.to_string())?;
    let mut rows = 0u64;
    for batch in reader {
        rows += batch.map_err(|e| e.to_string())?.num_rows() as u64;
    }
    Ok(rows)
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned()
}

fn field(line: &str, key: &str) -> f64 {
    line.split(&format!("\"{key}\":"))
        .nth(1)
        .and_then(|rest| rest.split([',', '}']).next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let parallelism: usize = arg(&args, "--parallelism").and_then(|p| p.parse().ok()).unwrap_or(1);
    if args.iter().any(|a| a == "--child") {
        let (Some(source), Some(q)) = (arg(&args, "--source"), arg(&args, "--query")) else {
            eprintln!("--child needs --source and --query");
            return ExitCode::FAILURE;
        };
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
        let checkpoint = arg(&args, "--checkpoint-interval");
        let backend = arg(&args, "--state-backend").unwrap_or_else(|| "memory".into());
        return match runtime.block_on(child(&source, &q, parallelism, checkpoint.as_deref(), &backend)) {
            Ok(line) => {
                println!("{line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if args.iter().any(|a| a == "--bench") && arg(&args, "--source").is_none() {
        // `cargo bench` with no arguments of ours: say how to use it rather than run for minutes.
        eprintln!("usage: cargo bench -p weir-cli --bench nexmark -- --source KIND:ARG[,…] [--queries q0,q1,…] [--parallelism N] [--repeat N] [--out FILE]");
        return ExitCode::SUCCESS;
    }
    let sources = arg(&args, "--source").unwrap_or_else(|| "generator:1000000".into());
    let queries = arg(&args, "--queries").unwrap_or_else(|| "q0,q1,q2,q14,q21,q22".into());
    let repeat: usize = arg(&args, "--repeat").and_then(|r| r.parse().ok()).unwrap_or(1);
    let out = arg(&args, "--out");
    let Ok(exe) = std::env::current_exe() else { return ExitCode::FAILURE };
    println!(
        "{:<6} {:<40} {:>3} {:>10} {:>12} {:>14} {:>9}",
        "query", "source", "p", "events", "events/s", "events/CPU-s", "peak MB"
    );
    for source in sources.split(',') {
        let qs: Vec<&str> = if source.starts_with("parse:") { vec!["parse"] } else { queries.split(',').collect() };
        for q in qs {
            let mut best: Option<String> = None;
            for _ in 0..repeat {
                let mut cmd = Command::new(&exe);
                cmd.args(["--child", "--source", source, "--query", q, "--parallelism", &parallelism.to_string()]);
                if let Some(interval) = arg(&args, "--checkpoint-interval") {
                    cmd.args(["--checkpoint-interval", &interval]);
                }
                if let Some(backend) = arg(&args, "--state-backend") {
                    cmd.args(["--state-backend", &backend]);
                }
                let output = cmd.output();
                let output = match output {
                    Ok(o) if o.status.success() => o,
                    Ok(o) => {
                        eprintln!("{q} on {source} failed: {}", String::from_utf8_lossy(&o.stderr));
                        return ExitCode::FAILURE;
                    }
                    Err(e) => {
                        eprintln!("cannot run child: {e}");
                        return ExitCode::FAILURE;
                    }
                };
                let line = String::from_utf8_lossy(&output.stdout).trim().to_string();
                if best.as_ref().is_none_or(|b| field(&line, "wall_s") < field(b, "wall_s")) {
                    best = Some(line);
                }
            }
            let Some(line) = best else { continue };
            println!(
                "{:<6} {:<40} {:>3} {:>10} {:>12.0} {:>14.0} {:>9.1}",
                q,
                source,
                parallelism,
                field(&line, "events"),
                field(&line, "events_per_s"),
                field(&line, "events_per_cpu_s"),
                field(&line, "peak_rss_mb")
            );
            if let Some(path) = &out {
                let written = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .and_then(|mut f| writeln!(f, "{line}"));
                if let Err(e) = written {
                    eprintln!("cannot write {path}: {e}");
                }
            }
        }
    }
    ExitCode::SUCCESS
}

//! The web endpoint: `/metrics` read by Prometheus' own Python parser and checked against
//! what the job did (rows, checkpoints, Kafka lag), backpressure and lag that are true, the
//! dashboard rendered by a real browser (Debian's chromium, headless), and bad requests.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::datatypes::DataType;
use datafusion::logical_expr::{create_udf, ColumnarValue, Volatility};
use weir::{Engine, JobHandle, Outcome};

use crate::kafka::Broker;
use crate::repo;
use crate::slt::tempdir;

type Sample = (String, BTreeMap<String, String>, f64);

/// Every sample of `/metrics`, as the independent parser read it.
fn scrape(addr: SocketAddr) -> Vec<Sample> {
    let out = std::process::Command::new(repo().join("scripts/parse-metrics.sh"))
        .arg(format!("http://{addr}/metrics"))
        .output()
        .expect("run scripts/parse-metrics.sh");
    assert!(out.status.success(), "the parser refused /metrics: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str::<(String, BTreeMap<String, String>, f64)>(line).expect("a sample"))
        .collect()
}

/// The sum of `name`'s samples whose labels include `having`; `None` if there is none.
fn total(samples: &[Sample], name: &str, having: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<f64> = samples
        .iter()
        .filter(|(n, labels, _)| {
            n == name && having.iter().all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, v)| *v)
        .collect();
    (!matching.is_empty()).then(|| matching.iter().sum())
}

/// A plain HTTP/1.1 GET: status and body.
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let status = response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("a status");
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

fn json(addr: SocketAddr, path: &str) -> serde_json::Value {
    let (status, body) = get(addr, path);
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).expect("JSON")
}

/// Poll `check` until it gives a value; fails the test after `within`.
async fn until<T>(what: &str, within: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn start(engine: &Engine, sql: &str) -> JobHandle {
    let mut jobs: Vec<JobHandle> = engine
        .execute_all(sql)
        .await
        .expect("statements")
        .into_iter()
        .filter_map(|o| match o {
            Outcome::Job(j) => Some(j),
            _ => None,
        })
        .collect();
    jobs.pop().expect("a job")
}

/// The highest checkpoint id with a manifest in a job's checkpoint directory.
fn last_checkpoint_on_disk(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|c| c.path().join("manifest.json").exists())
                .filter_map(|c| c.file_name().to_str()?.strip_prefix("chk-")?.parse().ok())
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

/// A Kafka-to-Kafka job, exactly once: the parsed `/metrics` give the rows the sink wrote
/// (as a `read_committed` consumer sees them), the rows read, every checkpoint taken (as on
/// disk), the sink's commits, and a lag of 0 per partition once the job has caught up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scraped_metrics_match_what_the_job_did() {
    let dir = tempdir();
    let broker = Broker::start(&dir);
    broker.create_topic("bids", 2).await;
    broker.create_topic("out", 1).await;
    let records: Vec<(&str, i32, String, Option<i64>)> =
        (0..300).map(|i| ("bids", i % 2, format!(r#"{{"id":{i},"price":{}}}"#, i * 10), None)).collect();
    broker.produce(&records);
    let engine = Engine::new();
    let addr = engine.serve_http("127.0.0.1:0").await.expect("serve");
    let ck = dir.join("ck");
    let job = start(
        &engine,
        &format!(
            "SET 'parallelism' = '1';
             SET 'checkpoint.interval' = '200ms';
             SET 'checkpoint.dir' = '{ck}';
             CREATE TABLE bids (id BIGINT, price BIGINT) WITH ('connector' = 'kafka', 'topic' = 'bids',
               'properties.bootstrap.servers' = '{b}', 'scan.startup.mode' = 'earliest-offset', 'format' = 'json');
             CREATE TABLE out (id BIGINT, price BIGINT) WITH ('connector' = 'kafka', 'topic' = 'out',
               'properties.bootstrap.servers' = '{b}', 'format' = 'json',
               'sink.delivery-guarantee' = 'exactly-once', 'sink.transactional-id-prefix' = 'web-metrics');
             INSERT INTO out SELECT id, price FROM bids WHERE price >= 1000;",
            ck = ck.display(),
            b = broker.bootstrap
        ),
    )
    .await;
    // 200 rows pass the filter; they are visible once a checkpoint has committed them.
    until("the sink's rows", Duration::from_secs(60), || (broker.read_committed("out").len() == 200).then_some(()))
        .await;
    // Caught up: each of the two partitions' lag is 0 (sampled about once a second).
    until("a lag of 0", Duration::from_secs(30), || {
        let s = scrape(addr);
        let lags: Vec<f64> = s.iter().filter(|(n, _, _)| n == "weir_kafka_partition_lag").map(|(_, _, v)| *v).collect();
        (lags.len() == 2 && lags.iter().all(|l| *l == 0.0)).then_some(())
    })
    .await;
    let running = scrape(addr);
    assert_eq!(total(&running, "weir_job_running", &[("job_name", "insert-into-out")]), Some(1.0));
    assert_eq!(total(&running, "weir_operator_pendingRecords", &[]), Some(0.0));
    let offsets = total(&running, "weir_kafka_partition_currentOffset", &[("topic", "bids")]);
    assert_eq!(offsets, Some(300.0), "each partition's position is its end (150 + 150)");

    job.stop_with_checkpoint();
    job.wait().await.expect("stopped");
    let s = scrape(addr);
    let sink = [("operator_name", "Sink: out")];
    let source = [("operator_name", "Source: bids")];
    assert_eq!(total(&s, "weir_operator_numRecordsIn", &sink), Some(200.0));
    assert_eq!(broker.read_committed("out").len(), 200);
    assert_eq!(total(&s, "weir_operator_numRecordsOut", &source), Some(300.0));
    assert_eq!(total(&s, "weir_job_running", &[]), Some(0.0));
    // Checkpoints are numbered from 1 in a fresh directory: none failed, every one counted.
    let on_disk = last_checkpoint_on_disk(&ck.join("insert-into-out"));
    assert!(on_disk >= 2, "checkpoints were taken ({on_disk})");
    assert_eq!(total(&s, "weir_job_numberOfCompletedCheckpoints", &[]), Some(on_disk as f64));
    assert_eq!(total(&s, "weir_job_lastCompletedCheckpointId", &[]), Some(on_disk as f64));
    assert_eq!(total(&s, "weir_job_numberOfFailedCheckpoints", &[]), Some(0.0));
    assert_eq!(total(&s, "weir_operator_numCommits", &sink), Some(on_disk as f64), "one commit per checkpoint");
    assert_eq!(total(&s, "weir_job_numRestarts", &[]), Some(0.0));
    // The REST API says the same.
    let cps = json(addr, "/jobs/1/checkpoints");
    assert_eq!(cps["counts"]["completed"], on_disk);
    assert_eq!(cps["latest"]["completed"]["id"], on_disk);
    let plan = json(addr, "/jobs/1");
    let names: Vec<&str> =
        plan["vertices"].as_array().expect("vertices").iter().filter_map(|v| v["name"].as_str()).collect();
    let chain = "Source: bids -> Filter: bids.price >= 1000 -> Project: id, price -> Select: id, price";
    assert_eq!(names, [chain, "Sink: out"], "{plan}");
    assert_eq!(plan["vertices"][0]["metrics"]["read-records"], 300, "a source vertex's rows in are those it read");
    assert_eq!(plan["vertices"][0]["metrics"]["write-records"], 200);
    assert_eq!(plan["plan"]["nodes"][1]["inputs"][0]["ship_strategy"], "FORWARD");
}

/// A source fed faster than it reads (at most 20 records a second) shows a lag that grows
/// by what was added.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_fed_faster_than_it_reads_shows_growing_lag() {
    let dir = tempdir();
    let broker = Broker::start(&dir);
    broker.create_topic("fast", 1).await;
    let batch = |from: i32, n: i32| -> Vec<(&'static str, i32, String, Option<i64>)> {
        (from..from + n).map(|i| ("fast", 0, format!(r#"{{"id":{i}}}"#), None)).collect()
    };
    broker.produce(&batch(0, 50));
    let engine = Engine::new();
    let addr = engine.serve_http("127.0.0.1:0").await.expect("serve");
    let _job = start(
        &engine,
        &format!(
            "CREATE TABLE fast (id BIGINT) WITH ('connector' = 'kafka', 'topic' = 'fast',
               'properties.bootstrap.servers' = '{b}', 'scan.startup.mode' = 'earliest-offset', 'format' = 'json',
               'scan.records-per-second' = '20');
             CREATE TABLE sink (id BIGINT) WITH ('connector' = 'blackhole');
             INSERT INTO sink SELECT id FROM fast;",
            b = broker.bootstrap
        ),
    )
    .await;
    let lag = || total(&scrape(addr), "weir_kafka_partition_lag", &[("topic", "fast")]);
    let first = until("a first lag", Duration::from_secs(30), || lag().filter(|_| true)).await;
    assert!(first <= 50.0, "{first}");
    broker.produce(&batch(50, 500));
    // The client learns the new end with its next fetch; the task reads 20 a second.
    let second = until("the lag to grow", Duration::from_secs(30), || lag().filter(|l| *l > first + 100.0)).await;
    assert!(second <= 550.0, "never more than what is in the topic: {second}");
    // And the position only moves forward, slowly.
    let position = total(&scrape(addr), "weir_kafka_partition_currentOffset", &[]).expect("a position");
    assert!(position < 550.0, "{position}");
}

/// `slow(x)`: x, after 20 ms a batch: an operator much slower than its input.
fn slow_udf() -> datafusion::logical_expr::ScalarUDF {
    create_udf(
        "slow",
        vec![DataType::Int64],
        DataType::Int64,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            std::thread::sleep(Duration::from_millis(20));
            Ok(args[0].clone())
        }),
    )
}

/// A slow operator after an exchange: the tasks above it wait for room (backpressure, HIGH
/// on the dashboard), the slow one is busy and not backpressured itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_operator_backpressures_the_ones_above_it() {
    let engine = Engine::new();
    engine.register_function(slow_udf(), false).await;
    let addr = engine.serve_http("127.0.0.1:0").await.expect("serve");
    let job = start(
        &engine,
        "SET 'parallelism' = '1';
         CREATE TABLE gen (k BIGINT, v BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '1000000',
           'fields.k.min' = '0', 'fields.k.max' = '1000', 'seed' = '1');
         CREATE TABLE sink (k BIGINT, n BIGINT) WITH ('connector' = 'blackhole');
         INSERT INTO sink SELECT k, slow(n) FROM (SELECT k, COUNT(*) AS n FROM gen GROUP BY k);",
    )
    .await;
    let vertices = until("backpressure", Duration::from_secs(30), || {
        let plan = json(addr, "/jobs/1");
        let vertices = plan["vertices"].as_array().cloned().unwrap_or_default();
        let source = vertices.iter().find(|v| v["name"].as_str().is_some_and(|n| n.starts_with("Source: gen")))?;
        (source["metrics"]["backpressured-ms-per-second"].as_f64()? > 500.0).then_some(vertices)
    })
    .await;
    // The aggregate's vertex, which runs `slow` after it.
    let slow = vertices
        .iter()
        .find(|v| v["name"].as_str().is_some_and(|n| n.starts_with("GroupAggregate")))
        .unwrap_or_else(|| panic!("no aggregate vertex: {vertices:?}"));
    assert!(slow["metrics"]["backpressured-ms-per-second"].as_f64().expect("a figure") < 200.0, "{slow}");
    assert!(slow["metrics"]["busy-ms-per-second"].as_f64().expect("a figure") > 500.0, "{slow}");
    let s = scrape(addr);
    let bp = total(&s, "weir_operator_backPressuredTimeMsPerSecond", &[("operator_name", "Source: gen")]);
    assert!(bp.is_some_and(|b| b > 0.0), "{bp:?}");
    job.cancel();
}

/// The dashboard in a real browser: the job list, then the job page with its operators, a
/// rate that changes between two loads, and a checkpoint row. Screenshots of both are saved
/// (into `WEIR_SCREENSHOTS`, for the docs, when set).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_renders_in_a_real_browser() {
    let out =
        std::process::Command::new(repo().join("scripts/chromium.sh")).arg("install").output().expect("chromium.sh");
    assert!(out.status.success(), "no chromium: {}", String::from_utf8_lossy(&out.stderr));
    let chromium = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let dir = tempdir();
    let engine = Engine::new();
    let addr = engine.serve_http("127.0.0.1:0").await.expect("serve");
    let _job = start(
        &engine,
        &format!(
            "SET 'parallelism' = '1';
             SET 'checkpoint.interval' = '300ms';
             SET 'checkpoint.dir' = '{ck}';
             CREATE TABLE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP(3),
               WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND)
               WITH ('connector' = 'nexmark', 'table' = 'bid', 'rate' = '20000');
             CREATE TABLE sink (auction BIGINT, n BIGINT, top BIGINT) WITH ('connector' = 'blackhole');
             INSERT INTO sink SELECT auction, COUNT(*), MAX(price) FROM bid GROUP BY auction;",
            ck = dir.join("ck").display()
        ),
    )
    .await;
    // Two rate samples and a checkpoint first.
    until("a checkpoint", Duration::from_secs(30), || {
        (json(addr, "/jobs/1/checkpoints")["counts"]["completed"].as_u64()? >= 2).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let shots = std::env::var_os("WEIR_SCREENSHOTS").map(std::path::PathBuf::from).unwrap_or_else(|| dir.clone());
    let browse = |url: String, shot: Option<&str>| {
        let mut cmd = std::process::Command::new(&chromium);
        cmd.args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,1000"])
            .arg("--virtual-time-budget=4000")
            .arg(format!("--user-data-dir={}", dir.join("chromium").display()));
        match shot {
            Some(name) => cmd.arg(format!("--screenshot={}", shots.join(name).display())),
            None => cmd.arg("--dump-dom"),
        };
        let out = cmd.arg(url).output().expect("run chromium");
        assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let list = browse(format!("http://{addr}/#/"), None);
    assert!(list.contains("insert-into-sink") && list.contains("RUNNING"), "{list}");
    let first = browse(format!("http://{addr}/#/jobs/1"), None);
    for expected in ["Source: bid", "GroupAggregate", "Sink: sink", "HASH", "id=\"checkpoints\"", "COMPLETED"] {
        assert!(first.contains(expected), "'{expected}' not on the job page:\n{first}");
    }
    // Each vertex's text of a class: `in 16,375/s · out 16,375/s`, `rows in 163,760 · out …`.
    let texts = |dom: &str, class: &str| -> Vec<String> {
        let open = format!("class=\"{class}\"");
        dom.match_indices(&open)
            .filter_map(|(i, _)| {
                let text = &dom[i..];
                let start = text.find('>')? + 1;
                Some(text[start..start + text[start..].find('<')?].to_string())
            })
            .collect()
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let second = browse(format!("http://{addr}/#/jobs/1"), None);
    for dom in [&first, &second] {
        let rates = texts(dom, "rate");
        assert_eq!(rates.len(), 3, "a rate per vertex: {rates:?}");
        // The source reads 20,000 events a second, of which about 92% are bids.
        assert!(!rates[0].starts_with("in 0/s"), "the source's rate is drawn: {rates:?}");
    }
    let (rows_then, rows_now) = (texts(&first, "muted rows"), texts(&second, "muted rows"));
    assert_eq!(rows_then.len(), 3, "{rows_then:?}");
    // The figures are live: the source has read more since. (Its rate is paced, so two loads
    // may well show the same rate.)
    assert_ne!(rows_then[0], rows_now[0], "the figures did not change between two loads");
    browse(format!("http://{addr}/#/"), Some("dashboard-jobs.png"));
    browse(format!("http://{addr}/#/jobs/1"), Some("dashboard-job.png"));
    for shot in ["dashboard-jobs.png", "dashboard-job.png"] {
        let size = std::fs::metadata(shots.join(shot)).map(|m| m.len()).unwrap_or(0);
        assert!(size > 10_000, "{shot}: {size} bytes");
    }
}

/// A port in use is a clear error at start; unknown paths and jobs are 404s; a client that
/// never finishes its request holds up neither the endpoint nor the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_and_a_busy_port() {
    let engine = Engine::new();
    let addr = engine.serve_http("127.0.0.1:0").await.expect("serve");
    let other = Engine::new();
    let e = other.serve_http(&addr.to_string()).await.expect_err("the port is taken");
    assert!(e.to_string().contains(&format!("cannot listen on {addr}")), "{e}");
    assert!(!e.to_string().contains('\n'), "{e}");
    let e = engine.serve_http("not a port").await.expect_err("not an address");
    assert!(e.to_string().contains("is not a web address"), "{e}");
    let e = engine.execute_all("SET 'rest.port' = 'eighty';").await.err().expect("not a port");
    assert!(e.to_string().contains("must be a port number"), "{e}");
    let e = engine.serve_http("127.0.0.1:0").await.expect_err("a second endpoint");
    assert_eq!(e.to_string(), format!("the web endpoint already runs on {addr}"));
    // Flink's key starts it from SQL, on the address given.
    let by_sql = Engine::new();
    let done = by_sql.execute_all("SET 'rest.bind-address' = '127.0.0.1'; SET 'rest.port' = '0';").await.expect("SET");
    let Some(Outcome::Done(message)) = done.last() else { panic!("SET gave no message") };
    let served = by_sql.web_addr().expect("the endpoint runs");
    assert_eq!(message, &format!("Set 'rest.port': serving http://{served}/ (metrics at /metrics)."));
    assert_eq!(json(served, "/jobs"), serde_json::json!({ "jobs": [] }));
    // From the command line: one line, exit status 1, before any job.
    let dir = tempdir();
    let sql = dir.join("job.sql");
    std::fs::write(&sql, "SELECT 1;").expect("write");
    // A worker too, before it joins any group.
    for command in ["run", "worker"] {
        let out = std::process::Command::new(crate::weir_bin())
            .args([command, "--web", &addr.to_string()])
            .arg(&sql)
            .output()
            .expect("weir");
        assert_eq!(out.status.code(), Some(1), "weir {command}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stderr.contains("cannot listen on"), "{stderr}");
    }

    for path in ["/nothing", "/jobs/7", "/jobs/x/checkpoints", "/jobs/1/nothing", "/assets/none.js"] {
        assert_eq!(get(addr, path).0, 404, "{path}");
    }
    // A client that sends half a request and waits.
    let mut stalled = std::net::TcpStream::connect(addr).expect("connect");
    stalled.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").expect("half a request");
    let job = start(
        &engine,
        "CREATE TABLE gen (k BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '5000', 'seed' = '3');
         CREATE TABLE sink (k BIGINT) WITH ('connector' = 'blackhole');
         INSERT INTO sink SELECT k FROM gen;",
    )
    .await;
    job.wait().await.expect("the job ends");
    assert_eq!(job.status().rows_written(), 5000);
    let (status, body) = get(addr, "/jobs/overview");
    assert_eq!(status, 200);
    assert!(body.contains("\"rows-written\":5000"), "{body}");
    drop(stalled);
    let (status, metrics) = get(addr, "/metrics");
    assert_eq!(status, 200);
    assert!(metrics.ends_with("# EOF\n"), "{metrics}");
}

/// `weir run` on a terminal shows a progress line (drawn at once, then twice a second) and
/// clears it; piped, stderr has only the usual summary.
#[test]
fn a_progress_line_on_a_terminal_and_none_when_piped() {
    let dir = tempdir();
    let sql = dir.join("job.sql");
    std::fs::write(
        &sql,
        "CREATE TABLE gen (k BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '20000', 'seed' = '3');
         CREATE TABLE sink (k BIGINT) WITH ('connector' = 'blackhole');
         INSERT INTO sink SELECT k FROM gen;",
    )
    .expect("write");
    let mut command = std::process::Command::new(crate::weir_bin());
    command.arg("run").arg(&sql);
    let mut p = rexpect::session::spawn_command(command, Some(60_000)).expect("spawn weir");
    p.exp_regex(r"\d[\d,]* rows read, \d[\d,]* written, \d[\d,]*/s, \d+s").expect("a progress line");
    // The summary on a line of its own: the progress line is erased first.
    p.exp_string("\r\x1b[2KJob 'insert-into-sink' finished: 20000 rows written").expect("the summary");
    p.exp_eof().expect("exit");

    let out = std::process::Command::new(crate::weir_bin()).arg("run").arg(&sql).output().expect("weir run");
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("rows read,") && !stderr.contains('\x1b'), "{stderr}");
    assert!(stderr.contains("20000 rows written"), "{stderr}");
}

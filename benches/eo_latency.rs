//! Exactly-once visibility latency: how long after a record reaches a Kafka source topic its
//! result can be read by a `read_committed` consumer of Weir's exactly-once Kafka sink, at
//! several checkpoint intervals, and what each interval costs Weir in CPU.
//!
//!     cargo bench -p weir-cli --bench eo_latency -- \
//!         [--intervals none,1s,200ms,100ms] [--queries agg,window] [--rate 2000] \
//!         [--seconds 20] [--warmup 5] [--keys 100] [--out results.jsonl]
//!
//! Per query and interval: a fresh broker (scripts/kafka-broker.sh), a fresh `weir run` of
//! the release build, a producer writing `{"k", "seq", "ts"}` at a fixed rate into a
//! one-partition topic, and a `read_committed` consumer of the output topic polling without
//! batching delay. `none` is the floor: no checkpoints and a non-transactional sink.
//!
//! - `agg` (an updating aggregate, `upsert-kafka`): `k, COUNT(*), MAX(seq) GROUP BY k`. A
//!   record's latency is from its send to the first visible row of its key whose `MAX(seq)`
//!   covers it.
//! - `window` (a keyed 1 s event-time tumbling window, `kafka`): a record cannot be visible
//!   before its window closes, so the figure is from the window's end (event time is the
//!   producer's clock, with no watermark delay) to its row being visible.
//!
//! CPU is the `weir` process's user + system time over the measured seconds (after the
//! warm-up), read from /proc: all of it, and without librdkafka's threads (`rdk:*`, read every
//! 5 ms, since the sink's clients come and go with its transactions). The test
//! broker answers a fetch at once even when it has nothing (a Kafka broker holds it for
//! `fetch.wait.max.ms`), so an idle librdkafka consumer polls it in a loop: that CPU is the
//! stand-in's, not Weir's. Wall-clock time is what is measured here; nothing in Weir's results
//! depends on it. `EO_LATENCY_KEEP=1` keeps each run's directory (job, log);
//! `EO_LATENCY_SINK_OPTIONS` adds options to the sink's `WITH`.
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

struct Args {
    intervals: Vec<String>,
    queries: Vec<String>,
    rate: u64,
    seconds: u64,
    warmup: u64,
    keys: u64,
    out: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let get = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let num = |name: &str, default: u64| -> Result<u64, String> {
        get(name).map_or(Ok(default), |v| v.parse().map_err(|_| format!("{name}: not a number: {v}")))
    };
    let list = |name: &str, default: &str| -> Vec<String> {
        get(name).unwrap_or_else(|| default.to_string()).split(',').map(str::to_string).collect()
    };
    Ok(Args {
        intervals: list("--intervals", "none,1s,200ms,100ms"),
        queries: list("--queries", "agg,window"),
        rate: num("--rate", 2000)?,
        seconds: num("--seconds", 20)?,
        warmup: num("--warmup", 5)?,
        keys: num("--keys", 100)?.max(1),
        out: get("--out").map(PathBuf::from),
    })
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The release `weir` next to this bench's executable (target/release/deps/..), or `$WEIR`.
fn weir_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("WEIR") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let path = exe.parent().and_then(Path::parent).map(|d| d.join("weir")).ok_or("no target directory")?;
    if path.exists() {
        Ok(path)
    } else {
        Err(format!("{} not found: build it (cargo build --release -p weir-cli) or set WEIR", path.display()))
    }
}

struct Broker {
    pid: i32,
    bootstrap: String,
}

impl Broker {
    fn start(dir: &Path) -> Result<Broker, String> {
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| e.to_string())?.port();
        let out = Command::new(repo().join("scripts/kafka-broker.sh"))
            .arg("start")
            .arg(port.to_string())
            .arg(dir.join("broker"))
            .output()
            .map_err(|e| format!("scripts/kafka-broker.sh: {e}"))?;
        if !out.status.success() {
            return Err(format!("broker did not start: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        let pid = String::from_utf8_lossy(&out.stdout).trim().parse().map_err(|_| "broker pid")?;
        Ok(Broker { pid, bootstrap: format!("127.0.0.1:{port}") })
    }

    fn create_topic(&self, topic: &str) -> Result<(), String> {
        let status = Command::new("python3")
            .arg(repo().join("scripts/kafka-create-topic.py"))
            .args([&self.bootstrap, topic, "1"])
            .status()
            .map_err(|e| e.to_string())?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("creating topic {topic} failed"))
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        // SAFETY: a signal to the broker process this bench started.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
        }
    }
}

fn job_sql(query: &str, interval: &str, bootstrap: &str, dir: &Path) -> String {
    let checkpoints = if interval == "none" {
        String::new()
    } else {
        format!(
            "SET 'checkpoint.interval' = '{interval}';\nSET 'checkpoint.dir' = '{}';\n",
            dir.join("checkpoints").display()
        )
    };
    let guarantee = if interval == "none" { "none" } else { "exactly-once" };
    let source = format!(
        "CREATE TABLE src (k BIGINT, seq BIGINT, ts BIGINT, et AS TO_TIMESTAMP_LTZ(ts, 3), \
         WATERMARK FOR et AS et) WITH ('connector' = 'kafka', 'topic' = 'in', \
         'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'json', \
         'scan.startup.mode' = 'earliest-offset');"
    );
    // More sink options (`, 'properties.debug' = 'eos'`), to look into a run.
    let extra = std::env::var("EO_LATENCY_SINK_OPTIONS").unwrap_or_default();
    let sink_options = format!(
        "'topic' = 'out', 'properties.bootstrap.servers' = '{bootstrap}', \
         'sink.delivery-guarantee' = '{guarantee}', 'sink.transactional-id-prefix' = 'latency'{extra}"
    );
    let body = match query {
        "agg" => format!(
            "CREATE TABLE sink (k BIGINT, n BIGINT, last_seq BIGINT, PRIMARY KEY (k) NOT ENFORCED) \
             WITH ('connector' = 'upsert-kafka', 'key.format' = 'json', 'value.format' = 'json', {sink_options});\n\
             INSERT INTO sink SELECT k, COUNT(*), MAX(seq) FROM src GROUP BY k;"
        ),
        _ => format!(
            "CREATE TABLE sink (k BIGINT, window_end TIMESTAMP(3), n BIGINT, last_seq BIGINT) \
             WITH ('connector' = 'kafka', 'format' = 'json', {sink_options});\n\
             INSERT INTO sink SELECT k, window_end, COUNT(*), MAX(seq) \
             FROM TABLE(TUMBLE(TABLE src, DESCRIPTOR(et), INTERVAL '1' SECOND)) \
             GROUP BY k, window_start, window_end;"
        ),
    };
    format!(
        "SET 'parallelism' = '1';\nSET 'state.backend' = 'rocksdb';\nSET 'table.local-time-zone' = 'UTC';\n\
         {checkpoints}{source}\n{body}\n"
    )
}

/// User + system CPU seconds of a process so far.
fn cpu_seconds(pid: u32) -> Option<f64> {
    stat_seconds(&format!("/proc/{pid}/stat"))
}

/// The CPU seconds of each librdkafka thread (`rdk:*`) of a process, by thread id, as last
/// seen, read every few milliseconds: the exactly-once sink starts a client (and its
/// threads) per transaction, and a thread's time is gone from `/proc` once it has ended, so
/// reading the threads only at the end would count those of ended clients as Weir's own.
/// What an ended thread spent after its last reading (a few ms) is still counted as Weir's.
struct LibrdkafkaClock {
    seen: Arc<Mutex<HashMap<String, f64>>>,
    stop: Arc<AtomicBool>,
}

impl LibrdkafkaClock {
    fn start(pid: u32) -> Self {
        let (seen, stop) = (Arc::new(Mutex::new(HashMap::new())), Arc::new(AtomicBool::new(false)));
        let (s, st) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return };
                for task in tasks.flatten() {
                    let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
                    if !comm.starts_with("rdk:") {
                        continue;
                    }
                    if let Some(secs) = stat_seconds(&task.path().join("stat").to_string_lossy()) {
                        if let Ok(mut seen) = s.lock() {
                            seen.insert(task.file_name().to_string_lossy().into_owned(), secs);
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Self { seen, stop }
    }

    fn snapshot(&self) -> HashMap<String, f64> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for LibrdkafkaClock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn stat_seconds(path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / hz)
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// One visible output row: when it was seen (since the bench's start and as wall-clock ms)
/// and its JSON value.
struct Seen {
    at: Duration,
    wall_ms: i64,
    value: serde_json::Value,
}

fn consume(bootstrap: &str, start: Instant, stop: Arc<AtomicBool>, seen: Arc<Mutex<Vec<Seen>>>) -> Result<(), String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "latency-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        // Answer as soon as anything is there: the default waits up to 500 ms for a fuller fetch.
        .set("fetch.wait.max.ms", "5")
        .set("fetch.min.bytes", "1")
        .create()
        .map_err(|e| e.to_string())?;
    let mut list = TopicPartitionList::new();
    list.add_partition_offset("out", 0, Offset::Beginning).map_err(|e| e.to_string())?;
    consumer.assign(&list).map_err(|e| e.to_string())?;
    while !stop.load(Ordering::Relaxed) {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(5)) {
            let at = start.elapsed();
            let wall_ms = now_ms();
            let Some(payload) = m.payload() else { continue };
            if let Ok(value) = serde_json::from_slice(payload) {
                seen.lock().map_err(|_| "poisoned")?.push(Seen { at, wall_ms, value });
            }
        }
    }
    Ok(())
}

struct Outcome {
    latencies_ms: Vec<f64>,
    unseen: usize,
    /// CPU seconds per second: all of the process, and without librdkafka's threads.
    cpu_per_second: (f64, f64),
    records: u64,
}

fn run_one(args: &Args, query: &str, interval: &str, weir: &Path) -> Result<Outcome, String> {
    let dir = std::env::temp_dir().join(format!("weir-eo-latency-{}-{query}-{interval}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let broker = Broker::start(&dir)?;
    broker.create_topic("in")?;
    broker.create_topic("out")?;
    let sql = dir.join("job.sql");
    std::fs::write(&sql, job_sql(query, interval, &broker.bootstrap, &dir)).map_err(|e| e.to_string())?;
    let log = std::fs::File::create(dir.join("weir.log")).map_err(|e| e.to_string())?;
    let mut job: Child = Command::new(weir)
        .arg("run")
        .arg(&sql)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("{}: {e}", weir.display()))?;
    let result = measure(args, query, &broker, &job);
    let _ = job.kill();
    let _ = job.wait();
    if result.is_err() || std::env::var_os("EO_LATENCY_KEEP").is_some() {
        eprintln!("weir's log: {}", dir.join("weir.log").display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

fn measure(args: &Args, query: &str, broker: &Broker, job: &Child) -> Result<Outcome, String> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &broker.bootstrap)
        .set("linger.ms", "0")
        .create()
        .map_err(|e| e.to_string())?;
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let (bootstrap, stop, seen) = (broker.bootstrap.clone(), stop.clone(), seen.clone());
        std::thread::spawn(move || consume(&bootstrap, start, stop, seen))
    };
    let total = args.rate * (args.warmup + args.seconds);
    let first_measured = args.rate * args.warmup;
    let mut sent = Vec::with_capacity(total as usize);
    // Each record's event time (its `ts`): a window row's end is found from its `last_seq`.
    let mut event_ms = Vec::with_capacity(total as usize);
    let mut cpu_start = None;
    let librdkafka = LibrdkafkaClock::start(job.id());
    let mut librdkafka_start = HashMap::new();
    for seq in 0..total {
        let due = Duration::from_nanos(seq * 1_000_000_000 / args.rate);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        if seq == first_measured {
            cpu_start = cpu_seconds(job.id());
            librdkafka_start = librdkafka.snapshot();
        }
        let ts = now_ms();
        let value = format!(r#"{{"k":{},"seq":{seq},"ts":{ts}}}"#, seq % args.keys);
        sent.push(start.elapsed());
        event_ms.push(ts);
        loop {
            match producer.send(BaseRecord::<(), _>::to("in").partition(0).payload(&value)) {
                Ok(()) => break,
                Err((_, _)) => {
                    producer.poll(Duration::from_millis(1));
                }
            }
        }
        producer.poll(Duration::ZERO);
    }
    let cpu_end = cpu_seconds(job.id());
    let librdkafka_seconds: f64 =
        librdkafka.snapshot().iter().map(|(tid, secs)| secs - librdkafka_start.get(tid).unwrap_or(&0.0)).sum();
    drop(librdkafka);
    let end_wall_ms = now_ms();
    producer.flush(Duration::from_secs(10)).map_err(|e| e.to_string())?;
    // Time for the last results to become visible.
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    reader.join().map_err(|_| "reader panicked")??;
    let cpu = match (cpu_start, cpu_end) {
        (Some(a), Some(b)) => ((b - a) / args.seconds as f64, (b - a - librdkafka_seconds) / args.seconds as f64),
        _ => return Err("the weir process ended early: see its log".into()),
    };
    let seen = std::mem::take(&mut *seen.lock().map_err(|_| "poisoned")?);
    let (latencies_ms, unseen) = match query {
        "agg" => per_record(&seen, &sent, args, first_measured),
        _ => after_window_end(&seen, &event_ms, args, end_wall_ms),
    };
    Ok(Outcome { latencies_ms, unseen, cpu_per_second: cpu, records: args.rate * args.seconds })
}

/// Each measured record's latency: from its send to the first visible row of its key whose
/// `last_seq` covers it.
fn per_record(seen: &[Seen], sent: &[Duration], args: &Args, first: u64) -> (Vec<f64>, usize) {
    let mut pending: HashMap<u64, VecDeque<u64>> = HashMap::new();
    for seq in 0..sent.len() as u64 {
        pending.entry(seq % args.keys).or_default().push_back(seq);
    }
    let mut latencies = Vec::new();
    for row in seen {
        let (Some(k), Some(last)) = (row.value["k"].as_u64(), row.value["last_seq"].as_u64()) else { continue };
        let Some(queue) = pending.get_mut(&k) else { continue };
        while queue.front().is_some_and(|s| *s <= last) {
            let seq = queue.pop_front().unwrap_or_default();
            if seq >= first {
                latencies.push((row.at.saturating_sub(sent[seq as usize])).as_secs_f64() * 1000.0);
            }
        }
    }
    let unseen = pending.values().flatten().filter(|s| **s >= first).count();
    (latencies, unseen)
}

/// Each measured window row's latency from its window's end; `unseen` counts the windows
/// that closed before the producer stopped with no row seen for some key.
fn after_window_end(seen: &[Seen], event_ms: &[i64], args: &Args, end_wall_ms: i64) -> (Vec<f64>, usize) {
    let mut first_seen: BTreeMap<(u64, i64), i64> = BTreeMap::new();
    for row in seen {
        // The 1 s window of the row's last record (event time is the producer's clock).
        let (Some(k), Some(last)) = (row.value["k"].as_u64(), row.value["last_seq"].as_u64()) else { continue };
        let Some(ts) = event_ms.get(last as usize) else { continue };
        let end_ms = (ts.div_euclid(1000) + 1) * 1000;
        first_seen.entry((k, end_ms)).or_insert(row.wall_ms);
    }
    let windows: Vec<i64> = {
        let mut ends: Vec<i64> = first_seen.keys().map(|(_, e)| *e).collect();
        ends.sort_unstable();
        ends.dedup();
        ends
    };
    let Some(first_end) = windows.first() else { return (Vec::new(), 0) };
    let measured_from = first_end + (args.warmup as i64) * 1000;
    let mut latencies = Vec::new();
    let mut unseen = 0;
    for end in windows.iter().copied().filter(|e| *e >= measured_from && *e + 1000 < end_wall_ms) {
        for k in 0..args.keys {
            match first_seen.get(&(k, end)) {
                Some(at) => latencies.push((at - end) as f64),
                None => unseen += 1,
            }
        }
    }
    (latencies, unseen)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("eo_latency: {e}");
            return ExitCode::FAILURE;
        }
    };
    let weir = match weir_binary() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("eo_latency: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "{} records/s over {} keys, {} s measured after {} s warm-up, p=1",
        args.rate, args.keys, args.seconds, args.warmup
    );
    println!(
        "{:<7} {:<9} {:>9} {:>9} {:>9} {:>8} {:>10} {:>13} {:>9} {:>9}",
        "query", "interval", "p50 ms", "p99 ms", "max ms", "unseen", "CPU", "CPU (no rdk)", "vs none", "vs 1s"
    );
    for query in &args.queries {
        let (mut baseline, mut floor) = (None, None);
        let mut rows = Vec::new();
        for interval in &args.intervals {
            match run_one(&args, query, interval, &weir) {
                Ok(o) => {
                    match interval.as_str() {
                        "1s" => baseline = Some(o.cpu_per_second.1),
                        "none" => floor = Some(o.cpu_per_second.1),
                        _ => {}
                    }
                    rows.push((interval.clone(), o));
                }
                Err(e) => eprintln!("eo_latency: {query} at {interval}: {e}"),
            }
        }
        for (interval, mut o) in rows {
            o.latencies_ms.sort_by(f64::total_cmp);
            let against = |b: Option<f64>| {
                b.map_or(String::from("-"), |b| format!("{:+.1}%", (o.cpu_per_second.1 / b - 1.0) * 100.0))
            };
            let (vs_none, vs_1s) = (against(floor), against(baseline));
            println!(
                "{:<7} {:<9} {:>9.1} {:>9.1} {:>9.1} {:>8} {:>9.1}% {:>12.1}% {:>9} {:>9}",
                query,
                interval,
                percentile(&o.latencies_ms, 0.5),
                percentile(&o.latencies_ms, 0.99),
                o.latencies_ms.last().copied().unwrap_or(f64::NAN),
                o.unseen,
                o.cpu_per_second.0 * 100.0,
                o.cpu_per_second.1 * 100.0,
                vs_none,
                vs_1s
            );
            if let Some(path) = &args.out {
                let line = serde_json::json!({
                    "query": query, "interval": interval, "rate": args.rate, "keys": args.keys,
                    "records": o.records, "samples": o.latencies_ms.len(), "unseen": o.unseen,
                    "p50_ms": percentile(&o.latencies_ms, 0.5), "p99_ms": percentile(&o.latencies_ms, 0.99),
                    "max_ms": o.latencies_ms.last(), "cpu_per_second": o.cpu_per_second.0,
                    "cpu_per_second_without_librdkafka": o.cpu_per_second.1,
                });
                let written = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .and_then(|mut f| writeln!(f, "{line}"));
                if let Err(e) = written {
                    eprintln!("eo_latency: {}: {e}", path.display());
                }
            }
        }
    }
    ExitCode::SUCCESS
}

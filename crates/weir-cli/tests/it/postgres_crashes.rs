//! The exactly-once PostgreSQL sink under SIGKILL in every phase of its two-phase commit,
//! at-least-once replays (idempotent by key, duplicated without one), and fencing of a
//! paused instance. The expected rows come from PostgreSQL itself.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::kafka::{run_to_end, write_sql};
use crate::kills::{in_phase, kill_in_phases, start, Phase};
use crate::postgres::{
    bids, load_bid_log, servers, settings, sink, Postgres, BIDS, BY_COUNT, BY_COUNT_PG, BY_COUNT_QUERY,
};
use crate::weir_bin;

/// What a reader in READ COMMITTED saw while a job ran: the transactions of every row
/// version (`xmin`), and the prepared transactions pending at the time.
struct Poller {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(BTreeSet<String>, BTreeSet<String>, usize)>,
}

impl Poller {
    fn start(pg: &Postgres, table: &str) -> Poller {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, port, table) = (stop.clone(), pg.port, table.to_string());
        let thread = std::thread::spawn(move || {
            let (mut xids, mut prepared, mut polls) = (BTreeSet::new(), BTreeSet::new(), 0);
            while !flag.load(Ordering::Relaxed) {
                let out = Command::new("psql")
                    .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "weir", "-d", "weir", "-X", "-At"])
                    .arg("-c")
                    .arg(format!(
                        "SET default_transaction_isolation = 'read committed'; \
                         SELECT 'x' || xmin::text FROM {table} UNION ALL SELECT 'p' || gid FROM pg_prepared_xacts"
                    ))
                    .stderr(Stdio::null())
                    .output();
                let Ok(out) = out else { continue };
                polls += 1;
                for line in String::from_utf8_lossy(&out.stdout).lines() {
                    if let Some(x) = line.strip_prefix('x') {
                        xids.insert(x.to_string());
                    } else if let Some(g) = line.strip_prefix('p') {
                        prepared.insert(g.to_string());
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            (xids, prepared, polls)
        });
        Poller { stop, thread }
    }

    fn finish(self) -> (BTreeSet<String>, BTreeSet<String>, usize) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("poller")
    }
}

const EXACTLY_ONCE_PHASES: [Phase; 5] =
    [Phase::Processing, Phase::PreCommitted, Phase::Committing, Phase::DuringCommit, Phase::Restoring];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_upserts_and_deletes_under_sigkill_in_every_phase() {
    let dir = crate::slt::tempdir();
    let (broker, pg) = servers(&dir).await;
    load_bid_log(&dir, &broker, &pg);
    let want = pg.psql(BY_COUNT_PG);
    assert!(want.len() > 5, "{} groups", want.len());
    pg.psql("CREATE TABLE by_count (n bigint PRIMARY KEY, auctions bigint, lowest bigint, highest bigint, total numeric(20, 2))");

    let checkpoints = dir.join("checkpoints");
    let sql = format!(
        "{}\n{}\n{}\nINSERT INTO by_count {BY_COUNT_QUERY};",
        settings(&checkpoints),
        bids(&broker, Some(700)),
        // A small buffer: each checkpoint's transaction is open, and written into, before
        // its barrier, and killed so too.
        sink(&pg, "by_count", BY_COUNT, "exactly-once")
            .replace("'sink.delivery-guarantee'", "'sink.buffer-flush.max-rows' = '20', 'sink.delivery-guarantee'")
    );
    let sql = write_sql(&dir, "job.sql", sql);
    let faults = dir.join("faults");
    let poller = Poller::start(&pg, "by_count");
    let kills = kill_in_phases(
        &EXACTLY_ONCE_PHASES,
        Phase::Processing,
        3,
        20,
        |phase| start(&sql, phase, &faults, "postgres"),
        |phase| in_phase(phase, &faults, "postgres"),
    );
    assert!(kills.values().sum::<u32>() >= 20);
    run_to_end(&sql);
    let (xids, prepared, polls) = poller.finish();
    let got = pg.psql("SELECT * FROM by_count ORDER BY n");
    assert_eq!(got.len(), want.len(), "rows differ in number from PostgreSQL's own GROUP BY");
    assert!(got == want, "rows differ from PostgreSQL's own GROUP BY:\n{got:?}\n{want:?}");
    assert!(pg.psql("SELECT gid FROM pg_prepared_xacts").is_empty(), "a prepared transaction was left behind");

    // The reader saw rows while transactions were prepared and not committed, and every row
    // version it saw was written by a transaction that committed (none later rolled back).
    println!(
        "reader: {polls} polls, {} row versions' transactions, {} prepared transactions seen",
        xids.len(),
        prepared.len()
    );
    assert!(polls > 50 && !prepared.is_empty(), "the reader never saw a prepared transaction ({polls} polls)");
    let list = xids.iter().map(|x| format!("'{x}'")).collect::<Vec<_>>().join(",");
    let statuses =
        pg.psql(&format!("SELECT pg_xact_status(x::xid8), count(*) FROM unnest(ARRAY[{list}]::text[]) x GROUP BY 1"));
    assert_eq!(statuses, vec![format!("committed|{}", xids.len())], "row versions of transactions not committed");
}

/// Per-auction counts, at least once, with a primary key: replays after kills write rows
/// again (counted by a trigger: an update to a count not above the one there), and the
/// final table is exact all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_upserts_by_key_are_idempotent_under_sigkill() {
    let dir = crate::slt::tempdir();
    let (broker, pg) = servers(&dir).await;
    load_bid_log(&dir, &broker, &pg);
    let want = pg.psql("SELECT auction, count(*), max(date_time) FROM bid_log GROUP BY auction ORDER BY auction");
    pg.psql(
        "CREATE TABLE counts (auction bigint PRIMARY KEY, n bigint NOT NULL, last_bid timestamp);
         CREATE TABLE rewrites (n bigint NOT NULL); INSERT INTO rewrites VALUES (0);
         CREATE FUNCTION count_rewrite() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN IF NEW.n <= OLD.n THEN UPDATE rewrites SET n = n + 1; END IF; RETURN NEW; END $$;
         CREATE TRIGGER rewrite BEFORE UPDATE ON counts FOR EACH ROW EXECUTE FUNCTION count_rewrite();",
    );
    let checkpoints = dir.join("checkpoints");
    let sql = format!(
        "{}\n{}\n{}\nINSERT INTO counts SELECT auction, COUNT(*), MAX(date_time) FROM bids GROUP BY auction;",
        settings(&checkpoints),
        bids(&broker, Some(700)),
        sink(
            &pg,
            "counts",
            "auction BIGINT, n BIGINT, last_bid TIMESTAMP(3), PRIMARY KEY (auction) NOT ENFORCED",
            "at-least-once"
        )
    );
    let sql = write_sql(&dir, "job.sql", sql);
    let faults = dir.join("faults");
    kill_in_phases(
        &[Phase::Processing, Phase::PreCommitted],
        Phase::Processing,
        5,
        20,
        |phase| start(&sql, phase, &faults, "postgres"),
        |phase| in_phase(phase, &faults, "postgres"),
    );
    run_to_end(&sql);
    let got = pg.psql("SELECT * FROM counts ORDER BY auction");
    assert_eq!(got.len(), want.len(), "auctions differ in number");
    assert!(got == want, "rows differ from PostgreSQL's own GROUP BY");
    let rewrites: u64 = pg.psql("SELECT n FROM rewrites")[0].parse().expect("rewrites");
    println!("rows written again after restarts (a count not above the one in the table): {rewrites}");
    assert!(rewrites > 0, "no row was written again: the kills did not make the job replay");
}

/// Appended without a key, at least once: after kills, every bid is there, some twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_appends_without_a_key_duplicate_after_restarts() {
    let dir = crate::slt::tempdir();
    let (broker, pg) = servers(&dir).await;
    pg.psql("CREATE TABLE appended (auction bigint, bidder bigint, price bigint, date_time timestamp)");
    let checkpoints = dir.join("checkpoints");
    let sql = format!(
        "{}\n{}\n{}\nINSERT INTO appended SELECT auction, bidder, price, date_time FROM bids;",
        settings(&checkpoints),
        bids(&broker, Some(700)),
        sink(&pg, "appended", "auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3)", "at-least-once")
    );
    let sql = write_sql(&dir, "job.sql", sql);
    let faults = dir.join("faults");
    kill_in_phases(
        &[Phase::Processing, Phase::PreCommitted],
        Phase::Processing,
        3,
        8,
        |phase| start(&sql, phase, &faults, "postgres"),
        |phase| in_phase(phase, &faults, "postgres"),
    );
    run_to_end(&sql);
    // Each Nexmark bid is distinct (auction, bidder, price, time).
    let distinct: usize = pg.psql("SELECT count(*) FROM (SELECT DISTINCT * FROM appended) d")[0].parse().expect("n");
    let total = pg.count("appended");
    println!("appended at least once: {total} rows for {BIDS} bids, {} duplicates", total - distinct);
    assert_eq!(distinct, BIDS, "a bid is missing");
    assert!(total > distinct, "no duplicate after kills before checkpoints completed");
}

/// A second instance, restored from a copy of the first's checkpoints (as on another
/// machine), takes over; the first, paused in the middle and resumed, cannot commit and
/// stops, and the table is exact. On a copy, only PostgreSQL can fence the first: on the same
/// directory its checkpoint store may stop it first, and the test would not show which did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_instance_fences_the_first() {
    let dir = crate::slt::tempdir();
    let (broker, pg) = servers(&dir).await;
    load_bid_log(&dir, &broker, &pg);
    let want = pg.psql(BY_COUNT_PG);
    pg.psql("CREATE TABLE by_count (n bigint PRIMARY KEY, auctions bigint, lowest bigint, highest bigint, total numeric(20, 2))");
    let checkpoints = dir.join("checkpoints");
    let sql = write_sql(
        &dir,
        "job.sql",
        format!(
            "{}\n{}\n{}\nINSERT INTO by_count {BY_COUNT_QUERY};",
            settings(&checkpoints),
            bids(&broker, Some(2000)),
            sink(&pg, "by_count", BY_COUNT, "exactly-once")
        ),
    );
    // Paused in its first commit: the checkpoint is complete, its transaction prepared.
    let faults = dir.join("faults");
    std::fs::create_dir_all(&faults).expect("fault dir");
    let mut first = Command::new(weir_bin())
        .arg("run")
        .arg(&sql)
        .env("WEIR_FAULT_DIR", &faults)
        .env("WEIR_FAULT_POSTGRES_COMMIT_MS", "1000")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the first instance");
    // Only a guard against a hang: under the full suite's load the first commit came after 20 s.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !faults.join("postgres_commit").exists() {
        assert!(Instant::now() < deadline, "the first instance never came to commit");
        std::thread::sleep(Duration::from_millis(2));
    }
    let pid = first.id().to_string();
    assert!(Command::new("kill").args(["-STOP", &pid]).status().expect("SIGSTOP").success());
    let copied = dir.join("checkpoints-copy");
    crate::rescale::copy_dir(&checkpoints, &copied);
    let second = std::fs::read_to_string(&sql)
        .expect("read the job")
        .replace(&format!("'{}'", checkpoints.display()), &format!("'{}'", copied.display()));
    run_to_end(&write_sql(&dir, "second.sql", second));
    assert!(Command::new("kill").args(["-CONT", &pid]).status().expect("SIGCONT").success());
    let status = first.wait().expect("wait for the first instance");
    let mut stderr = String::new();
    std::io::Read::read_to_string(first.stderr.as_mut().expect("stderr"), &mut stderr).expect("read stderr");
    println!("the first instance, resumed: {}", stderr.lines().last().unwrap_or_default());
    assert!(!status.success(), "the first instance went on after it was fenced");
    assert!(
        stderr.contains("another instance of this job has taken over the sink of table 'by_count'"),
        "the first instance was not fenced by PostgreSQL:\n{stderr}"
    );
    let got = pg.psql("SELECT * FROM by_count ORDER BY n");
    assert!(got == want, "rows differ from PostgreSQL's own GROUP BY after the take-over");
    assert!(pg.psql("SELECT gid FROM pg_prepared_xacts").is_empty(), "a prepared transaction was left behind");
}

//! Checkpoints written by earlier versions of Weir keep restoring. `tests/fixtures/` holds one
//! checkpoint per format version, taken from a job with window, group, join and Top-N state
//! and a file sink's pre-commit, killed while its sinks were committing checkpoint 1 (some
//! files published, some still pending). Each must restore and finish with exactly the output
//! of a run never interrupted. A change to any encoding (manifest, state tables, operator
//! metadata, sink pre-commits) either keeps reading these, or bumps its version and adds a
//! fixture of the new one, with a restore of the old ones: then this test tells which.
//!
//! `make_checkpoint_fixture` (ignored) writes the fixture of the current version.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::weir_bin;

/// The job, with paths relative to the directory it runs in. Nexmark events are the same in
/// every run (a hash of the event number); `'rate'` paces them (a batch of about 8,000 a
/// second) so that checkpoint 1 comes after the first batch, long before the end. The join
/// keeps few bids (filtered before it), so that the fixture stays small.
const JOB: &str = "SET 'parallelism' = '2';
SET 'checkpoint.interval' = '100ms';
SET 'checkpoint.dir' = 'checkpoints';
CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3),
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
  WITH ('connector' = 'nexmark', 'table' = 'bid', 'events' = '24000', 'rate' = '8000');
CREATE TABLE person (id BIGINT, name STRING)
  WITH ('connector' = 'nexmark', 'table' = 'person', 'events' = '24000', 'rate' = '8000');
CREATE TABLE windows_out (auction BIGINT, window_start TIMESTAMP(3), cnt BIGINT, total BIGINT)
  WITH ('connector' = 'filesystem', 'path' = 'out/windows', 'format' = 'csv');
CREATE TABLE joined_out (auction BIGINT, name STRING, price BIGINT)
  WITH ('connector' = 'filesystem', 'path' = 'out/joined', 'format' = 'csv');
CREATE TABLE top_out (bucket BIGINT, cnt BIGINT, rn BIGINT) WITH ('connector' = 'print');
EXECUTE STATEMENT SET BEGIN
INSERT INTO windows_out SELECT auction, window_start, COUNT(*), SUM(price)
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
  GROUP BY auction, window_start, window_end;
INSERT INTO joined_out SELECT b.auction, p.name, b.price
  FROM (SELECT * FROM bid WHERE price % 50 = 0) b JOIN person p ON b.bidder = p.id;
INSERT INTO top_out SELECT bucket, cnt, rn FROM (
  SELECT bucket, cnt, ROW_NUMBER() OVER (ORDER BY cnt DESC, bucket) AS rn
  FROM (SELECT auction % 5 AS bucket, COUNT(*) AS cnt FROM bid GROUP BY auction % 5))
  WHERE rn <= 3;
END;
";

/// The job of fixtures from version 2 on: [`JOB`] with RocksDB state.
fn job_now() -> String {
    format!("SET 'state.backend' = 'rocksdb';\nSET 'state.dir' = 'state';\n{JOB}")
}

/// The job a fixture was taken from.
fn job_of(fixture: &Path) -> String {
    std::fs::read_to_string(fixture.join("job.sql")).unwrap_or_else(|_| JOB.to_string())
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join("fixtures")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create a directory");
    for entry in std::fs::read_dir(from).expect("read a directory").flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a file");
        }
    }
}

/// `weir run` of `job` in `dir`: its changelog lines on stdout.
fn run(dir: &Path, job: &str) -> Vec<String> {
    std::fs::write(dir.join("job.sql"), job).expect("write the job");
    let out = Command::new(weir_bin()).arg("run").arg("job.sql").current_dir(dir).output().expect("run weir");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout.lines().filter(|l| ["+I[", "-U[", "+U[", "-D["].iter().any(|p| l.starts_with(p))).map(String::from).collect()
}

/// The published rows of a file table, sorted; no hidden file may be left.
fn published(table: &Path) -> Vec<String> {
    let mut rows = Vec::new();
    for entry in std::fs::read_dir(table).expect("a table directory").flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        assert!(!name.starts_with('.'), "a hidden file left in {}: {name}", table.display());
        if name.starts_with('_') {
            continue;
        }
        rows.extend(std::fs::read_to_string(entry.path()).expect("read").lines().map(String::from));
    }
    rows.sort();
    rows
}

/// The Top-N by rank after a changelog: what a reader of `top_out` would hold.
fn ranking(lines: &[String]) -> BTreeMap<String, String> {
    let mut by_rank = BTreeMap::new();
    for line in lines {
        let (op, row) = line.split_at(2);
        let row = row.trim_start_matches('[').trim_end_matches(']').to_string();
        let rank = row.rsplit(", ").next().unwrap_or_default().to_string();
        match op {
            "+I" | "+U" => {
                by_rank.insert(rank, row);
            }
            _ => {
                if by_rank.get(&rank) == Some(&row) {
                    by_rank.remove(&rank);
                }
            }
        }
    }
    by_rank
}

#[test]
fn checkpoints_of_every_format_version_restore_and_finish_exactly_once() {
    let versions: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .expect("tests/fixtures")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("checkpoint-v")))
        .collect();
    assert!(versions.len() >= 2, "fixtures of versions 1 and 2 at least: {versions:?}");
    // The uninterrupted run of each fixture's job.
    let mut references: BTreeMap<String, (crate::slt::Scratch, Vec<String>)> = BTreeMap::new();
    for fixture in versions {
        let dir = crate::slt::tempdir();
        copy_dir(&fixture, &dir);
        let pending_before = std::fs::read_dir(dir.join("out/windows"))
            .into_iter()
            .chain(std::fs::read_dir(dir.join("out/joined")))
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".pending"))
            .count();
        assert!(pending_before > 0, "{}: the fixture has files pending their commit", fixture.display());
        let job = job_of(&fixture);
        let (reference, want_changes) = references.entry(job.clone()).or_insert_with(|| {
            let reference = crate::slt::tempdir();
            let changes = run(&reference, &job);
            (reference, changes)
        });
        let want_top = ranking(want_changes);
        assert_eq!(want_top.len(), 3, "the reference ranking: {want_top:?}");
        // `weir upgrade --check` says what the restore will do, and that the format is an
        // earlier one where it is.
        std::fs::write(dir.join("job.sql"), &job).expect("write the job");
        let check = Command::new(weir_bin()).args(["upgrade", "--check", "job.sql"]).current_dir(&dir).output();
        let check = check.expect("weir upgrade --check");
        let said = String::from_utf8_lossy(&check.stdout);
        assert_eq!(
            check.status.code(),
            Some(0),
            "{}: {said}{}",
            fixture.display(),
            String::from_utf8_lossy(&check.stderr)
        );
        assert!(said.contains("the job can start on it") && !said.contains("refused"), "{said}");
        let v1 = fixture.ends_with("checkpoint-v1");
        assert_eq!(said.contains("format version 1, written by an earlier Weir"), v1, "{}: {said}", fixture.display());
        let changes = run(&dir, &job);
        for table in ["windows", "joined"] {
            let (got, want) = (published(&dir.join("out").join(table)), published(&reference.join("out").join(table)));
            assert_eq!(got.len(), want.len(), "{}: rows of {table}", fixture.display());
            assert!(got == want, "{}: {table} differs from a run never interrupted", fixture.display());
        }
        // The restored ranking went on from the checkpoint's: its first changes take back
        // rows of the restored state, and it ends where the uninterrupted run ends.
        assert!(changes.first().is_some_and(|c| c.starts_with("-U[")), "{}: {changes:?}", fixture.display());
        assert_eq!(ranking(&changes), want_top, "{}: the final ranking", fixture.display());
        let _ = std::fs::remove_dir_all(&dir);
    }
    for (reference, _) in references.values() {
        let _ = std::fs::remove_dir_all(reference);
    }
}

/// The manifest of checkpoint 1 of the current job, killed while its file sinks commit it.
fn take_checkpoint(dir: &Path) -> serde_json::Value {
    std::fs::write(dir.join("job.sql"), job_now()).expect("write the job");
    let faults = dir.join("faults");
    std::fs::create_dir_all(&faults).expect("fault dir");
    let mut child = Command::new(weir_bin())
        .arg("run")
        .arg("job.sql")
        .current_dir(dir)
        .env("WEIR_FAULT_DIR", &faults)
        .env("WEIR_FAULT_FILE_COMMIT_MS", "60000")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start weir");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !faults.join("file_commit").exists() {
        assert!(Instant::now() < deadline, "the job never committed a checkpoint");
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    manifest(dir)
}

/// Checkpoint 1's manifest in a job's directory.
fn manifest(dir: &Path) -> serde_json::Value {
    let job = std::fs::read_dir(dir.join("checkpoints"))
        .expect("checkpoints")
        .flatten()
        .find(|e| e.path().is_dir())
        .expect("the job's checkpoints")
        .path();
    let text = std::fs::read_to_string(job.join("chk-0000000001").join("manifest.json")).expect("checkpoint 1");
    serde_json::from_str(&text).expect("a manifest")
}

/// What a manifest's layout is: its fields, the parts of the plan, and which state each
/// task's files hold (not their sizes, nor the shared files' names).
fn layout(manifest: &serde_json::Value) -> Vec<String> {
    let mut out: Vec<String> = manifest.as_object().expect("an object").keys().map(|k| format!("field {k}")).collect();
    for part in manifest["parts"].as_array().into_iter().flatten() {
        out.push(format!("part {} {} {} state {}", part["id"], part["slot"], part["name"], part["has_state"]));
    }
    for file in manifest["files"].as_array().into_iter().flatten() {
        let fields: Vec<&String> = file.as_object().expect("an entry").keys().collect();
        out.push(format!("file {} {} {} {} {fields:?}", file["task"], file["part"], file["operator"], file["id"]));
    }
    out.push(format!("version {} layout {}", manifest["version"], manifest["layout"]));
    out.sort();
    out
}

/// A change to how checkpoints are written without a new format version fails here: a fresh
/// checkpoint of the current job has the layout of the fixture of its version (the same
/// fields, parts and ids: ids hash each operator's state shape).
#[test]
fn a_fresh_checkpoint_has_the_layout_of_its_versions_fixture() {
    let dir = crate::slt::tempdir();
    let fresh = take_checkpoint(&dir);
    let version = fresh["version"].as_u64().expect("a versioned manifest");
    let fixture = fixtures().join(format!("checkpoint-v{version}"));
    assert!(fixture.exists(), "format version {version} has no fixture: run fixture::make_checkpoint_fixture");
    assert_eq!(job_of(&fixture), job_now(), "the fixture of version {version} ran another job");
    let (got, want) = (layout(&fresh), layout(&manifest(&fixture)));
    assert!(
        got == want,
        "checkpoints are written differently from the fixture of version {version}: bump the format version \
         and add a fixture.\nonly now: {:?}\nonly in the fixture: {:?}",
        got.iter().filter(|l| !want.contains(l)).collect::<Vec<_>>(),
        want.iter().filter(|l| !got.contains(l)).collect::<Vec<_>>()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes `tests/fixtures/checkpoint-v<N>/` for the current format version: the job killed
/// while its file sinks commit checkpoint 1. Run when a version is bumped:
/// `cargo test -p weir-cli --test it fixture::make -- --ignored`.
#[test]
#[ignore]
fn make_checkpoint_fixture() {
    let dir = crate::slt::tempdir();
    let version = take_checkpoint(&dir)["version"].as_u64().expect("a versioned manifest");
    let target = fixtures().join(format!("checkpoint-v{version}"));
    let _ = std::fs::remove_dir_all(&target);
    for part in ["checkpoints", "out"] {
        copy_dir(&dir.join(part), &target.join(part));
    }
    std::fs::write(target.join("job.sql"), job_now()).expect("the fixture's job");
    println!("wrote {}", target.display());
    let _ = std::fs::remove_dir_all(&dir);
}

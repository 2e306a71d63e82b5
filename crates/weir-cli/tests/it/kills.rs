//! Killing `weir run` processes in chosen phases, for the crash tests of the transactional
//! sinks.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where a kill lands, for a sink that commits with checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Reading, computing, writing uncommitted output.
    Processing,
    /// While a checkpoint's RocksDB files are uploaded, with the job processing on.
    Uploading,
    /// After the sinks pre-committed and before the checkpoint's manifest exists.
    PreCommitted,
    /// After the checkpoint completed and before the sinks committed (published) its output.
    Committing,
    /// Between one sink transaction's commit and the next (a sink with a hook there).
    DuringCommit,
    /// While a restarted job finishes the commits of the checkpoint it restores.
    Restoring,
}

pub const PHASES: [Phase; 4] = [Phase::Processing, Phase::PreCommitted, Phase::Committing, Phase::Restoring];

/// `weir run sql`, slowed down in `phase` through the fault hooks of `sink` (`kafka`, `file`).
pub fn start(sql: &Path, phase: Phase, faults: &Path, sink: &str) -> Child {
    let _ = std::fs::remove_dir_all(faults);
    std::fs::create_dir_all(faults).expect("fault dir");
    let mut cmd = Command::new(crate::weir_bin());
    cmd.arg("run").arg(sql).stdout(Stdio::null()).stderr(Stdio::null()).env("WEIR_FAULT_DIR", faults);
    let sink = sink.to_uppercase();
    match phase {
        Phase::Processing => &mut cmd,
        Phase::Uploading => cmd.env("WEIR_FAULT_UPLOAD_MS", "300"),
        Phase::PreCommitted => cmd.env("WEIR_FAULT_MANIFEST_MS", "300"),
        Phase::Committing => cmd.env(format!("WEIR_FAULT_{sink}_COMMIT_MS"), "300"),
        Phase::DuringCommit => cmd.env(format!("WEIR_FAULT_{sink}_COMMITTED_MS"), "300"),
        Phase::Restoring => cmd.env(format!("WEIR_FAULT_{sink}_RESTORE_MS"), "300"),
    };
    cmd.spawn().expect("start weir")
}

/// Whether the process started by [`start`] is in `phase` now.
pub fn in_phase(phase: Phase, faults: &Path, sink: &str) -> bool {
    match phase {
        Phase::Processing => false,
        Phase::Uploading => faults.join("upload").exists(),
        Phase::PreCommitted => faults.join("manifest").exists(),
        Phase::Committing => faults.join(format!("{sink}_commit")).exists(),
        Phase::DuringCommit => faults.join(format!("{sink}_committed")).exists(),
        Phase::Restoring => faults.join(format!("{sink}_restore")).exists(),
    }
}

/// `weir run sql` killed at least 3 times in each of [`PHASES`] and `total` times in all, its
/// commits slowed through the fault hooks of `sink`.
pub fn kill_in_every_phase(sql: &Path, faults: &Path, sink: &str, total: u32) -> BTreeMap<Phase, u32> {
    kill_in_phases(
        &PHASES,
        Phase::Processing,
        3,
        total,
        |phase| start(sql, phase, faults, sink),
        |phase| in_phase(phase, faults, sink),
    )
}

/// Start a process for each phase in turn and SIGKILL it: for `random`, at a random moment
/// early in the run; for the others, as soon as `in_phase` says the process is there (the
/// process is started with that phase slowed down). Goes on until every phase has at least
/// `each` kills and there are `total` in all. Returns the kills per phase; a run that ends on
/// its own must succeed.
pub fn kill_in_phases<P: Copy + Ord + Debug>(
    phases: &[P],
    random: P,
    each: u32,
    total: u32,
    start: impl Fn(P) -> Child,
    in_phase: impl Fn(P) -> bool,
) -> BTreeMap<P, u32> {
    let seed =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(7);
    kill_in_phases_seeded(phases, random, 100..700, seed, each, total, start, in_phase)
}

/// [`kill_in_phases`] with the random kills `random_ms` after the start, drawn from `seed`.
#[allow(clippy::too_many_arguments)]
pub fn kill_in_phases_seeded<P: Copy + Ord + Debug>(
    phases: &[P],
    random: P,
    random_ms: std::ops::Range<u64>,
    mut seed: u64,
    each: u32,
    total: u32,
    start: impl Fn(P) -> Child,
    in_phase: impl Fn(P) -> bool,
) -> BTreeMap<P, u32> {
    println!("random seed {seed}");
    let mut next = move |below: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % below
    };
    let mut kills: BTreeMap<P, u32> = BTreeMap::new();
    let enough = |kills: &BTreeMap<P, u32>| {
        kills.values().sum::<u32>() >= total && phases.iter().all(|p| kills.get(p).copied().unwrap_or(0) >= each)
    };
    let (mut round, mut finished) = (0, 0);
    while !enough(&kills) && round < 80 {
        let phase = phases[round % phases.len()];
        round += 1;
        let mut child = start(phase);
        let wait = if phase == random { random_ms.start + next(random_ms.end - random_ms.start) } else { 4000 };
        let deadline = Instant::now() + Duration::from_millis(wait);
        while Instant::now() < deadline && child.try_wait().expect("poll").is_none() && !in_phase(phase) {
            std::thread::sleep(Duration::from_millis(2));
        }
        let caught = phase == random || in_phase(phase);
        if child.try_wait().expect("poll").is_none() {
            child.kill().expect("SIGKILL");
            child.wait().expect("reap");
            if caught {
                *kills.entry(phase).or_default() += 1;
            }
        } else {
            finished += 1;
            assert!(child.wait().expect("reap").success(), "a run failed on its own in round {round}");
        }
    }
    println!("kills per phase: {kills:?}; {finished} runs ended on their own, {round} rounds");
    assert!(enough(&kills), "not enough kills ({each} in each phase, {total} in all): {kills:?}");
    kills
}

/// A crash-tested run's rows against an uninterrupted run's: none twice (the rows of these
/// jobs are distinct, so a repeated one was written twice), none missing, in the same order.
pub fn assert_same_rows(got: &[String], want: &[String]) {
    let mut distinct = got.to_vec();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), got.len(), "duplicates in the output");
    assert_eq!(got.len(), want.len(), "row count differs from the uninterrupted run");
    assert!(got == want, "rows differ from the uninterrupted run");
}

/// The published rows of a table directory, sorted (hidden files are not published).
pub fn published(table: &Path) -> Vec<String> {
    let mut rows = Vec::new();
    for entry in std::fs::read_dir(table).expect("list table") {
        let path = entry.expect("entry").path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if path.is_file() && !name.starts_with('.') && !name.starts_with('_') {
            rows.extend(std::fs::read_to_string(&path).expect("read file").lines().map(str::to_string));
        }
    }
    rows.sort();
    rows
}

/// A crash test of a job into file sinks: `job(dir, name, parallelism)` writes its tables
/// under `dir/name` and its checkpoints in `dir/name-checkpoints`. An uninterrupted run at
/// parallelism 1 (`reference`), then a run at parallelism 2 (`out`) killed with SIGKILL 3
/// times in each phase of the file sinks' commit (12 in all) and restarted each time, then
/// run to its end. Returns both runs' directories.
pub fn file_job_under_kills(dir: &Path, job: impl Fn(&Path, &str, u32) -> String) -> (PathBuf, PathBuf) {
    let reference = dir.join("reference.sql");
    std::fs::write(&reference, job(dir, "reference", 1)).expect("sql");
    let run = Command::new(crate::weir_bin()).arg("run").arg(&reference).output().expect("reference run");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let sql = dir.join("job.sql");
    std::fs::write(&sql, job(dir, "out", 2)).expect("sql");
    let faults = dir.join("faults");
    kill_in_phases(
        &PHASES,
        Phase::Processing,
        3,
        12,
        |phase| start(&sql, phase, &faults, "file"),
        |phase| in_phase(phase, &faults, "file"),
    );
    let last = Command::new(crate::weir_bin()).arg("run").arg(&sql).output().expect("final run");
    assert!(last.status.success(), "{}", String::from_utf8_lossy(&last.stderr));
    (dir.join("reference"), dir.join("out"))
}

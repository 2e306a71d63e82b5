//! Runs of the file as child processes (the program again, [`super::child`]), and crashes: SIGKILL in each phase of a
//! checkpoint and its commits, found through the fault hooks (`weir_core::fault`) that slow
//! a process down in that phase and mark it with a file.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use weir::scratch::Scratch;

/// Where a kill lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Reading, computing, writing uncommitted output: at a random moment.
    Processing,
    /// After the sinks pre-committed, before the checkpoint is complete.
    PreCommitted,
    /// After the checkpoint completed, before the sinks committed its output.
    Committing,
    /// Between one sink's commit and the next task's.
    BetweenCommits,
    /// While a restarted run finishes the commits of the checkpoint it restores.
    Restoring,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Processing => "processing",
            Phase::PreCommitted => "pre-committed",
            Phase::Committing => "committing",
            Phase::BetweenCommits => "between commits",
            Phase::Restoring => "restoring",
        }
    }
}

/// How long a hooked phase lasts, so that it can be caught.
const HOLD_MS: &str = "300";

/// One run of the file into one scratch copy.
pub struct Runner {
    pub file: PathBuf,
    /// The program a run is (it calls `verify::child` first) and its arguments.
    pub command: Vec<std::ffi::OsString>,
    pub scratch: Scratch,
    /// The fault hooks of the file's sinks: `file`, `kafka`, `postgres`.
    pub hooks: Vec<&'static str>,
    /// Each run starts on an empty copy: consoles of a job without checkpoints, whose run
    /// after a crash starts over (a console keeps nothing of the attempt before).
    pub fresh_each_run: bool,
}

/// How a child run ended.
pub enum Ended {
    Finished,
    Failed(String),
    Killed,
}

impl Runner {
    fn faults(&self) -> PathBuf {
        self.scratch.dir.join("faults")
    }

    fn spec(&self) -> PathBuf {
        self.scratch.dir.join("scratch.txt")
    }

    fn log(&self) -> PathBuf {
        self.scratch.dir.join("weir.log")
    }

    /// Start `weir run` on the file, slowed down in `phase`.
    fn start(&self, phase: Option<Phase>) -> std::io::Result<Child> {
        std::fs::create_dir_all(&self.scratch.dir)?;
        if self.fresh_each_run {
            let _ = std::fs::remove_dir_all(self.scratch.tables_dir());
        }
        std::fs::write(self.spec(), self.scratch.to_text())?;
        let _ = std::fs::remove_dir_all(self.faults());
        std::fs::create_dir_all(self.faults())?;
        let log = std::fs::File::create(self.log())?;
        let (program, args) = self
            .command
            .split_first()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no program to run"))?;
        let mut cmd = Command::new(program);
        cmd.args(args).env(super::child::SCRATCH, self.spec()).env(super::child::FILE, &self.file);
        cmd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log).env("WEIR_FAULT_DIR", self.faults());
        let hook = |cmd: &mut Command, suffix: &str| {
            for h in &self.hooks {
                cmd.env(format!("WEIR_FAULT_{}_{suffix}_MS", h.to_uppercase()), HOLD_MS);
            }
        };
        match phase {
            None | Some(Phase::Processing) => {}
            Some(Phase::PreCommitted) => {
                cmd.env("WEIR_FAULT_MANIFEST_MS", HOLD_MS);
            }
            Some(Phase::Committing) => hook(&mut cmd, "COMMIT"),
            Some(Phase::BetweenCommits) => hook(&mut cmd, "COMMITTED"),
            Some(Phase::Restoring) => hook(&mut cmd, "RESTORE"),
        }
        cmd.spawn()
    }

    fn in_phase(&self, phase: Phase) -> bool {
        let marked = |suffix: &str| self.hooks.iter().any(|h| self.faults().join(format!("{h}_{suffix}")).exists());
        match phase {
            Phase::Processing => false,
            Phase::PreCommitted => self.faults().join("manifest").exists(),
            Phase::Committing => marked("commit"),
            Phase::BetweenCommits => marked("committed"),
            Phase::Restoring => marked("restore"),
        }
    }

    /// The last lines the run wrote, for an error.
    fn tail(&self) -> String {
        let text = std::fs::read_to_string(self.log()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(8)..].join("\n")
    }

    /// Run to the end, or fail after `limit`.
    pub fn run(&self, limit: Duration) -> Result<(), String> {
        match self.run_in(None, Some(limit), |_| false) {
            Ended::Finished => Ok(()),
            Ended::Failed(e) => Err(e),
            // Never asked to: a run past its limit is `Failed`.
            Ended::Killed => Err("the run was killed".into()),
        }
    }

    /// Run in `phase` until `kill_now` says so (SIGKILL), the run ends, or `limit` passes.
    fn run_in(&self, phase: Option<Phase>, limit: Option<Duration>, kill_now: impl Fn(Duration) -> bool) -> Ended {
        let mut child = match self.start(phase) {
            Ok(c) => c,
            Err(e) => return Ended::Failed(format!("cannot start the run: {e}")),
        };
        let started = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => return Ended::Finished,
                Ok(Some(status)) => return Ended::Failed(format!("the run failed ({status}):\n{}", self.tail())),
                Ok(None) => {}
                Err(e) => return Ended::Failed(format!("cannot watch the run: {e}")),
            }
            let timed_out = limit.is_some_and(|l| started.elapsed() > l);
            if kill_now(started.elapsed()) || timed_out {
                let _ = child.kill();
                let _ = child.wait();
                if timed_out {
                    return Ended::Failed(format!(
                        "the run did not end within {:.0}s (an unbounded source?):\n{}",
                        limit.unwrap_or_default().as_secs_f64(),
                        self.tail()
                    ));
                }
                return Ended::Killed;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Crashes landed, by phase, and the phases that were never reached.
#[derive(Debug, Default)]
pub struct Crashes {
    pub by_phase: BTreeMap<Phase, u32>,
    pub unreached: Vec<Phase>,
}

impl Crashes {
    pub fn total(&self) -> u32 {
        self.by_phase.values().sum()
    }

    /// "20 crashes in 5 phases (processing 4, …)".
    pub fn describe(&self) -> String {
        let phases: Vec<String> = self.by_phase.iter().map(|(p, n)| format!("{} {n}", p.name())).collect();
        let total = self.total();
        format!(
            "{total} crash{} in {} phase{}{}",
            if total == 1 { "" } else { "es" },
            self.by_phase.len(),
            if self.by_phase.len() == 1 { "" } else { "s" },
            if phases.is_empty() { String::new() } else { format!(" ({})", phases.join(", ")) }
        )
    }
}

/// Crashes to inject, over one or more runs of the file.
pub struct Plan {
    /// Phases still tried, in turn.
    pub live: Vec<Phase>,
    pub wanted: u32,
    /// How long a run without crashes took: random kills land within it.
    pub typical: Duration,
    pub crashes: Crashes,
    misses: BTreeMap<Phase, u32>,
    round: usize,
    seed: u64,
}

impl Plan {
    pub fn new(phases: &[Phase], wanted: u32, typical: Duration, seed: u64) -> Self {
        Plan {
            live: phases.to_vec(),
            wanted,
            typical,
            crashes: Crashes::default(),
            misses: BTreeMap::new(),
            round: 0,
            seed: seed | 1,
        }
    }

    fn random(&mut self, below: u64) -> u64 {
        self.seed = self.seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.seed >> 33) % below.max(1)
    }

    pub fn done(&self) -> bool {
        self.crashes.total() >= self.wanted || self.live.is_empty()
    }

    /// Kill runs of `runner`'s file, the phases in turn, each run resuming from the
    /// checkpoints the earlier ones left, until enough crashes have landed (`false`) or a
    /// run ends on its own before its phase came (`true`: its output is complete, and
    /// further crashes need a new scratch copy). A phase missed twice is left out.
    pub fn inject(&mut self, runner: &Runner) -> Result<bool, String> {
        let limit = (self.typical * 20).max(Duration::from_secs(60));
        while !self.done() && self.round < 8 * self.wanted as usize + 8 {
            let phase = self.live[self.round % self.live.len()];
            self.round += 1;
            let started = Instant::now();
            let ended = if phase == Phase::Processing {
                let span = (self.typical.as_millis() as u64 * 9 / 10).max(5);
                let at = Duration::from_millis(2 + self.random(span));
                runner.run_in(Some(phase), Some(limit), |elapsed| elapsed >= at)
            } else {
                runner.run_in(Some(phase), Some(limit), |_| runner.in_phase(phase))
            };
            if matches!(ended, Ended::Finished) && phase == Phase::Processing {
                // Runs are shorter than the first one was (a restart has less left, or the
                // machine is less busy): kill sooner.
                self.typical = self.typical.min(started.elapsed());
            }
            match ended {
                Ended::Killed => *self.crashes.by_phase.entry(phase).or_default() += 1,
                Ended::Failed(e) => return Err(e),
                Ended::Finished => {
                    let misses = self.misses.entry(phase).or_default();
                    *misses += 1;
                    if *misses >= 2 && phase != Phase::Processing && !self.crashes.by_phase.contains_key(&phase) {
                        self.live.retain(|p| *p != phase);
                        self.crashes.unreached.push(phase);
                    }
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }
}

//! The jobs an endpoint shows, and their rates: the counters are totals, and a sampler turns
//! them into per-second figures once a second while the endpoint runs (nothing is sampled
//! when nobody serves them).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir_runtime::{JobHandle, JobStatus};

/// A job as its watchers see it: its handle and what `EXPLAIN INSERT` says it guarantees.
#[derive(Clone)]
pub struct Watched {
    /// Its id on the endpoint: the order it was added in, from 1 (an engine's jobs keep
    /// their own ids; a worker's tasks, each a job, get theirs here).
    pub id: u64,
    pub handle: JobHandle,
    /// The effective guarantee in a word or two (`SHOW JOBS`).
    pub delivered: String,
    /// The guarantee report, line by line, as `EXPLAIN INSERT` prints it.
    pub guarantee: Vec<String>,
}

/// The jobs of one process that its endpoint serves. Cloning gives another handle to the
/// same list: the engine (or a worker) adds jobs, the endpoint reads them.
#[derive(Clone, Default)]
pub struct Jobs {
    list: Arc<Mutex<Vec<Watched>>>,
    rates: Arc<Mutex<Rates>>,
}

/// Per-second figures of one operator task over the last sampling interval.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rate {
    pub records_in: f64,
    pub records_out: f64,
    /// Milliseconds per second (0 to 1000), as Flink's `busyTimeMsPerSecond`.
    pub busy_ms: f64,
    pub backpressured_ms: f64,
}

#[derive(Default)]
struct Rates {
    /// By job id and operator task name: the last sample's counters and when it was taken.
    last: HashMap<(u64, String), (Instant, [u64; 4])>,
    rates: HashMap<(u64, String), Rate>,
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Jobs({})", self.list.lock().map(|l| l.len()).unwrap_or(0))
    }
}

impl Jobs {
    /// Show `handle` with its guarantee (see [`Watched`]); returns its id here.
    pub fn add(&self, handle: JobHandle, delivered: String, guarantee: Vec<String>) -> u64 {
        let Ok(mut list) = self.list.lock() else { return 0 };
        let id = list.len() as u64 + 1;
        list.push(Watched { id, handle, delivered, guarantee });
        id
    }

    pub fn all(&self) -> Vec<Watched> {
        self.list.lock().map(|l| l.clone()).unwrap_or_default()
    }

    pub fn get(&self, id: u64) -> Option<Watched> {
        self.list.lock().ok()?.iter().find(|j| j.id == id).cloned()
    }

    /// The last rates of operator task `name` of job `job` (zero before two samples).
    pub fn rate(&self, job: u64, name: &str) -> Rate {
        self.rates.lock().ok().and_then(|r| r.rates.get(&(job, name.to_string())).copied()).unwrap_or_default()
    }

    /// Take one sample of every job's counters.
    pub fn sample(&self) {
        let statuses: Vec<(u64, JobStatus)> = self.all().iter().map(|j| (j.id, j.handle.status())).collect();
        let now = Instant::now();
        let Ok(mut rates) = self.rates.lock() else { return };
        let Rates { last, rates } = &mut *rates;
        for (id, status) in &statuses {
            for op in &status.operators {
                let key = (*id, op.name.clone());
                let counters = [op.rows_in, op.rows_out, op.busy_nanos, op.backpressure_nanos];
                if let Some((at, before)) = last.get(&key) {
                    let secs = now.duration_since(*at).as_secs_f64();
                    if secs > 0.0 {
                        // A restart starts the counters again: no negative rates.
                        let per_second = |i: usize| counters[i].saturating_sub(before[i]) as f64 / secs;
                        rates.insert(
                            key.clone(),
                            Rate {
                                records_in: per_second(0),
                                records_out: per_second(1),
                                busy_ms: (per_second(2) / 1e6).min(1000.0),
                                backpressured_ms: (per_second(3) / 1e6).min(1000.0),
                            },
                        );
                    }
                }
                last.insert(key, (now, counters));
            }
        }
    }

    /// Sample every `interval` until the returned task is aborted.
    pub(crate) fn sampler(&self, interval: Duration) -> tokio::task::JoinHandle<()> {
        let jobs = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                jobs.sample();
            }
        })
    }
}

/// Milliseconds since the Unix epoch: watermark lag is measured against the wall clock, as
/// Flink's is.
pub(crate) fn now_ms() -> i64 {
    weir_runtime::checkpoint::now_ms() as i64
}

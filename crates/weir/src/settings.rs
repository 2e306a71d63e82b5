//! `SET 'key' = 'value'`: the settings a session knows. An unknown key is an error, not
//! silently ignored, so that a typo cannot change nothing. Flink's keys for the same settings
//! are taken too ([`FLINK_KEYS`]), so that a Flink job's `SET` statements run unchanged.

use std::collections::BTreeMap;

use weir_core::{parse_duration, Location, Result, WeirError};

/// Known settings: key, default, description.
pub const SETTINGS: &[(&str, &str, &str)] = &[
    ("parallelism", "", "tasks per operator of the next job (default: the number of cores)"),
    (
        "source.idle-timeout",
        "0",
        "a source task with no data for this long (e.g. '5s') stops holding back watermarks; 0: never",
    ),
    ("checkpoint.interval", "0", "take a checkpoint this often (e.g. '10s'); 0: no checkpoints"),
    (
        "checkpoint.dir",
        "",
        "where checkpoints are kept: a local directory (or file://), or an object store (s3://bucket/path, \
         s3a://, gs://, az://); each job uses <dir>/<job name>",
    ),
    ("checkpoint.mode", "exactly-once", "'exactly-once' (aligned barriers) or 'at-least-once'"),
    ("checkpoint.timeout", "10min", "a checkpoint not complete after this long is abandoned"),
    ("checkpoint.retained", "3", "completed checkpoints kept"),
    (
        "checkpoint.tolerable-failures",
        "10",
        "checkpoints that may fail in a row (a store down, a timeout) before the job fails and restarts from its \
         latest checkpoint (Flink's default is 0)",
    ),
    (
        "state.backend.local-recovery",
        "true",
        "with checkpoints in an object store: keep a local copy of the state files uploaded, so that a restart \
         on this machine downloads only what the copy lacks",
    ),
    (
        "rest.port",
        "",
        "serve metrics (/metrics), the REST API and the dashboard on this port (Flink's key); empty: off",
    ),
    ("rest.bind-address", "127.0.0.1", "the address the web endpoint listens on (loopback unless told)"),
    (
        "execution.savepoint.ignore-unclaimed-state",
        "false",
        "'true': a job restored from a checkpoint drops the state of operators its SQL no longer has, instead of \
         refusing to start",
    ),
    (
        "execution.savepoint.rebuild",
        "changed",
        "what a job started on a checkpoint of other SQL rebuilds by reading its sources again: 'changed' (the \
         operators whose state cannot be carried over) or 'all' (every stateful operator, on every start on a \
         checkpoint: its output from the cut-over on is that of its SQL run from scratch)",
    ),
    (
        "state.savepoints.dir",
        "",
        "where STOP JOB … WITH SAVEPOINT writes savepoints: a local directory or an object store, as \
         'checkpoint.dir'",
    ),
    (
        "execution.savepoint.path",
        "",
        "a savepoint (or a job's checkpoint directory) that the next job started restores from, once; \
         `weir run --from-savepoint` sets it",
    ),
    (
        "state.backend",
        "memory",
        "where window state lives: 'memory' or 'rocksdb' (state larger than memory, incremental checkpoints)",
    ),
    ("state.dir", "", "local working directory of RocksDB state (default: the system's temporary directory)"),
    ("restart.attempts", "3", "a checkpointed job that fails restarts from its latest checkpoint this many times"),
    ("restart.backoff", "1s", "wait before the first restart; doubles each time, up to a minute"),
    ("pipeline.name", "", "name of the next job started by INSERT (default: insert-into-<table>)"),
    (
        "pipeline.max-parallelism",
        "128",
        "key groups of keyed state: the highest parallelism a job's checkpoints can be restored at",
    ),
    ("table.dml-sync", "false", "'true': INSERT waits until its job has finished"),
    (
        "workers.session-timeout",
        "10s",
        "`weir worker`: a worker that the Kafka group has not heard from for this long is taken as dead, and \
         its tasks move (the broker's group.min.session.timeout.ms bounds it)",
    ),
    (
        "table.exec.state.ttl",
        "0",
        "a group aggregate's key is forgotten once the watermark has passed its last update by this much \
         (event time, e.g. '1h'); 0: kept forever",
    ),
    (
        "sql-client.execution.result-mode",
        "table",
        "how the shell shows an updating query's results: 'table' (kept up to date in place) or \
         'changelog' (every change as it comes, its op first; 'tableau' is the same)",
    ),
    (
        "table.local-time-zone",
        "UTC",
        "the session's time zone; Weir's is UTC (TIMESTAMP_LTZ values, CURRENT_TIMESTAMP and the like are \
         shown and computed in it), and other zones are refused",
    ),
    (
        "execution.allow-nondeterminism",
        "false",
        "'true': start an exactly-once job even where a value that depends on when it runs (PROCTIME(), NOW(), \
         RANDOM()) decides rows, groups or order (EXPLAIN INSERT lists where)",
    ),
];

/// The object stores' settings (`s3.access-key`…), in `weir_storage::options`.
fn storage_keys() -> impl Iterator<Item = &'static str> {
    weir_storage::options::SETTINGS.iter().map(|(k, _, _, _)| *k)
}

fn known(key: &str) -> bool {
    SETTINGS.iter().any(|(k, _, _)| *k == key) || storage_keys().any(|k| k == key)
}

/// Flink's keys for Weir's settings, as a Flink job's `SET` statements write them: each
/// becomes Weir's key, its value translated where Flink spells it otherwise.
const FLINK_KEYS: &[(&str, &str)] = &[
    ("execution.checkpointing.interval", "checkpoint.interval"),
    ("execution.checkpointing.mode", "checkpoint.mode"),
    ("execution.checkpointing.timeout", "checkpoint.timeout"),
    ("execution.checkpointing.dir", "checkpoint.dir"),
    ("state.checkpoints.dir", "checkpoint.dir"),
    ("execution.checkpointing.num-retained", "checkpoint.retained"),
    ("state.checkpoints.num-retained", "checkpoint.retained"),
    ("execution.checkpointing.tolerable-failed-checkpoints", "checkpoint.tolerable-failures"),
    ("parallelism.default", "parallelism"),
    ("state.backend.type", "state.backend"),
    ("table.exec.source.idle-timeout", "source.idle-timeout"),
    ("restart-strategy.fixed-delay.attempts", "restart.attempts"),
    ("restart-strategy.fixed-delay.delay", "restart.backoff"),
];

/// Flink keys Weir takes without a setting of its own: what they ask for is how Weir runs
/// anyway (it always works in batches, always streams), so they change nothing.
const FLINK_NO_OPS: &[(&str, &str)] = &[
    ("execution.runtime-mode", "streaming"),
    ("table.exec.mini-batch.enabled", ""),
    ("table.exec.mini-batch.allow-latency", ""),
    ("table.exec.mini-batch.size", ""),
    ("restart-strategy.type", "fixed-delay"),
];

/// Weir's key and value for a key and value a Flink script may give.
fn from_flink(key: &str, value: &str, at: Option<Location>) -> Result<Option<(String, String)>> {
    if let Some((_, expected)) = FLINK_NO_OPS.iter().find(|(k, _)| *k == key) {
        if !expected.is_empty() && !value.eq_ignore_ascii_case(expected) {
            return Err(WeirError::not_supported(format!("'{key}' = '{value}': Weir runs '{expected}' only")).at(at));
        }
        log::info!("'{key}' is how Weir runs anyway: nothing to change");
        return Ok(None);
    }
    let Some((_, weir)) = FLINK_KEYS.iter().find(|(k, _)| *k == key) else {
        return Ok(Some((key.to_string(), value.to_string())));
    };
    let value = match *weir {
        "checkpoint.mode" => value.to_ascii_lowercase().replace('_', "-"),
        "state.backend" if value.eq_ignore_ascii_case("hashmap") => "memory".to_string(),
        "checkpoint.dir" => value.strip_prefix("file://").unwrap_or(value).to_string(),
        _ => value.to_string(),
    };
    Ok(Some((weir.to_string(), value)))
}

/// Weir's key for a key a Flink script may give (for `RESET`).
pub fn weir_key(key: &str) -> &str {
    FLINK_KEYS.iter().find(|(k, _)| *k == key).map_or(key, |(_, w)| w)
}

#[derive(Debug, Clone, Default)]
pub struct Settings {
    values: BTreeMap<String, String>,
    /// Values that `SET` and `RESET` do not change (a `weir verify` run's scratch settings).
    pinned: BTreeMap<String, String>,
}

impl Settings {
    pub fn set(&mut self, key: &str, value: &str, at: Option<Location>) -> Result<()> {
        let Some((key, value)) = from_flink(key, value, at)? else { return Ok(()) };
        let (key, value) = (key.as_str(), value.as_str());
        if !known(key) {
            let known: Vec<_> = SETTINGS.iter().map(|(k, _, _)| *k).chain(storage_keys()).collect();
            return Err(WeirError::user(format!("unknown setting '{key}'; settings are: {}", known.join(", "))).at(at));
        }
        if key == "table.dml-sync" && !matches!(value, "true" | "false") {
            return Err(WeirError::user(format!("setting '{key}' must be 'true' or 'false', not '{value}'")).at(at));
        }
        if key == "table.local-time-zone" && !matches!(value, "UTC" | "Z" | "GMT" | "Etc/UTC") {
            return Err(WeirError::not_supported(format!(
                "'table.local-time-zone' = '{value}': Weir's session zone is UTC (CONVERT_TZ converts between zones)"
            ))
            .at(at));
        }
        if key == "parallelism" && !matches!(value.parse::<usize>(), Ok(1..=1024)) {
            return Err(WeirError::user(format!(
                "setting 'parallelism' must be a number from 1 to 1024, not '{value}'"
            ))
            .at(at));
        }
        if key == "state.backend" && !matches!(value, "memory" | "rocksdb") {
            return Err(WeirError::user(format!(
                "setting 'state.backend' must be 'memory' or 'rocksdb', not '{value}'"
            ))
            .at(at));
        }
        if key == "pipeline.max-parallelism" && !matches!(value.parse::<u16>(), Ok(1..=32768)) {
            return Err(WeirError::user(format!(
                "setting 'pipeline.max-parallelism' must be a number from 1 to 32768, not '{value}'"
            ))
            .at(at));
        }
        if key == "rest.port" && value.parse::<u16>().is_err() {
            return Err(WeirError::user(format!("setting 'rest.port' must be a port number, not '{value}'")).at(at));
        }
        if key == "checkpoint.dir" && value.contains("://") {
            // The scheme is checked here; the store itself when a job starts.
            weir_storage::check_scheme(value).map_err(|why| WeirError::user(format!("'{key}': {why}")).at(at))?;
        }
        if key == "state.backend.local-recovery" && !matches!(value, "true" | "false") {
            return Err(WeirError::user(format!("setting '{key}' must be 'true' or 'false', not '{value}'")).at(at));
        }
        if matches!(key, "restart.attempts" | "checkpoint.tolerable-failures") && value.parse::<u32>().is_err() {
            return Err(WeirError::user(format!("setting '{key}' must be a whole number, not '{value}'")).at(at));
        }
        if matches!(
            key,
            "source.idle-timeout"
                | "checkpoint.interval"
                | "checkpoint.timeout"
                | "restart.backoff"
                | "table.exec.state.ttl"
        ) {
            parse_duration(value).map_err(|e| e.at(at))?;
        }
        if key == "checkpoint.mode" && !matches!(value, "exactly-once" | "at-least-once") {
            return Err(WeirError::user(format!(
                "setting 'checkpoint.mode' must be 'exactly-once' or 'at-least-once', not '{value}'"
            ))
            .at(at));
        }
        if key == "execution.savepoint.rebuild" && !matches!(value, "changed" | "all") {
            return Err(WeirError::user(format!("setting '{key}' must be 'changed' or 'all', not '{value}'")).at(at));
        }
        if key == "sql-client.execution.result-mode" && !matches!(value, "table" | "changelog" | "tableau") {
            return Err(WeirError::user(format!(
                "setting '{key}' must be 'table', 'changelog' or 'tableau', not '{value}'"
            ))
            .at(at));
        }
        if key == "checkpoint.retained" && !matches!(value.parse::<usize>(), Ok(1..)) {
            return Err(WeirError::user(format!(
                "setting 'checkpoint.retained' must be a number of at least 1, not '{value}'"
            ))
            .at(at));
        }
        if !self.pinned.contains_key(key) {
            self.values.insert(key.to_string(), value.to_string());
        }
        Ok(())
    }

    /// Fix a setting to `value` whatever the statements that follow set.
    pub fn pin(&mut self, key: &str, value: &str) {
        self.pinned.insert(key.to_string(), value.to_string());
        self.values.insert(key.to_string(), value.to_string());
    }

    pub fn reset(&mut self, key: Option<&str>) {
        match key {
            Some(k) => {
                self.values.remove(weir_key(k));
            }
            None => self.values.clear(),
        }
        self.values.extend(self.pinned.clone());
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str).filter(|v| !v.is_empty())
    }

    /// `'table.exec.state.ttl'`, if set to more than nothing.
    pub fn state_ttl(&self) -> Option<std::time::Duration> {
        parse_duration(&self.value("table.exec.state.ttl")).ok().filter(|d| !d.is_zero())
    }

    pub fn dml_sync(&self) -> bool {
        self.get("table.dml-sync") == Some("true")
    }

    /// How the next job runs.
    pub fn job_options(&self) -> weir_runtime::JobOptions {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        weir_runtime::JobOptions {
            parallelism: self.get("parallelism").and_then(|p| p.parse().ok()).unwrap_or(cores),
            idle_timeout: self.get("source.idle-timeout").and_then(|t| parse_duration(t).ok()).filter(|d| !d.is_zero()),
            restart_attempts: self.value("restart.attempts").parse().unwrap_or(3),
            restart_backoff: parse_duration(&self.value("restart.backoff"))
                .unwrap_or(std::time::Duration::from_secs(1)),
            key_groups: self
                .value("pipeline.max-parallelism")
                .parse()
                .ok()
                .and_then(|max| weir_runtime::KeyGroups::new(max).ok())
                .unwrap_or_default(),
            rocksdb: (self.value("state.backend") == "rocksdb").then(|| match self.get("state.dir") {
                Some(dir) => std::path::PathBuf::from(dir),
                None => std::env::temp_dir().join("weir-state"),
            }),
            ..Default::default()
        }
    }

    /// The value, or the default.
    pub fn value(&self, key: &str) -> String {
        self.get(key).map(str::to_string).unwrap_or_else(|| {
            SETTINGS.iter().find(|(k, _, _)| *k == key).map(|(_, d, _)| d.to_string()).unwrap_or_default()
        })
    }

    /// Checkpointing for a job named `job`, if `checkpoint.interval` and `checkpoint.dir` are set.
    pub fn checkpoint_config(
        &self,
        job: &str,
        mut plan: weir_runtime::checkpoint::PlanState,
    ) -> Result<Option<weir_runtime::checkpoint::CheckpointConfig>> {
        use weir_runtime::checkpoint::{CheckpointConfig, CheckpointMode};
        let interval = parse_duration(&self.value("checkpoint.interval"))?;
        if interval.is_zero() {
            return Ok(None);
        }
        let Some(dir) = self.get("checkpoint.dir") else {
            return Err(WeirError::user(
                "'checkpoint.interval' is set but 'checkpoint.dir' is not: SET 'checkpoint.dir' = '…'",
            ));
        };
        Ok(Some(CheckpointConfig {
            interval,
            storage: self.checkpoint_storage(&weir_storage::join(dir, job))?,
            tolerable_failures: self.value("checkpoint.tolerable-failures").parse().unwrap_or(10),
            mode: if self.value("checkpoint.mode") == "at-least-once" {
                CheckpointMode::AtLeastOnce
            } else {
                CheckpointMode::ExactlyOnce
            },
            timeout: parse_duration(&self.value("checkpoint.timeout"))?,
            retained: self.value("checkpoint.retained").parse().unwrap_or(3),
            plan: {
                plan.ignore_unclaimed = self.value("execution.savepoint.ignore-unclaimed-state") == "true";
                plan.rebuild_all = self.value("execution.savepoint.rebuild") == "all";
                plan
            },
        }))
    }

    /// The storage at `location` (a savepoint's), with this session's object-store settings.
    pub fn storage_at(&self, location: &str) -> Result<std::sync::Arc<dyn weir_storage::Storage>> {
        weir_storage::open(location, &self.values)
    }

    /// The storage of checkpoints at `location`, with a local copy of its state files where it
    /// is an object store (unless 'state.backend.local-recovery' is off).
    fn checkpoint_storage(&self, location: &str) -> Result<std::sync::Arc<dyn weir_storage::Storage>> {
        let storage = weir_storage::open(location, &self.values)?;
        if !weir_storage::is_remote(location) || self.value("state.backend.local-recovery") == "false" {
            return Ok(storage);
        }
        let root =
            self.get("state.dir").map_or_else(|| std::env::temp_dir().join("weir-state"), std::path::PathBuf::from);
        let copy = root.join("local-recovery").join(weir_runtime::checkpoint::fingerprint(location));
        Ok(std::sync::Arc::new(weir_storage::LocalRecovery::new(storage, copy)))
    }

    /// Every known setting with its current value; secrets masked.
    pub fn all(&self) -> Vec<(String, String)> {
        let defaults = SETTINGS.iter().map(|(k, d, _)| (*k, *d)).chain(storage_keys().map(|k| (k, "")));
        defaults
            .map(|(k, default)| {
                let value = self.values.get(k).cloned().unwrap_or_else(|| default.to_string());
                let shown =
                    if weir_storage::options::is_secret(k) && !value.is_empty() { "******".into() } else { value };
                (k.to_string(), shown)
            })
            .collect()
    }
}

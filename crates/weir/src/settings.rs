//! `SET 'key' = 'value'`: the settings a session knows. An unknown key is an error, not
//! silently ignored, so that a typo cannot change nothing.

use std::collections::BTreeMap;

use weir_core::{parse_duration, Location, Result, WeirError};

/// Known settings: key, default, description.
pub const SETTINGS: &[(&str, &str, &str)] = &[
    ("parallelism", "", "tasks per operator of the next job (default: the number of cores)"),
    ("source.idle-timeout", "0", "a source task with no data for this long (e.g. '5s') stops holding back watermarks; 0: never"),
    ("pipeline.name", "", "name of the next job started by INSERT (default: insert-into-<table>)"),
    ("table.dml-sync", "false", "'true': INSERT waits until its job has finished"),
];

#[derive(Debug, Clone, Default)]
pub struct Settings {
    values: BTreeMap<String, String>,
}

impl Settings {
    pub fn set(&mut self, key: &str, value: &str, at: Option<Location>) -> Result<()> {
        if !SETTINGS.iter().any(|(k, _, _)| *k == key) {
            let known: Vec<_> = SETTINGS.iter().map(|(k, _, _)| *k).collect();
            return Err(WeirError::user(format!("unknown setting '{key}'; settings are: {}", known.join(", "))).at(at));
        }
        if key == "table.dml-sync" && !matches!(value, "true" | "false") {
            return Err(WeirError::user(format!("setting '{key}' must be 'true' or 'false', not '{value}'")).at(at));
        }
        if key == "parallelism" && !matches!(value.parse::<usize>(), Ok(1..=1024)) {
            return Err(WeirError::user(format!("setting 'parallelism' must be a number from 1 to 1024, not '{value}'")).at(at));
        }
        if key == "source.idle-timeout" {
            parse_duration(value).map_err(|e| e.at(at))?;
        }
        self.values.insert(key.to_string(), value.to_string());
        Ok(())
    }

    pub fn reset(&mut self, key: Option<&str>) {
        match key {
            Some(k) => {
                self.values.remove(k);
            }
            None => self.values.clear(),
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str).filter(|v| !v.is_empty())
    }

    pub fn dml_sync(&self) -> bool {
        self.get("table.dml-sync") == Some("true")
    }

    /// How the next job runs.
    pub fn job_options(&self) -> weir_runtime::JobOptions {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        weir_runtime::JobOptions {
            parallelism: self.get("parallelism").and_then(|p| p.parse().ok()).unwrap_or(cores),
            idle_timeout: self
                .get("source.idle-timeout")
                .and_then(|t| parse_duration(t).ok())
                .filter(|d| !d.is_zero()),
        }
    }

    /// Every known setting with its current value.
    pub fn all(&self) -> Vec<(String, String)> {
        SETTINGS
            .iter()
            .map(|(k, default, _)| (k.to_string(), self.values.get(*k).cloned().unwrap_or_else(|| default.to_string())))
            .collect()
    }
}

//! `SET 'key' = 'value'`: the settings a session knows. An unknown key is an error, not
//! silently ignored, so that a typo cannot change nothing.

use std::collections::BTreeMap;

use weir_core::{Location, Result, WeirError};

/// Known settings: key, default, description.
pub const SETTINGS: &[(&str, &str, &str)] = &[
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

    /// Every known setting with its current value.
    pub fn all(&self) -> Vec<(String, String)> {
        SETTINGS
            .iter()
            .map(|(k, default, _)| (k.to_string(), self.values.get(*k).cloned().unwrap_or_else(|| default.to_string())))
            .collect()
    }
}

//! A table as declared by `CREATE TABLE`: its columns, its watermark and its `WITH` options.

use std::collections::BTreeMap;

use datafusion::arrow::datatypes::SchemaRef;

use crate::{Location, Result, WeirError};

/// `WITH ('key' = 'value', …)` options, with the position of each key for error messages.
#[derive(Debug, Clone, Default)]
pub struct Options {
    values: BTreeMap<String, (String, Option<Location>)>,
}

impl Options {
    pub fn insert(&mut self, key: String, value: String, at: Option<Location>) -> Option<String> {
        self.values.insert(key, (value, at)).map(|(v, _)| v)
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(|(v, _)| v.as_str())
    }

    pub fn location(&self, key: &str) -> Option<Location> {
        self.values.get(key).and_then(|(_, l)| *l)
    }

    /// A required option; the error names the table and the key.
    pub fn required(&self, table: &str, key: &str) -> Result<&str> {
        self.get(key).ok_or_else(|| WeirError::user(format!("table '{table}' needs the option '{key}'")))
    }

    /// A boolean option, `default` when absent.
    pub fn bool(&self, table: &str, key: &str, default: bool) -> Result<bool> {
        match self.get(key).map(|v| v.to_ascii_lowercase()) {
            None => Ok(default),
            Some(v) if v == "true" => Ok(true),
            Some(v) if v == "false" => Ok(false),
            Some(v) => {
                Err(WeirError::user(format!("table '{table}': option '{key}' must be 'true' or 'false', not '{v}'"))
                    .at(self.location(key)))
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, (v, _))| (k.as_str(), v.as_str()))
    }

    /// Refuse keys that no part of the connector reads: a typo must not pass silently.
    /// Every option is one of the connector's `known` keys or one of [`ENGINE_OPTIONS`].
    pub fn check_known(&self, table: &str, known: &[&str]) -> Result<()> {
        for (key, (_, at)) in &self.values {
            if !known.contains(&key.as_str()) && !ENGINE_OPTIONS.contains(&key.as_str()) {
                return Err(WeirError::user(format!(
                    "table '{table}': unknown option '{key}'; options here are: {}",
                    known.iter().chain(ENGINE_OPTIONS).copied().collect::<Vec<_>>().join(", ")
                ))
                .at(*at));
            }
        }
        Ok(())
    }
}

/// Table options the engine reads itself, whatever the connector: `'late-data.table'` names
/// the table that rows arriving too late for their windows are written to.
pub const ENGINE_OPTIONS: &[&str] = &[LATE_DATA_TABLE];

pub const LATE_DATA_TABLE: &str = "late-data.table";

/// `WATERMARK FOR column AS expression`.
#[derive(Debug, Clone)]
pub struct WatermarkDef {
    pub column: String,
    /// The expression as written, planned against the table's columns when a job starts.
    pub sql: String,
}

#[derive(Debug, Clone)]
pub struct TableDef {
    pub name: String,
    pub schema: SchemaRef,
    pub watermark: Option<WatermarkDef>,
    pub partition_keys: Vec<String>,
    /// `PRIMARY KEY (…) NOT ENFORCED`: the key an upsert sink writes by.
    pub primary_key: Vec<String>,
    pub options: Options,
    /// The statement text, shown by `SHOW CREATE TABLE`.
    pub definition: String,
    /// Metadata columns (`METADATA FROM 'key'`): column name -> the connector's key.
    pub metadata: std::collections::BTreeMap<String, String>,
}

impl TableDef {
    /// Refuse metadata columns, for a connector that has none.
    pub fn check_no_metadata(&self) -> Result<()> {
        match self.metadata.keys().next() {
            Some(column) => Err(WeirError::user(format!(
                "table '{}': column '{column}' is a METADATA column, but connector '{}' has no metadata",
                self.name,
                self.options.get("connector").unwrap_or("?")
            ))),
            None => Ok(()),
        }
    }

    pub fn connector(&self) -> Result<&str> {
        self.options.required(&self.name, "connector")
    }
}

/// A duration as Flink writes them: `10s`, `500 ms`, `1min`, `2 h`, `1d`; a bare number is
/// milliseconds.
pub fn parse_duration(text: &str) -> Result<std::time::Duration> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| WeirError::user(format!("'{text}' is not a duration (like '10s', '500ms', '1min')")))?;
    let millis = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "ms" | "milli" | "millis" | "millisecond" | "milliseconds" => 1,
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000,
        "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        other => return Err(WeirError::user(format!("'{text}': unknown time unit '{other}' (ms, s, min, h, d)"))),
    };
    Ok(std::time::Duration::from_millis(n.saturating_mul(millis)))
}

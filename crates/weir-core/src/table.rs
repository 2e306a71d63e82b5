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
    /// Metadata columns declared `VIRTUAL`: read from the records, never written by a sink.
    pub virtual_metadata: std::collections::BTreeSet<String>,
    /// Computed columns (`name AS expression`), in `schema` but never read or written by the
    /// connector: the source task evaluates them over each batch it reads.
    pub computed: Vec<ComputedColumn>,
}

/// `name AS expression` in `CREATE TABLE`: a virtual column, computed from the table's
/// physical and metadata columns as rows are read.
#[derive(Debug, Clone)]
pub struct ComputedColumn {
    /// Its index in the table's schema.
    pub index: usize,
    /// The expression as written, planned against the table's stored columns.
    pub sql: String,
}

impl TableDef {
    /// A table made by Weir itself (a repartition topic, a test's table): its columns and
    /// options, nothing else declared.
    pub fn new(name: impl Into<String>, schema: SchemaRef, options: Options) -> Self {
        TableDef {
            name: name.into(),
            schema,
            watermark: None,
            partition_keys: Vec::new(),
            primary_key: Vec::new(),
            options,
            definition: String::new(),
            metadata: Default::default(),
            virtual_metadata: Default::default(),
            computed: Vec::new(),
        }
    }

    /// The table's definition as it may be shown (`SHOW CREATE TABLE`, plans, the web API):
    /// the values of secret options ([`is_secret_option`]) replaced by `******`.
    pub fn shown_definition(&self) -> String {
        mask_secrets(&self.definition, &self.options)
    }

    /// The computed column at `index` of the schema, if it is one.
    pub fn computed_at(&self, index: usize) -> Option<&ComputedColumn> {
        self.computed.iter().find(|c| c.index == index)
    }

    /// The index in [`TableDef::stored`]'s schema of this schema's column `index`; `None`
    /// for a computed column.
    pub fn stored_index(&self, index: usize) -> Option<usize> {
        if self.computed_at(index).is_some() {
            return None;
        }
        Some(index - self.computed.iter().filter(|c| c.index < index).count())
    }

    /// The table as its connector sees it: the columns it reads or writes (physical and
    /// metadata), without the computed ones. The same table when nothing is computed.
    pub fn stored(self: &std::sync::Arc<Self>) -> std::sync::Arc<Self> {
        if self.computed.is_empty() {
            return self.clone();
        }
        let fields: Vec<_> = (0..self.schema.fields().len())
            .filter(|i| self.computed_at(*i).is_none())
            .map(|i| self.schema.field(i).clone())
            .collect();
        let schema = std::sync::Arc::new(datafusion::arrow::datatypes::Schema::new_with_metadata(
            fields,
            self.schema.metadata().clone(),
        ));
        std::sync::Arc::new(TableDef { schema, computed: Vec::new(), ..self.as_ref().clone() })
    }

    /// Whether column `index` is written by a sink: neither computed nor `VIRTUAL` metadata.
    pub fn persisted_at(&self, index: usize) -> bool {
        self.computed_at(index).is_none() && !self.virtual_metadata.contains(self.schema.field(index).name())
    }

    /// The table as a sink writes it: [`TableDef::stored`] without its `VIRTUAL` metadata
    /// columns. The same table when every column is written.
    pub fn persisted(self: &std::sync::Arc<Self>) -> std::sync::Arc<Self> {
        if self.virtual_metadata.is_empty() {
            return self.stored();
        }
        let fields: Vec<_> = (0..self.schema.fields().len())
            .filter(|i| self.persisted_at(*i))
            .map(|i| self.schema.field(i).clone())
            .collect();
        let schema = std::sync::Arc::new(datafusion::arrow::datatypes::Schema::new_with_metadata(
            fields,
            self.schema.metadata().clone(),
        ));
        let metadata = self
            .metadata
            .iter()
            .filter(|(c, _)| !self.virtual_metadata.contains(*c))
            .map(|(c, k)| (c.clone(), k.clone()));
        std::sync::Arc::new(TableDef {
            schema,
            computed: Vec::new(),
            metadata: metadata.collect(),
            virtual_metadata: Default::default(),
            ..self.as_ref().clone()
        })
    }

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

/// Whether a `'path'` option is a relative local path, to be taken from a base directory: not
/// absolute, and not a URL (`file:///tmp/t`, Hadoop's `file:/tmp/t`, `s3://b/t`).
pub fn is_relative_path(value: &str) -> bool {
    std::path::Path::new(value).is_relative() && !value.starts_with("file:") && !value.contains("://")
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
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        other => return Err(WeirError::user(format!("'{text}': unknown time unit '{other}' (ms, s, min, h, d)"))),
    };
    Ok(std::time::Duration::from_millis(n.saturating_mul(millis)))
}

/// Whether a table option holds a secret: a password (`password`, `properties.sasl.password`,
/// `properties.ssl.key.password`…), a JAAS configuration (which carries one), a private key,
/// a token or secret, or a registry's `user:password`.
pub fn is_secret_option(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["password", "secret", "secret-key", "token", "user-info", "ssl.key.pem", "private-key"]
        .iter()
        .any(|end| key.ends_with(end))
        || key.contains("jaas.config")
}

/// `text` with the values of `options`' secret options, as SQL string literals, replaced by
/// `'******'`.
pub fn mask_secrets(text: &str, options: &Options) -> String {
    let mut shown = text.to_string();
    for (key, value) in options.iter() {
        if is_secret_option(key) && !value.is_empty() {
            let literal = format!("'{}'", value.replace('\'', "''"));
            shown = shown.replace(&literal, "'******'");
        }
    }
    shown
}

#[cfg(test)]
mod secret_tests {
    use super::*;

    #[test]
    fn secret_option_values_are_masked_and_others_kept() {
        let mut options = Options::default();
        options.insert("connector".into(), "kafka".into(), None);
        options.insert(
            "properties.sasl.jaas.config".into(),
            "org.apache.kafka.common.security.scram.ScramLoginModule required username='u' password='p';".into(),
            None,
        );
        options.insert("properties.ssl.key.password".into(), "k3y".into(), None);
        options.insert("password".into(), "it's".into(), None);
        let text = "CREATE TABLE t (a INT) WITH ('connector' = 'kafka', \
            'properties.sasl.jaas.config' = 'org.apache.kafka.common.security.scram.ScramLoginModule required username=''u'' password=''p'';', \
            'properties.ssl.key.password' = 'k3y', 'password' = 'it''s')";
        let shown = mask_secrets(text, &options);
        assert!(!shown.contains("k3y") && !shown.contains("ScramLoginModule") && !shown.contains("it''s"), "{shown}");
        assert!(shown.contains("'connector' = 'kafka'") && shown.contains("'password' = '******'"), "{shown}");
        assert!(is_secret_option("properties.sasl.password") && !is_secret_option("properties.sasl.mechanism"));
    }
}

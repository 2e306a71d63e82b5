//! Scratch copies of a file's sinks, for `weir verify`: each run of the file writes into a
//! directory, Kafka topics under a prefix, or a PostgreSQL schema of its own, and reads a
//! bounded prefix of its unbounded sources, so that runs can be compared and the user's
//! real sinks are never touched. An engine given a [`Scratch`] rewrites each `CREATE TABLE`
//! as it runs it; nothing else of the file changes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use weir_core::{Location, Result, WeirError};
use weir_sql::parser::CreateTable;

/// Where one run of a file writes, and what it reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scratch {
    /// This run's files (`<dir>/tables/<table>`) and checkpoints (`<dir>/checkpoints`).
    pub dir: PathBuf,
    /// The tables the file's `INSERT`s write.
    pub sinks: BTreeSet<String>,
    /// Prefix of this run's Kafka topics, transactional ids and consumer groups.
    pub prefix: String,
    /// PostgreSQL schema of this run's copies of `jdbc` tables.
    pub schema: String,
    /// Events of a generator without `'events'`.
    pub events: u64,
    /// Kafka sources: where each partition ends (`'scan.bounded.specific-offsets'`).
    pub kafka_ends: BTreeMap<String, String>,
    /// Create the sinks to read back what a run left in them (not written to the text).
    pub read_back: bool,
}

/// The connectors of the sinks a scratch copy can be made of.
pub const SCRATCH_CONNECTORS: &[&str] = &["filesystem", "kafka", "upsert-kafka", "jdbc", "print", "blackhole"];

impl Scratch {
    pub fn tables_dir(&self) -> PathBuf {
        self.dir.join("tables")
    }

    pub fn checkpoint_dir(&self) -> PathBuf {
        self.dir.join("checkpoints")
    }

    /// Settings every run of the file gets, whatever the file sets: its own checkpoints, and
    /// non-deterministic jobs started anyway, so that `verify` shows what they do.
    pub fn pinned_settings(&self) -> Vec<(&'static str, String)> {
        vec![
            ("checkpoint.dir", self.checkpoint_dir().to_string_lossy().into_owned()),
            (crate::guarantees::ALLOW_NONDETERMINISM, "true".to_string()),
        ]
    }

    /// The text a child process reads back with [`Scratch::parse`].
    pub fn to_text(&self) -> String {
        let mut text = format!(
            "dir\t{}\nprefix\t{}\nschema\t{}\nevents\t{}\n",
            self.dir.display(),
            self.prefix,
            self.schema,
            self.events
        );
        for sink in &self.sinks {
            text.push_str(&format!("sink\t{sink}\n"));
        }
        for (table, ends) in &self.kafka_ends {
            text.push_str(&format!("kafka-end\t{table}\t{ends}\n"));
        }
        text
    }

    pub fn parse(text: &str) -> Result<Self> {
        let mut scratch = Scratch::default();
        for line in text.lines().filter(|l| !l.is_empty()) {
            let mut parts = line.splitn(3, '\t');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("dir"), Some(v), None) => scratch.dir = PathBuf::from(v),
                (Some("prefix"), Some(v), None) => scratch.prefix = v.to_string(),
                (Some("schema"), Some(v), None) => scratch.schema = v.to_string(),
                (Some("events"), Some(v), None) => {
                    scratch.events = v.parse().map_err(|_| WeirError::user(format!("scratch: bad events '{v}'")))?
                }
                (Some("sink"), Some(v), None) => {
                    scratch.sinks.insert(v.to_string());
                }
                (Some("kafka-end"), Some(t), Some(ends)) => {
                    scratch.kafka_ends.insert(t.to_string(), ends.to_string());
                }
                _ => return Err(WeirError::user(format!("scratch: cannot read the line '{line}'"))),
            }
        }
        Ok(scratch)
    }

    /// The table as this run creates it: a sink written into its scratch copy, a source
    /// bounded.
    pub fn rewrite(&self, ct: &mut CreateTable) -> Result<()> {
        let name = weir_sql::catalog::normalize(&ct.name);
        let connector = option(ct, "connector").unwrap_or_default();
        if self.sinks.contains(&name) {
            match connector.as_str() {
                "filesystem" => set(ct, "path", &self.tables_dir().join(&name).to_string_lossy()),
                "kafka" | "upsert-kafka" => {
                    let topic = option(ct, "topic").unwrap_or_default();
                    set(ct, "topic", &format!("{}{topic}", self.prefix));
                    // Never the transactional ids of the real job: they would fence it.
                    set(ct, "sink.transactional-id-prefix", &format!("{}{name}", self.prefix));
                    if self.read_back {
                        // Every committed record, from the start to where the topic ends now.
                        if connector == "kafka" {
                            set(ct, "scan.startup.mode", "earliest-offset");
                        }
                        set(ct, "scan.bounded.mode", "latest-offset");
                        ct.options.retain(|(k, _, _)| k != "properties.isolation.level" && k != "properties.group.id");
                    }
                }
                "jdbc" => {
                    let table = option(ct, "table-name").unwrap_or_default();
                    let unqualified = table.rsplit('.').next().unwrap_or(&table).to_string();
                    set(ct, "table-name", &format!("{}.{unqualified}", self.schema));
                    // Never the prepared transactions of the real job: a start rolls back
                    // those of its prefix.
                    set(ct, "sink.transactional-id-prefix", &format!("{}{name}", self.prefix));
                }
                // A console keeps nothing to compare: the rows it is sent go to files.
                "print" | "blackhole" => {
                    let path = self.tables_dir().join(&name).to_string_lossy().into_owned();
                    ct.options.retain(|(k, _, _)| k == "connector");
                    set(ct, "connector", "filesystem");
                    set(ct, "path", &path);
                    set(ct, "format", "json");
                }
                other => {
                    return Err(WeirError::not_supported(format!(
                        "a scratch copy of table '{name}' (connector '{other}'); verify copies {}",
                        SCRATCH_CONNECTORS.join(", ")
                    )))
                }
            }
            return Ok(());
        }
        match connector.as_str() {
            "kafka" | "upsert-kafka" => {
                if let Some(ends) = self.kafka_ends.get(&name) {
                    set(ct, "scan.bounded.mode", "specific-offsets");
                    set(ct, "scan.bounded.specific-offsets", ends);
                }
                if let Some(group) = option(ct, "properties.group.id") {
                    // The real group's committed offsets stay as they are.
                    set(ct, "properties.group.id", &format!("{}{group}", self.prefix));
                }
            }
            "nexmark" if option(ct, "events").is_none() => set(ct, "events", &self.events.to_string()),
            _ => {}
        }
        Ok(())
    }
}

fn option(ct: &CreateTable, key: &str) -> Option<String> {
    ct.options.iter().find(|(k, _, _)| k == key).map(|(_, v, _)| v.clone())
}

fn set(ct: &mut CreateTable, key: &str, value: &str) {
    match ct.options.iter_mut().find(|(k, _, _)| k == key) {
        Some(o) => o.1 = value.to_string(),
        None => ct.options.push((key.to_string(), value.to_string(), Location { line: 1, column: 1 })),
    }
}

//! The `jdbc` connector, in Flink's spelling, for PostgreSQL: a sink that upserts by the
//! table's `PRIMARY KEY` (or appends without one) and, with `'sink.delivery-guarantee' =
//! 'exactly-once'`, writes each checkpoint's rows in one prepared transaction committed when
//! the checkpoint completes ([`xa`]).
//!
//! Weir speaks PostgreSQL's own protocol (tokio-postgres); "jdbc" is only the name Flink's
//! query text uses, and its `jdbc:postgresql://` URLs are read as they are.

mod check;
mod endpoint;
mod lookup;
pub mod scratch;
mod sink;
mod types;
mod write;
mod xa;

use std::time::Duration;

use weir_core::{table::parse_duration, Changelog, Result, TableDef, WeirError};

pub use check::check_table;
pub use endpoint::Endpoint;
pub use lookup::JdbcLookup;
pub use sink::{sink, JdbcSink};

const OPTIONS: &[&str] = &[
    "connector",
    "url",
    "table-name",
    "username",
    "password",
    "driver",
    "sink.buffer-flush.max-rows",
    "sink.buffer-flush.interval",
    "sink.max-retries",
    "sink.delivery-guarantee",
    "sink.transactional-id-prefix",
];

use crate::delivery::delivery;
pub use crate::delivery::Delivery;

/// A sink table's settings, read once from its options.
#[derive(Debug, Clone)]
pub struct Settings {
    pub endpoint: Endpoint,
    /// The PostgreSQL table, as given (`schema.table` or `table`).
    pub target: String,
    pub delivery: Delivery,
    pub max_rows: usize,
    pub interval: Option<Duration>,
    pub max_retries: u32,
    /// Names this sink's prepared transactions: `<prefix>-<task>-<checkpoint>`.
    pub prefix: String,
}

impl Settings {
    pub fn from_table(table: &TableDef) -> Result<Self> {
        let options = &table.options;
        let endpoint = Endpoint::parse(table)?;
        let number = |key: &str, default: u64| -> Result<u64> {
            match options.get(key) {
                None => Ok(default),
                Some(v) => v.trim().parse::<u64>().map_err(|_| {
                    WeirError::user(format!("table '{}': '{key}' must be a whole number, not '{v}'", table.name))
                        .at(options.location(key))
                }),
            }
        };
        let interval = match options.get("sink.buffer-flush.interval") {
            None => Some(Duration::from_secs(1)),
            Some(v) => {
                let d = parse_duration(v)
                    .map_err(|e| e.context(format!("table '{}': 'sink.buffer-flush.interval'", table.name)))?;
                (!d.is_zero()).then_some(d)
            }
        };
        let target = table.options.required(&table.name, "table-name")?.to_string();
        Ok(Self {
            endpoint,
            delivery: delivery(table)?,
            // Flink's default is 100; rows are deduplicated by key within a flush, and the
            // statements are whole arrays, so a larger buffer costs little.
            max_rows: number("sink.buffer-flush.max-rows", 5000)?.max(1) as usize,
            interval,
            max_retries: number("sink.max-retries", 3)?.min(100) as u32,
            prefix: options
                .get("sink.transactional-id-prefix")
                .map(str::to_string)
                .unwrap_or_else(|| format!("weir-{}", table.name)),
            target,
        })
    }
}

/// A `jdbc` table at `CREATE TABLE`: its options, its URL and a PostgreSQL type for every
/// column. Nothing is connected to yet; the table itself is checked when a job starts.
pub fn validate(table: &TableDef) -> Result<()> {
    let known: Vec<&str> = OPTIONS.iter().chain(lookup::LOOKUP_OPTIONS).copied().collect();
    table.options.check_known(&table.name, &known)?;
    table.check_no_metadata()?;
    if let Some(driver) = table.options.get("driver") {
        if driver != "org.postgresql.Driver" {
            return Err(WeirError::user(format!(
                "table '{}': 'driver' = '{driver}': Weir writes PostgreSQL only ('org.postgresql.Driver')",
                table.name
            ))
            .at(table.options.location("driver")));
        }
    }
    let settings = Settings::from_table(table)?;
    for field in table.schema.fields() {
        types::PgType::of(field.data_type()).ok_or_else(|| {
            WeirError::not_supported(format!(
                "column '{}' of table '{}' is {}, which has no PostgreSQL type Weir writes (types: BOOLEAN, \
                 TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE, DECIMAL, STRING/VARCHAR, BYTES, DATE, TIMESTAMP, \
                 TIMESTAMP_LTZ)",
                field.name(),
                table.name,
                types::sql_name(field.data_type())
            ))
        })?;
    }
    if settings.prefix.len() > 150 {
        return Err(WeirError::user(format!(
            "table '{}': 'sink.transactional-id-prefix' is longer than 150 characters (PostgreSQL's transaction \
             names take 200)",
            table.name
        )));
    }
    Ok(())
}

/// Whether a `jdbc` sink takes `changelog`. With a primary key, the query's result must be
/// identified by it (an upsert by another key would merge rows). Without one, updates and
/// deletes take away one equal row, which only a transaction per checkpoint keeps exact: a
/// replay would append twice and delete twice.
pub fn check_sink_input(table: &TableDef, changelog: &Changelog, unique_key: Option<&[usize]>) -> Result<()> {
    if changelog.is_append_only() {
        return Ok(());
    }
    if !table.primary_key.is_empty() {
        return crate::kafka::check_upsert_input(table, changelog, unique_key);
    }
    if delivery(table)? == Delivery::ExactlyOnce {
        return Ok(());
    }
    Err(WeirError::not_supported(format!(
        "writing an updating result ({}) into the jdbc table '{}' without a PRIMARY KEY under '{}' delivery: \
         an update would be applied again after a restart (a row appended twice, another deleted twice). Declare \
         the table's PRIMARY KEY (…) NOT ENFORCED as the query's GROUP BY columns (writes become idempotent \
         upserts), or set 'sink.delivery-guarantee' = 'exactly-once'",
        changelog.describe(),
        table.name,
        table.options.get("sink.delivery-guarantee").unwrap_or("at-least-once"),
    )))
}

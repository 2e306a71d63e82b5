//! The `kafka` connector: a source whose offsets live in Weir's checkpoints, and a sink that
//! is exactly-once (Kafka transactions committed with the checkpoint, two-phase), at least
//! once (idempotent producer, flushed at every checkpoint), or best effort. The
//! `upsert-kafka` connector is the same sink keyed by the table's `PRIMARY KEY`: an insert or
//! update is the key's new value, a delete a tombstone.
//!
//! Everything here is plain Kafka protocol through librdkafka (rdkafka), plus the requests of
//! [`txn`] and [`recovery`] for ending the transactions a crash left open.

pub mod admin;
pub mod client;
mod codec;
mod context;
mod metadata;
mod producer;
pub mod recovery;
mod scan_options;
mod sink;
mod source;
pub mod txn;
mod writer;

use std::time::Duration;

use rdkafka::ClientConfig;
use weir_core::{Result, TableDef, WeirError};

pub(crate) use scan_options::replays;
pub use sink::{sink, KafkaSink};
pub use source::KafkaSource;
pub use writer::{send, RecordProducer, TopicWriter};

const OPTIONS: &[&str] = &[
    "connector",
    "topic",
    "topic-pattern",
    "format",
    "value.format",
    "key.format",
    "key.fields",
    "csv.field-delimiter",
    "format.ignore-parse-errors",
    "json.ignore-parse-errors",
    "csv.ignore-parse-errors",
    "scan.startup.mode",
    "scan.startup.timestamp-millis",
    "scan.bounded.mode",
    "scan.bounded.specific-offsets",
    "scan.records-per-second",
    "sink.delivery-guarantee",
    "sink.transactional-id-prefix",
];

pub(crate) use crate::delivery::delivery;
pub use crate::delivery::Delivery;

/// The topic, or for a source reading `'topic-pattern'`, the pattern (for messages).
pub(crate) fn topic(table: &TableDef) -> Result<String> {
    match (table.options.get("topic"), table.options.get("topic-pattern")) {
        (Some(t), None) => Ok(t.to_string()),
        (None, Some(p)) => Ok(p.to_string()),
        (Some(_), Some(_)) => {
            Err(WeirError::user(format!("table '{}': give 'topic' or 'topic-pattern', not both", table.name))
                .at(table.options.location("topic-pattern")))
        }
        (None, None) => {
            Err(WeirError::user(format!("table '{}' needs the option 'topic' (or 'topic-pattern')", table.name)))
        }
    }
}

pub(crate) fn bootstrap(table: &TableDef) -> Result<String> {
    Ok(table.options.required(&table.name, "properties.bootstrap.servers")?.to_string())
}

/// The table's librdkafka properties: its `properties.*` options without the prefix. A
/// Java client's `sasl.jaas.config` (what Flink users write for SASL PLAIN and SCRAM) becomes
/// librdkafka's `sasl.username` and `sasl.password`, which librdkafka reads instead; one given
/// explicitly wins.
pub fn properties(table: &TableDef) -> Result<Vec<(String, String)>> {
    let mut properties: Vec<(String, String)> = Vec::new();
    let mut jaas = None;
    for (key, value) in table.options.iter() {
        match key.strip_prefix("properties.") {
            Some("sasl.jaas.config") => jaas = Some(value),
            Some(property) => properties.push((property.to_string(), value.to_string())),
            None => {}
        }
    }
    if let Some(jaas) = jaas {
        let (username, password) = client::security::jaas_credentials(jaas).ok_or_else(|| {
            WeirError::user(format!(
                "table '{}': 'properties.sasl.jaas.config' needs username=\"…\" and password=\"…\" (a PlainLoginModule \
                 or ScramLoginModule); or give 'properties.sasl.username' and 'properties.sasl.password'",
                table.name
            ))
            .at(table.options.location("properties.sasl.jaas.config"))
        })?;
        for (key, value) in [("sasl.username", username), ("sasl.password", password)] {
            if !properties.iter().any(|(k, _)| k == key) {
                properties.push((key.to_string(), value));
            }
        }
    }
    Ok(properties)
}

/// librdkafka settings: the table's [`properties`], then `fixed` (what the connector's
/// correctness depends on, which a user cannot override).
pub(crate) fn client_config(table: &TableDef, fixed: &[(&str, &str)]) -> Result<ClientConfig> {
    let mut config = ClientConfig::new();
    for (property, value) in properties(table)? {
        if fixed.iter().any(|(k, _)| *k == property) {
            let key = format!("properties.{property}");
            return Err(WeirError::user(format!(
                "table '{}': option '{key}' is set by the connector and cannot be given",
                table.name
            ))
            .at(table.options.location(&key)));
        }
        config.set(property, value);
    }
    for (k, v) in fixed {
        config.set(*k, *v);
    }
    Ok(config)
}

/// The broker's transaction timeout a sink's transactions are opened with.
pub(crate) fn transaction_timeout(table: &TableDef) -> Result<Duration> {
    match table.options.get("properties.transaction.timeout.ms") {
        None => Ok(Duration::from_secs(900)),
        Some(v) => v.parse::<u64>().map(Duration::from_millis).map_err(|_| {
            WeirError::user(format!(
                "table '{}': 'properties.transaction.timeout.ms' must be milliseconds, not '{v}'",
                table.name
            ))
            .at(table.options.location("properties.transaction.timeout.ms"))
        }),
    }
}

/// Options of an `upsert-kafka` table (Flink's).
const UPSERT_OPTIONS: &[&str] = &[
    "connector",
    "topic",
    "key.format",
    "value.format",
    "scan.bounded.mode",
    "scan.bounded.specific-offsets",
    "format.ignore-parse-errors",
    "sink.delivery-guarantee",
    "sink.transactional-id-prefix",
];

fn check_known(table: &TableDef, known: &[&str]) -> Result<()> {
    for (key, _) in table.options.iter() {
        let avro_confluent = [
            "avro-confluent.",
            "key.avro-confluent.",
            "value.avro-confluent.",
            "debezium-avro-confluent.",
            "value.debezium-avro-confluent.",
        ]
        .iter()
        .find_map(|p| key.strip_prefix(p))
        .is_some_and(|k| codec::AVRO_CONFLUENT_KEYS.contains(&k));
        if !key.starts_with("properties.")
            && !avro_confluent
            && !known.contains(&key)
            && !weir_core::table::ENGINE_OPTIONS.contains(&key)
        {
            return Err(WeirError::user(format!(
                "table '{}': unknown option '{key}'; options here are: {}, properties.* (librdkafka settings)",
                table.name,
                known.join(", ")
            ))
            .at(table.options.location(key)));
        }
    }
    Ok(())
}

fn check_delivery(table: &TableDef) -> Result<()> {
    if delivery(table)? == Delivery::ExactlyOnce && table.options.get("sink.transactional-id-prefix").is_none() {
        return Err(WeirError::user(format!(
            "table '{}': 'sink.delivery-guarantee' = 'exactly-once' needs 'sink.transactional-id-prefix', \
             unique to this sink (it names the sink's Kafka transactions)",
            table.name
        ))
        .at(table.options.location("sink.delivery-guarantee")));
    }
    transaction_timeout(table)?;
    Ok(())
}

/// An `upsert-kafka` table: a topic, both formats, and a primary key to write by.
pub fn validate_upsert(table: &TableDef) -> Result<()> {
    check_known(table, UPSERT_OPTIONS)?;
    table.check_no_metadata()?;
    if table.primary_key.is_empty() {
        return Err(WeirError::user(format!(
            "table '{}': connector 'upsert-kafka' needs a PRIMARY KEY (…) NOT ENFORCED: records are keyed by it, \
             and each key's latest record is its row",
            table.name
        ))
        .at(table.options.location("connector")));
    }
    if table.options.get("topic").is_none() {
        return Err(WeirError::user(format!("table '{}' needs the option 'topic'", table.name)));
    }
    bootstrap(table)?;
    properties(table)?;
    table.options.required(&table.name, "key.format")?;
    table.options.required(&table.name, "value.format")?;
    codec::Codec::from_table(table, "key.format")?;
    codec::Codec::from_table(table, "value.format")?;
    check_delivery(table)
}

/// An upsert sink applies each change by its key: the query's result must be identified by
/// the table's primary key, or two rows of one key would overwrite each other.
pub fn check_upsert_input(
    table: &TableDef,
    changelog: &weir_core::Changelog,
    unique_key: Option<&[usize]>,
) -> Result<()> {
    if changelog.is_append_only() {
        return Ok(());
    }
    let key: Option<Vec<usize>> = table.primary_key.iter().map(|k| table.schema.index_of(k).ok()).collect();
    let mut key = key.unwrap_or_default();
    key.sort_unstable();
    let mut unique = unique_key.map(<[usize]>::to_vec);
    if let Some(u) = &mut unique {
        u.sort_unstable();
    }
    if unique.as_ref() == Some(&key) {
        return Ok(());
    }
    let names = |cols: &[usize]| -> String {
        cols.iter()
            .map(|c| table.schema.fields().get(*c).map_or("?", |f| f.name().as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Err(WeirError::not_supported(format!(
        "writing into the {} table '{}' by its PRIMARY KEY ({}): the query's result is updated by {}; \
         make the primary key the query's GROUP BY columns",
        table.options.get("connector").unwrap_or("upsert"),
        table.name,
        names(&key),
        match &unique {
            Some(u) => format!("other columns ({})", names(u)),
            None => "no key Weir can follow to the sink".to_string(),
        }
    )))
}

pub fn validate(table: &TableDef) -> Result<()> {
    check_known(table, OPTIONS)?;
    topic(table)?;
    bootstrap(table)?;
    properties(table)?;
    codec::Codec::from_table(
        table,
        if table.options.get("value.format").is_some() { "value.format" } else { "format" },
    )?;
    check_delivery(table)?;
    for key in table.options.get("key.fields").into_iter().flat_map(|k| k.split(';')) {
        if table.schema.field_with_name(key.trim()).is_err() {
            return Err(WeirError::user(format!(
                "table '{}': 'key.fields' names '{key}', which is not a column",
                table.name
            ))
            .at(table.options.location("key.fields")));
        }
    }
    scan_options::startup(table)?;
    if table.options.get("scan.bounded.mode") == Some("specific-offsets") {
        scan_options::specific_offsets(table)?;
    }
    for (column, key) in &table.metadata {
        metadata::check_column(table, column, metadata::metadata_key(table, key)?)?;
    }
    Ok(())
}

/// An exactly-once sink's transaction timeout against the job's settings: the broker must
/// not abort a pre-committed transaction before a restarted job can commit it.
pub fn check_job(table: &TableDef, checkpoint_timeout: Duration, restart_delay: Duration) -> Result<()> {
    if delivery(table)? != Delivery::ExactlyOnce {
        return Ok(());
    }
    let timeout = transaction_timeout(table)?;
    let needed = checkpoint_timeout + restart_delay;
    if timeout <= needed {
        return Err(WeirError::user(format!(
            "table '{}': 'properties.transaction.timeout.ms' ({} ms) must exceed the checkpoint timeout plus the \
             restart delay ({} ms): a transaction pre-committed in a checkpoint must outlive a crash until the \
             restarted job commits it, or the broker aborts it and that checkpoint's output is lost",
            table.name,
            timeout.as_millis(),
            needed.as_millis()
        ))
        .at(table.options.location("properties.transaction.timeout.ms")));
    }
    Ok(())
}

/// The offsets every partition of the table's topic ends at now, in the form of
/// `'scan.bounded.specific-offsets'`: a bounded prefix of the topic that stays the same
/// however much is written after.
pub fn end_offsets(table: &TableDef) -> Result<String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let topic = match table.options.get("topic") {
        Some(t) => t.to_string(),
        None => {
            return Err(WeirError::user(format!(
                "table '{}': a bounded prefix needs a single 'topic', not a 'topic-pattern'",
                table.name
            )))
        }
    };
    let mut config = client_config(table, &[("enable.auto.commit", "false")])?;
    config.set("group.id", format!("weir-offsets-{}", table.name));
    let consumer: BaseConsumer = config.create().map_err(|e| source::kafka_error("cannot create a consumer", e))?;
    let timeout = Duration::from_secs(10);
    let metadata = consumer
        .fetch_metadata(Some(&topic), timeout)
        .map_err(|e| source::kafka_error(&format!("cannot read the metadata of topic '{topic}'"), e))?;
    let mut parts: Vec<i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic && t.error().is_none())
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    parts.sort_unstable();
    if parts.is_empty() {
        return Err(WeirError::user(format!(
            "table '{}': topic '{topic}' does not exist or has no partitions",
            table.name
        )));
    }
    let mut ends = Vec::new();
    for p in parts {
        let (_, high) = consumer
            .fetch_watermarks(&topic, p, timeout)
            .map_err(|e| source::kafka_error("cannot read the end offsets", e))?;
        ends.push(format!("partition:{p},offset:{high}"));
    }
    Ok(ends.join(";"))
}

/// Run a blocking librdkafka call (flush, transaction calls) without stalling the other tasks
/// of this async worker, where the runtime allows it (a multi-threaded one).
pub(crate) fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// A poll loop's first wait when nothing is there; it doubles while nothing comes, up to
/// [`IDLE_POLL_MAX`], so that a quiet source costs next to nothing and a busy one adds no
/// latency.
pub(crate) const IDLE_POLL: Duration = Duration::from_millis(2);
pub(crate) const IDLE_POLL_MAX: Duration = Duration::from_millis(50);

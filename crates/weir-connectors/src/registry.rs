//! Which connector a table names, the options each accepts, and building its source or sink.

use datafusion::arrow::datatypes::SchemaRef;
use weir_core::{
    Changelog, ConnectorFactory, Delivered, Result, Sink, SinkGuarantee, Source, Split, TableDef, WeirError,
};

use crate::filesystem::{FileSink, FileSource};
use crate::format::Format;
use crate::{blackhole::BlackholeSink, print::PrintSink};
use weir_core::two_phase::TwoPhaseCommitSink;

const CONNECTORS: &[&str] =
    &["filesystem", "kafka", "upsert-kafka", "jdbc", "iceberg", "nexmark", "datagen", "print", "blackhole"];

/// The connectors built into Weir.
#[derive(Debug, Default, Clone)]
pub struct Connectors;

impl Connectors {
    fn connector<'a>(&self, table: &'a TableDef) -> Result<&'a str> {
        let name = table.connector()?;
        if CONNECTORS.contains(&name) {
            Ok(name)
        } else {
            Err(WeirError::user(format!(
                "table '{}': unknown connector '{name}'; connectors are: {}",
                table.name,
                CONNECTORS.join(", ")
            ))
            .at(table.options.location("connector")))
        }
    }
}

impl ConnectorFactory for Connectors {
    fn validate(&self, table: &TableDef) -> Result<()> {
        match self.connector(table)? {
            "kafka" => {}
            "filesystem" => crate::filesystem::validate_metadata(table)?,
            _ => table.check_no_metadata()?,
        }
        match self.connector(table)? {
            "filesystem" => {
                crate::filesystem::local_path(table)?;
                let format = Format::from_options(table)?;
                if matches!(format, Format::Csv { .. }) {
                    check_flat(table, "csv")?;
                }
                let mut known = vec![
                    "connector",
                    "path",
                    "format",
                    "sink.rolling-policy.file-size",
                    "sink.rolling-policy.rollover-interval",
                ];
                known.extend_from_slice(format.option_keys());
                known.extend_from_slice(crate::filesystem::COMMIT_OPTIONS);
                crate::filesystem::rolling_policy(table)?;
                crate::filesystem::PartitionCommit::from_table(table)?;
                table.options.check_known(&table.name, &known)
            }
            "nexmark" => crate::nexmark::validate(table),
            "datagen" => crate::datagen::validate(table),
            "kafka" => crate::kafka::validate(table),
            "upsert-kafka" => crate::kafka::validate_upsert(table),
            "jdbc" => crate::jdbc::validate(table),
            "iceberg" => crate::iceberg::validate(table),
            "print" => table.options.check_known(&table.name, &["connector", "print-identifier", "standard-error"]),
            _ => table.options.check_known(&table.name, &["connector"]),
        }
    }

    fn source(&self, table: &TableDef, projection: Option<Vec<usize>>, split: Split) -> Result<Box<dyn Source>> {
        match self.connector(table)? {
            "filesystem" => Ok(Box::new(FileSource::new(table, projection, split)?)),
            "nexmark" => Ok(Box::new(crate::nexmark::NexmarkSource::new(table, projection, split)?)),
            "datagen" => Ok(Box::new(crate::datagen::DatagenSource::new(table, projection, split)?)),
            "kafka" => Ok(Box::new(crate::kafka::KafkaSource::new(table, projection, split)?)),
            "upsert-kafka" => Ok(Box::new(crate::kafka::KafkaSource::new(table, projection, split)?)),
            other => Err(WeirError::user(format!(
                "table '{}' uses connector '{other}', which can only be written to, not read",
                table.name
            ))),
        }
    }

    fn source_bounded(&self, table: &TableDef) -> bool {
        match table.options.get("connector") {
            Some("filesystem") => true,
            Some("kafka" | "upsert-kafka") => table.options.get("scan.bounded.mode").is_some_and(|m| m != "unbounded"),
            Some("nexmark") => table.options.get("events").is_some(),
            Some("datagen") => crate::datagen::bounded(table),
            _ => false,
        }
    }

    fn source_replays(&self, table: &TableDef) -> std::result::Result<(), String> {
        match table.options.get("connector") {
            // Row n is a pure function of the seed and n.
            Some("nexmark" | "datagen") => Ok(()),
            Some("kafka" | "upsert-kafka") => crate::kafka::replays(table),
            // Text files up to the byte a position names; Parquet and Avro positions count rows.
            Some("filesystem") => match table.options.get("format") {
                Some("parquet") => Err("Parquet files are not read again up to a row inside them (not built)".into()),
                Some("avro") => Err("Avro files are not read again up to a record inside them (not built)".into()),
                _ => Ok(()),
            },
            Some(c) => Err(format!("the '{c}' connector cannot read its input a second time (not built for it yet)")),
            None => Err("the table names no connector".into()),
        }
    }

    fn lookup_source(&self, table: &TableDef) -> bool {
        table.options.get("connector") == Some("jdbc")
    }

    fn lookup(
        &self,
        table: &TableDef,
        projection: Option<Vec<usize>>,
        keys: Vec<usize>,
    ) -> Result<weir_core::LookupFactory> {
        if table.options.get("connector") != Some("jdbc") {
            return Err(WeirError::not_supported(format!("looking up rows of table '{}' by key", table.name)));
        }
        // Options are checked now, at planning; each task connects on its first lookup.
        crate::jdbc::JdbcLookup::check(table, projection.as_deref(), &keys)?;
        let table = table.clone();
        Ok(std::sync::Arc::new(move || {
            Ok(Box::new(crate::jdbc::JdbcLookup::new(&table, projection.as_deref(), &keys)?)
                as Box<dyn weir_core::Lookup>)
        }))
    }

    fn source_changelog(&self, table: &TableDef) -> Changelog {
        if debezium(table) {
            return Changelog::Retract;
        }
        if table.options.get("connector") == Some("upsert-kafka") {
            let key = table.primary_key.iter().filter_map(|k| table.schema.index_of(k).ok()).collect();
            return Changelog::Upsert(key);
        }
        Changelog::AppendOnly
    }

    fn check_sink_input(&self, table: &TableDef, changelog: &Changelog, unique_key: Option<&[usize]>) -> Result<()> {
        match self.connector(table)? {
            "upsert-kafka" => return crate::kafka::check_upsert_input(table, changelog, unique_key),
            "jdbc" => return crate::jdbc::check_sink_input(table, changelog, unique_key),
            "iceberg" if !changelog.is_append_only() => {
                if let Some(keyed) = crate::iceberg::upsert_key_table(table)? {
                    return crate::kafka::check_upsert_input(&keyed, changelog, unique_key);
                }
            }
            _ => {}
        }
        if changelog.is_append_only() || debezium(table) {
            return Ok(());
        }
        let why = match self.connector(table)? {
            "print" | "blackhole" => return Ok(()),
            "iceberg" => {
                "an Iceberg table appends unless 'upsert-enabled' = 'true' (with a PRIMARY KEY): then each \
                 checkpoint's changes are equality deletes and rows by the key. Or compute the result over a \
                 window (its rows are final when the watermark passes)"
            }
            "filesystem" => {
                "a file takes no row back once written. Compute the result over a window (TUMBLE, HOP, \
                 CUMULATE or SESSION: its rows are final when the watermark passes), or write it to a \
                 'print' table"
            }
            "kafka" => {
                "its format writes appended rows only. Give it 'format' = 'debezium-json' or \
                 'debezium-avro-confluent' (each change an event), \
                 or write it to an 'upsert-kafka' table whose PRIMARY KEY is the query's GROUP BY columns (an \
                 update is the key's new value, a delete a tombstone), or compute the result over a window, \
                 whose rows are final"
            }
            _ => "it takes only appended rows",
        };
        Err(WeirError::not_supported(format!(
            "writing an updating result ({}: updates come from a GROUP BY outside a window, DISTINCT, UNION, \
             an outer or anti join, a Top-N or a changelog source) into table '{}': {why}",
            changelog.describe(),
            table.name
        )))
    }

    fn sink_guarantee(&self, table: &TableDef) -> SinkGuarantee {
        let g = |delivered, rests_on: &str, transactional, by_key, readers: Option<&str>| SinkGuarantee {
            delivered,
            rests_on: rests_on.to_string(),
            transactional,
            by_key,
            readers: readers.map(str::to_string),
        };
        let delivery = crate::delivery::delivery(table).unwrap_or(crate::delivery::Delivery::AtLeastOnce);
        use crate::delivery::Delivery as D;
        match (table.options.get("connector").unwrap_or(""), delivery) {
            ("filesystem", _) => g(
                Delivered::ExactlyOnce,
                "files published when their checkpoint completes (two-phase commit)",
                true,
                false,
                Some("read published files only: in-progress and pending files are hidden (a leading '.')"),
            ),
            ("kafka" | "upsert-kafka", D::ExactlyOnce) => g(
                Delivered::ExactlyOnce,
                "Kafka transactions committed with the checkpoint (two-phase commit)",
                true,
                table.options.get("connector") == Some("upsert-kafka"),
                Some("consumers with isolation.level = read_committed"),
            ),
            ("upsert-kafka", D::AtLeastOnce) => g(
                Delivered::ExactlyOnce,
                "idempotent upserts by the primary key (written at least once: a replay rewrites the same values)",
                false,
                true,
                Some("a reader of each key's latest value (a compacted topic, or an upsert-kafka source)"),
            ),
            ("kafka", D::AtLeastOnce) => g(
                Delivered::AtLeastOnce,
                "an idempotent producer flushed at every barrier: a replay writes its rows again",
                false,
                false,
                None,
            ),
            ("jdbc", D::ExactlyOnce) => g(
                Delivered::ExactlyOnce,
                "PostgreSQL prepared transactions committed with the checkpoint (two-phase commit)",
                true,
                !table.primary_key.is_empty(),
                Some("any reader: PostgreSQL shows committed rows only"),
            ),
            ("jdbc", D::AtLeastOnce) if !table.primary_key.is_empty() => g(
                Delivered::ExactlyOnce,
                "idempotent upserts by the primary key (written at least once: a replay rewrites the same values)",
                false,
                true,
                None,
            ),
            ("jdbc", D::AtLeastOnce) => g(
                Delivered::AtLeastOnce,
                "rows appended at every flush: a replay appends them again",
                false,
                false,
                None,
            ),
            ("iceberg", _) => g(
                Delivered::ExactlyOnce,
                "one Iceberg snapshot per completed checkpoint, which records the checkpoint (two-phase commit)",
                true,
                table.options.get("upsert-enabled").is_some_and(|v| v.eq_ignore_ascii_case("true")),
                Some("any Iceberg reader: data files are in no snapshot until their checkpoint completes"),
            ),
            ("print", _) => g(Delivered::None, "a console: a replay prints rows again", false, false, None),
            ("blackhole", _) => g(Delivered::ExactlyOnce, "nothing is kept", false, false, None),
            _ => g(Delivered::None, "'sink.delivery-guarantee' = 'none': flushed when convenient", false, false, None),
        }
    }

    fn parallel_sink(&self, table: &TableDef) -> bool {
        // One stream of lines on the console, in the order they arrive; one writer of a
        // table whose partitions are committed, as it sees every row and the watermark.
        !matches!(table.options.get("connector"), Some("print" | "iceberg"))
            && table.options.get("sink.partition-commit.policy.kind").is_none()
    }

    fn sink(&self, table: &TableDef, schema: SchemaRef, split: Split) -> Result<Box<dyn Sink>> {
        let connector = self.connector(table)?;
        if !table.partition_keys.is_empty() && !matches!(connector, "filesystem" | "iceberg") {
            return Err(WeirError::not_supported(format!(
                "PARTITIONED BY on a '{connector}' table ('{}'): only filesystem tables are partitioned",
                table.name
            )));
        }
        match connector {
            "nexmark" | "datagen" => Err(WeirError::user(format!(
                "table '{}' uses connector '{connector}', which can only be read",
                table.name
            ))),
            "filesystem" => Ok(Box::new(TwoPhaseCommitSink::new(FileSink::new(table, schema, split)?, split.index))),
            "kafka" | "upsert-kafka" => crate::kafka::sink(table, schema, split),
            "jdbc" => crate::jdbc::sink(table, schema, split),
            "iceberg" => Ok(Box::new(TwoPhaseCommitSink::new(
                crate::iceberg::IcebergSink::new(table, schema, split)?,
                split.index,
            ))),
            "print" => Ok(Box::new(PrintSink::new(table)?)),
            _ => Ok(Box::new(BlackholeSink)),
        }
    }
}

/// A Kafka table whose records are Debezium change events.
fn debezium(table: &TableDef) -> bool {
    table.options.get("connector") == Some("kafka")
        && matches!(
            table.options.get("value.format").or_else(|| table.options.get("format")),
            Some("debezium-json" | "debezium-avro-confluent")
        )
}

/// A format of flat records (CSV) has no way to hold a collection or structured column.
fn check_flat(table: &TableDef, format: &str) -> Result<()> {
    for field in table.schema.fields() {
        if field.data_type().is_nested() {
            return Err(WeirError::user(format!(
                "table '{}', column '{}': the {format} format has no way to hold {} (use 'format' = 'json' or \
                 'parquet')",
                table.name,
                field.name(),
                weir_core::sql_type_name(field.data_type())
            ))
            .at(table.options.location("format")));
        }
    }
    Ok(())
}

//! Kafka record values to batches and back, a batch at a time: `json` (one object per
//! record), `csv` (one line per record) or `raw` (the value as the table's single STRING or
//! BYTES column). A batch that fails to decode as a whole is decoded record by record to
//! find the malformed ones, which fail the job naming topic, partition and offset, or are
//! skipped and counted (`format.ignore-parse-errors`), as for files.
//!
//! `debezium-json` carries a changelog: each record is a change event
//! `{"before": {…}, "after": {…}, "op": "c"|"r"|"u"|"d"}` (or that inside `"payload"`, with a
//! `"schema"` beside it). Read, `c` and `r` are inserts of `after`, `u` an update pair
//! (`before`, `after`), `d` a delete of `before`; a tombstone (no value) is nothing. Written, as
//! Flink writes it: `+I` and `+U` as `c` events with `after`, `-U` and `-D` as `d` events with
//! `before`.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BinaryArray, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use weir_core::{Op, Result, TableDef, WeirError};

use crate::format::avro::AvroDecoder;
use crate::format::registry::Registry;
use crate::format::ParsePolicy;

#[derive(Debug, Clone)]
pub enum Codec {
    Json,
    /// Rows as JSON objects inside Debezium change events.
    DebeziumJson,
    Csv {
        delimiter: u8,
    },
    Raw,
    /// Avro binary records with the schema Flink derives from the table.
    Avro,
    /// Avro in Confluent's framing, writer schemas in a schema registry.
    AvroConfluent(Arc<Confluent>),
}

/// Where an `avro-confluent` format's schemas are registered.
#[derive(Debug)]
pub struct Confluent {
    pub registry: Registry,
    /// The subject the writer registers the table's schema under (`<topic>-value`).
    pub subject: String,
    /// `auto.register.schemas`: off, the schema must be registered under the subject already.
    pub register: bool,
    /// `debezium-avro-confluent`: each record a Debezium change event whose rows are the
    /// table's.
    pub debezium: bool,
}

/// The options of `avro-confluent` (after `avro-confluent.`, `key.avro-confluent.` or
/// `value.avro-confluent.`), Flink's names.
pub const AVRO_CONFLUENT_KEYS: &[&str] = &[
    "url",
    "schema-registry.url",
    "basic-auth.credentials-source",
    "basic-auth.user-info",
    "bearer-auth.credentials-source",
    "bearer-auth.token",
    "subject",
    "properties.auto.register.schemas",
];

impl Codec {
    pub fn from_table(table: &TableDef, key: &str) -> Result<Codec> {
        let value = table.options.get(key).unwrap_or("json");
        Ok(match value {
            "json" => Codec::Json,
            "debezium-json" => Codec::DebeziumJson,
            "csv" => {
                let delimiter = match table.options.get("csv.field-delimiter") {
                    None => b',',
                    Some("\\t") => b'\t',
                    Some(d) if d.len() == 1 => d.as_bytes()[0],
                    Some(d) => {
                        return Err(WeirError::user(format!(
                            "table '{}': 'csv.field-delimiter' must be one character, not '{d}'",
                            table.name
                        ))
                        .at(table.options.location("csv.field-delimiter")))
                    }
                };
                Codec::Csv { delimiter }
            }
            "raw" => Codec::Raw,
            "avro" => {
                crate::format::avro::table_schema(&table.name, &table.schema)?;
                Codec::Avro
            }
            "avro-confluent" | "debezium-avro-confluent" => {
                crate::format::avro::table_schema(&table.name, &table.schema)?;
                let debezium = value == "debezium-avro-confluent";
                let prefix = match (key, debezium) {
                    ("key.format", false) => "key.avro-confluent.",
                    ("value.format", false) => "value.avro-confluent.",
                    (_, false) => "avro-confluent.",
                    ("key.format", true) => {
                        return Err(WeirError::user(format!(
                            "table '{}': 'key.format' cannot be 'debezium-avro-confluent' (a change event is a \
                             record's value)",
                            table.name
                        ))
                        .at(table.options.location(key)))
                    }
                    ("value.format", true) => "value.debezium-avro-confluent.",
                    (_, true) => "debezium-avro-confluent.",
                };
                let registry = Registry::from_options(table, prefix)?;
                let subject = match table.options.get(&format!("{prefix}subject")) {
                    Some(s) => s.to_string(),
                    None => {
                        let topic = super::topic(table)?;
                        format!("{topic}-{}", if key == "key.format" { "key" } else { "value" })
                    }
                };
                let register =
                    table.options.bool(&table.name, &format!("{prefix}properties.auto.register.schemas"), true)?;
                Codec::AvroConfluent(Arc::new(Confluent { registry, subject, register, debezium }))
            }
            other => {
                return Err(WeirError::user(format!(
                    "table '{}': '{key}' must be 'json', 'debezium-json', 'csv', 'raw', 'avro', 'avro-confluent' or \
                     'debezium-avro-confluent', not '{other}'",
                    table.name
                ))
                .at(table.options.location(key)))
            }
        })
    }
}

impl Codec {
    /// `debezium-avro-confluent`.
    pub fn is_debezium_avro(&self) -> bool {
        matches!(self, Codec::AvroConfluent(c) if c.debezium)
    }

    /// A format whose records are change events (each with its ops).
    pub fn is_changelog(&self) -> bool {
        matches!(self, Codec::DebeziumJson) || self.is_debezium_avro()
    }

    /// The format's name, for errors.
    pub fn name(&self) -> &'static str {
        match self {
            Codec::Json => "JSON",
            Codec::DebeziumJson => "debezium-json",
            Codec::Csv { .. } => "CSV",
            Codec::Raw => "raw",
            Codec::Avro => "Avro",
            Codec::AvroConfluent(c) if c.debezium => "debezium-avro-confluent",
            Codec::AvroConfluent(_) => "avro-confluent",
        }
    }
}

/// Where a record came from (for errors and metadata columns).
#[derive(Debug, Clone)]
pub struct RecordAt {
    /// The partition's index among the source task's partitions.
    pub part: u32,
    pub partition: i32,
    pub offset: i64,
    /// The record's timestamp, milliseconds since the epoch.
    pub timestamp: Option<i64>,
    /// Kafka's name of the timestamp's type (`CreateTime`, `LogAppendTime`…).
    pub timestamp_type: &'static str,
    pub leader_epoch: Option<i32>,
    /// The record's headers, read only when a column holds them.
    pub headers: Option<super::metadata::Headers>,
    /// An `upsert-kafka` tombstone: the key's row is deleted (the key stands for the value).
    pub deleted: bool,
}

pub struct Decoder {
    pub codec: Codec,
    pub schema: SchemaRef,
    pub policy: ParsePolicy,
    pub topic: String,
    pub skipped: u64,
    /// The Avro formats' decoder, with the writer schemas fetched so far.
    avro: Option<AvroDecoder>,
    /// Schema ids the registry does not have (their records fail to decode).
    missing: std::collections::HashSet<u32>,
}

impl Decoder {
    pub fn new(table: &str, codec: Codec, schema: SchemaRef, policy: ParsePolicy, topic: String) -> Result<Self> {
        let avro = match &codec {
            Codec::Avro | Codec::AvroConfluent(_) => {
                let debezium = codec.is_debezium_avro();
                let reader = match debezium {
                    true => crate::format::avro::envelope_schema(table, &schema)?,
                    false => crate::format::avro::table_schema(table, &schema)?,
                };
                Some(AvroDecoder::new(reader, schema.clone(), matches!(codec, Codec::AvroConfluent(_)), debezium)?)
            }
            _ => None,
        };
        Ok(Self { codec, schema, policy, topic, skipped: 0, avro, missing: Default::default() })
    }

    /// Fetch from the registry the writer schemas of `values` not seen yet.
    pub async fn prepare(&mut self, values: &[&[u8]]) -> Result<()> {
        let (Codec::AvroConfluent(c), Some(avro)) = (&self.codec, &mut self.avro) else { return Ok(()) };
        for id in avro.unknown_ids(values) {
            if self.missing.contains(&id) {
                continue;
            }
            match c.registry.schema(id).await? {
                Some(schema) => avro.add_writer(id, schema),
                None => {
                    self.missing.insert(id);
                }
            }
        }
        Ok(())
    }

    fn decode_all(&mut self, values: &[&[u8]]) -> Result<Option<RecordBatch>> {
        match &self.codec {
            Codec::Avro | Codec::AvroConfluent(_) => match &mut self.avro {
                Some(avro) => avro.decode(values),
                None => Err(WeirError::internal("an Avro table without its decoder")),
            },
            Codec::Raw => {
                let field = self.schema.field(0);
                let column: ArrayRef = match field.data_type() {
                    DataType::Binary => Arc::new(BinaryArray::from_iter_values(values.iter())),
                    _ => {
                        let strings = values
                            .iter()
                            .map(|v| std::str::from_utf8(v).map_err(|_| WeirError::user("not valid UTF-8")))
                            .collect::<Result<Vec<_>>>()?;
                        Arc::new(StringArray::from(strings))
                    }
                };
                Ok(Some(RecordBatch::try_new(self.schema.clone(), vec![column])?))
            }
            Codec::Json | Codec::DebeziumJson => {
                let mut decoder = datafusion::arrow::json::ReaderBuilder::new(self.schema.clone())
                    .with_batch_size(values.len().max(1))
                    .build_decoder()?;
                for v in values {
                    // One record, one row: a value that is not a complete object fails here.
                    let before = decoder.len();
                    let mut at = 0;
                    while at < v.len() {
                        let read = decoder.decode(&v[at..])?;
                        if read == 0 {
                            break;
                        }
                        at += read;
                    }
                    decoder.decode(b"\n")?;
                    if decoder.len() != before + 1 {
                        return Err(WeirError::user("not one complete JSON object"));
                    }
                }
                Ok(decoder.flush()?)
            }
            Codec::Csv { delimiter } => {
                let mut decoder = datafusion::arrow::csv::ReaderBuilder::new(self.schema.clone())
                    .with_delimiter(*delimiter)
                    .with_batch_size(values.len().max(1))
                    .build_decoder();
                let mut text = Vec::with_capacity(values.iter().map(|v| v.len() + 1).sum());
                for v in values {
                    if v.contains(&b'\n') {
                        return Err(WeirError::user("a line break inside a CSV record"));
                    }
                    text.extend_from_slice(v);
                    text.push(b'\n');
                }
                let mut at = 0;
                while at < text.len() {
                    let read = decoder.decode(&text[at..])?;
                    if read == 0 {
                        break;
                    }
                    at += read;
                }
                let batch = decoder.flush()?;
                if batch.as_ref().map_or(0, |b| b.num_rows()) != values.len() {
                    return Err(WeirError::user("not one CSV record per Kafka record"));
                }
                Ok(batch)
            }
        }
    }

    /// The records' values as one batch, applying the malformed-record policy; with the
    /// records kept, when some were skipped.
    pub fn decode(&mut self, values: &[&[u8]], at: &[RecordAt]) -> Result<Option<(RecordBatch, Option<Vec<usize>>)>> {
        if values.is_empty() {
            return Ok(None);
        }
        if let Ok(batch) = self.decode_all(values) {
            return Ok(batch.map(|b| (b, None)));
        }
        let mut good: Vec<&[u8]> = Vec::with_capacity(values.len());
        let mut kept = Vec::with_capacity(values.len());
        for (i, (v, where_)) in values.iter().zip(at).enumerate() {
            match self.decode_all(&[v]) {
                Ok(_) => {
                    good.push(v);
                    kept.push(i);
                }
                Err(_) if self.policy == ParsePolicy::Skip => self.skipped += 1,
                Err(e) => return Err(self.malformed(where_, &e)),
            }
        }
        if good.is_empty() {
            return Ok(None);
        }
        Ok(self.decode_all(&good)?.map(|b| (b, Some(kept))))
    }

    fn malformed(&self, at: &RecordAt, e: &WeirError) -> WeirError {
        WeirError::user(format!(
            "malformed {} record in topic '{}' partition {} at offset {}: {} \
             (set 'format.ignore-parse-errors' = 'true' to skip such records)",
            self.codec.name(),
            self.topic,
            at.partition,
            at.offset,
            e.message.trim_start_matches("Json error: ")
        ))
    }

    fn decode_events(&mut self, values: &[&[u8]]) -> Result<Option<(RecordBatch, Vec<Op>, Vec<usize>)>> {
        let avro = self.avro.as_mut().ok_or_else(|| WeirError::internal("an Avro table without its decoder"))?;
        match avro.decode(values)? {
            Some(events) => Ok(Some(crate::format::avro::changes(&events, &self.schema)?)),
            None => Ok(None),
        }
    }

    /// `debezium-avro-confluent` records as rows with their ops and records, applying the
    /// malformed-record policy (an empty record, a tombstone, is nothing).
    pub fn decode_changes(
        &mut self,
        values: &[&[u8]],
        at: &[RecordAt],
    ) -> Result<Option<(RecordBatch, Vec<Op>, Vec<RecordAt>)>> {
        let (values, at): (Vec<&[u8]>, Vec<&RecordAt>) =
            values.iter().zip(at).filter(|(v, _)| !v.is_empty()).map(|(v, a)| (*v, a)).unzip();
        if values.is_empty() {
            return Ok(None);
        }
        let all = self.decode_events(&values);
        let (good, kept): (Vec<&[u8]>, Vec<&RecordAt>) = match all {
            Ok(Some((rows, ops, event))) => {
                let records = event.iter().map(|e| at[*e].clone()).collect();
                return Ok(Some((rows, ops, records)));
            }
            Ok(None) => return Ok(None),
            Err(_) => {
                let mut good = (Vec::new(), Vec::new());
                for (v, where_) in values.iter().zip(&at) {
                    match self.decode_events(&[v]) {
                        Ok(_) => {
                            good.0.push(*v);
                            good.1.push(*where_);
                        }
                        Err(_) if self.policy == ParsePolicy::Skip => self.skipped += 1,
                        Err(e) => return Err(self.malformed(where_, &e)),
                    }
                }
                good
            }
        };
        if good.is_empty() {
            return Ok(None);
        }
        Ok(self.decode_events(&good)?.map(|(rows, ops, event)| {
            let records = event.iter().map(|e| kept[*e].clone()).collect();
            (rows, ops, records)
        }))
    }
}

/// Each row of `batch` as one value: JSON objects or CSV lines, written a batch at a time.
pub fn encode(codec: &Codec, batch: &RecordBatch) -> Result<Vec<Vec<u8>>> {
    let mut buf = Vec::with_capacity(batch.num_rows() * 64);
    match codec {
        Codec::Json | Codec::DebeziumJson => {
            let mut writer = datafusion::arrow::json::LineDelimitedWriter::new(&mut buf);
            writer.write(batch)?;
            writer.finish()?;
        }
        Codec::Csv { delimiter } => {
            let mut writer = datafusion::arrow::csv::WriterBuilder::new()
                .with_header(false)
                .with_delimiter(*delimiter)
                .build(&mut buf);
            writer.write(batch)?;
        }
        Codec::Raw => {
            let column = batch.column(0);
            if let Some(s) = column.as_any().downcast_ref::<StringArray>() {
                return Ok(s.iter().map(|v| v.unwrap_or("").as_bytes().to_vec()).collect());
            }
            if let Some(b) = column.as_any().downcast_ref::<BinaryArray>() {
                return Ok(b.iter().map(|v| v.unwrap_or(&[]).to_vec()).collect());
            }
            return Err(WeirError::user("format 'raw' writes one STRING or BYTES column"));
        }
        Codec::Avro | Codec::AvroConfluent(_) => {
            return Err(WeirError::internal("Avro rows are encoded by the topic writer's encoder"))
        }
    }
    let mut rows: Vec<Vec<u8>> = buf.split(|b| *b == b'\n').map(|l| l.to_vec()).collect();
    // The text ends with a line break: one empty piece after it.
    if rows.len() != batch.num_rows() + 1 {
        return Err(WeirError::user("a CSV value contains a line break: write this table with format 'json'"));
    }
    rows.pop();
    Ok(rows)
}

/// The rows of one Debezium change event, with their ops (see the module documentation).
pub fn debezium_rows(value: &[u8]) -> std::result::Result<Vec<(Op, Vec<u8>)>, String> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    let v: serde_json::Value = serde_json::from_slice(value).map_err(|e| format!("not JSON: {e}"))?;
    let event = match (v.get("payload"), v.get("schema")) {
        (Some(payload), Some(_)) => payload,
        _ => &v,
    };
    let row = |name: &str| -> std::result::Result<Vec<u8>, String> {
        match event.get(name) {
            Some(o @ serde_json::Value::Object(_)) => serde_json::to_vec(o).map_err(|e| e.to_string()),
            Some(serde_json::Value::Null) | None => Err(format!("the event has no '{name}' row")),
            Some(_) => Err(format!("'{name}' is not an object")),
        }
    };
    match event.get("op").and_then(|o| o.as_str()) {
        Some("c" | "r") => Ok(vec![(Op::Insert, row("after")?)]),
        Some("u") => {
            let before = row("before")
                .map_err(|e| format!("{e}: an update needs its old row (for PostgreSQL, REPLICA IDENTITY FULL)"))?;
            Ok(vec![(Op::UpdateBefore, before), (Op::UpdateAfter, row("after")?)])
        }
        Some("d") => Ok(vec![(Op::Delete, row("before")?)]),
        Some(other) => Err(format!("unknown op '{other}' (Debezium's are c, r, u and d)")),
        None => Err("no 'op'".into()),
    }
}

/// Rows encoded as JSON objects wrapped as Debezium change events by their ops.
pub fn debezium_events(rows: Vec<Vec<u8>>, ops: &[Op]) -> Vec<Vec<u8>> {
    rows.into_iter()
        .zip(ops)
        .map(|(row, op)| {
            let (before, after, code): (&[u8], &[u8], &str) = match op {
                Op::Insert | Op::UpdateAfter => (b"null", &row, "c"),
                Op::UpdateBefore | Op::Delete => (&row, b"null", "d"),
            };
            [b"{\"before\":", before, b",\"after\":", after, b",\"op\":\"", code.as_bytes(), b"\"}"].concat()
        })
        .collect()
}

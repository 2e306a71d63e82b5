//! Avro records, through arrow-avro a batch at a time: Flink's `avro` format (each record the
//! Avro binary encoding of a row, with the schema Flink derives from the table) and
//! `avro-confluent` (Confluent's framing: a zero byte and the writer schema's registry id,
//! then the binary encoding; read with the writer's schema resolved against the table's).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_avro::reader::ReaderBuilder;
use arrow_avro::schema::{
    AvroSchema, Fingerprint, FingerprintAlgorithm, FingerprintStrategy, SchemaStore, SCHEMA_METADATA_KEY,
};
use arrow_avro::writer::format::{AvroBinaryFormat, AvroSoeFormat};
use arrow_avro::writer::WriterBuilder;
use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use serde_json::{json, Value as Json};
use weir_core::{sql_type_name, Op, Result, WeirError};

/// The Avro schema Flink's `AvroSchemaConverter` derives from a table's columns: a record
/// named `record` (nested rows `record_<field>`), nullable columns as `["null", T]` with a
/// null default, TIMESTAMP as `timestamp-millis`/`-micros`, DECIMAL as `bytes` `decimal`.
pub fn table_schema(table: &str, schema: &Schema) -> Result<String> {
    let fields: Vec<Json> = schema.fields().iter().map(|f| field(table, "record", f)).collect::<Result<_>>()?;
    Ok(json!({"type": "record", "name": "record", "namespace": "org.apache.flink.avro.generated", "fields": fields})
        .to_string())
}

/// The Avro schema of Debezium change events whose rows are the table's, as Flink's
/// `debezium-avro-confluent` derives it: a record of `before` and `after` (nullable rows) and
/// `op`.
pub fn envelope_schema(table: &str, schema: &Schema) -> Result<String> {
    table_schema(table, &envelope_arrow(schema))
}

fn envelope_arrow(schema: &Schema) -> Schema {
    let row = DataType::Struct(schema.fields().clone());
    Schema::new(vec![
        Field::new("before", row.clone(), true),
        Field::new("after", row, true),
        Field::new("op", DataType::Utf8, true),
    ])
}

/// The rows of decoded change events with their ops and each row's event: `c` and `r` insert
/// `after`, `u` is the pair (`before`, `after`), `d` deletes `before`.
pub fn changes(events: &RecordBatch, table: &SchemaRef) -> Result<(RecordBatch, Vec<Op>, Vec<usize>)> {
    use datafusion::arrow::array::{Array, AsArray, StructArray};
    let column = |name: &str| {
        events.column_by_name(name).ok_or_else(|| WeirError::internal(format!("a change event without '{name}'")))
    };
    let (before, after) = (column("before")?.as_struct(), column("after")?.as_struct());
    let op = cast(column("op")?, &DataType::Utf8)?;
    let op = op.as_string::<i32>();
    let (mut take, mut ops, mut event) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..events.num_rows() {
        let row = |side: &StructArray, which: usize, name: &str| {
            if side.is_null(i) {
                return Err(WeirError::user(format!("the event has no '{name}' row")));
            }
            Ok((which, i))
        };
        let code = if op.is_null(i) { "" } else { op.value(i) };
        match code {
            "c" | "r" => {
                take.push(row(after, 1, "after")?);
                ops.push(Op::Insert);
            }
            "u" => {
                let old = row(before, 0, "before").map_err(|e| {
                    WeirError::user(format!(
                        "{}: an update needs its old row (for PostgreSQL, REPLICA IDENTITY FULL)",
                        e.message
                    ))
                })?;
                take.extend([old, row(after, 1, "after")?]);
                ops.extend([Op::UpdateBefore, Op::UpdateAfter]);
            }
            "d" => {
                take.push(row(before, 0, "before")?);
                ops.push(Op::Delete);
            }
            "" => return Err(WeirError::user("no 'op'")),
            other => return Err(WeirError::user(format!("unknown op '{other}' (Debezium's are c, r, u and d)"))),
        }
        event.resize(take.len(), i);
    }
    let sides: [&dyn Array; 2] = [before, after];
    let rows = datafusion::arrow::compute::interleave(&sides, &take)?;
    let (fields, columns, _) = rows.as_struct().clone().into_parts();
    let rows = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
    Ok((to_table(&rows, table)?, ops, event))
}

fn field(table: &str, parent: &str, f: &Field) -> Result<Json> {
    let t = avro_type(table, &format!("{parent}_{}", f.name()), f)?;
    Ok(match f.is_nullable() {
        true => json!({"name": f.name(), "type": ["null", t], "default": null}),
        false => json!({"name": f.name(), "type": t}),
    })
}

fn avro_type(table: &str, name: &str, f: &Field) -> Result<Json> {
    let unit = |u: &TimeUnit| match u {
        TimeUnit::Second | TimeUnit::Millisecond => "millis",
        _ => "micros",
    };
    Ok(match f.data_type() {
        DataType::Boolean => json!("boolean"),
        DataType::Int8 | DataType::Int16 | DataType::Int32 => json!("int"),
        DataType::Int64 => json!("long"),
        DataType::Float32 => json!("float"),
        DataType::Float64 => json!("double"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => json!("string"),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => json!("bytes"),
        DataType::Date32 => json!({"type": "int", "logicalType": "date"}),
        DataType::Time32(_) => json!({"type": "int", "logicalType": "time-millis"}),
        DataType::Time64(_) => json!({"type": "long", "logicalType": "time-micros"}),
        DataType::Timestamp(u, _) => json!({"type": "long", "logicalType": format!("timestamp-{}", unit(u))}),
        DataType::Decimal128(p, s) => json!({"type": "bytes", "logicalType": "decimal", "precision": p, "scale": s}),
        DataType::List(item) | DataType::LargeList(item) => {
            let t = avro_type(table, name, item)?;
            json!({"type": "array", "items": if item.is_nullable() { json!(["null", t]) } else { t }})
        }
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv)
                if kv.len() == 2 && matches!(kv[0].data_type(), DataType::Utf8 | DataType::Utf8View) =>
            {
                let t = avro_type(table, name, &kv[1])?;
                json!({"type": "map", "values": if kv[1].is_nullable() { json!(["null", t]) } else { t }})
            }
            _ => return Err(unsupported(table, f)),
        },
        DataType::Struct(fields) => {
            let fields: Vec<Json> = fields.iter().map(|c| field(table, name, c)).collect::<Result<_>>()?;
            json!({"type": "record", "name": name, "fields": fields})
        }
        _ => return Err(unsupported(table, f)),
    })
}

fn unsupported(table: &str, f: &Field) -> WeirError {
    WeirError::not_supported(format!(
        "table '{table}', column '{}': the Avro formats have no type for {}",
        f.name(),
        sql_type_name(f.data_type())
    ))
}

pub fn avro_error(e: impl std::fmt::Display) -> WeirError {
    WeirError::user(format!("Avro: {e}"))
}

/// The Arrow types arrow-avro reads an Avro schema as (what a batch is cast to before it is
/// encoded with that schema).
pub fn arrow_schema_of(avro: &str) -> Result<SchemaRef> {
    let mut store = SchemaStore::new_with_type(FingerprintAlgorithm::Id);
    store.set(Fingerprint::Id(0), AvroSchema::new(avro.to_string())).map_err(avro_error)?;
    let decoder = ReaderBuilder::new()
        .with_writer_schema_store(store)
        .with_active_fingerprint(Fingerprint::Id(0))
        .build_decoder()
        .map_err(avro_error)?;
    Ok(decoder.schema())
}

/// `batch` (the table's columns) in the Arrow types arrow-avro writes `avro` from, the Avro
/// schema in the batch's metadata.
pub fn conform(avro: &str, arrow: &SchemaRef, batch: &RecordBatch) -> Result<RecordBatch> {
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .zip(arrow.fields())
        .map(|(a, f)| if a.data_type() == f.data_type() { Ok(a.clone()) } else { cast(a, f.data_type()) })
        .collect::<std::result::Result<_, _>>()?;
    let fields: Vec<Field> = arrow
        .fields()
        .iter()
        .zip(batch.schema().fields())
        .map(|(f, b)| f.as_ref().clone().with_nullable(b.is_nullable() || f.is_nullable()))
        .collect();
    let metadata = HashMap::from([(SCHEMA_METADATA_KEY.to_string(), avro.to_string())]);
    Ok(RecordBatch::try_new(Arc::new(Schema::new_with_metadata(fields, metadata)), columns)?)
}

/// Rows to Avro records with one writer schema, a batch at a time.
pub struct AvroEncoder {
    avro: String,
    arrow: SchemaRef,
    /// The registry id that frames each record (`avro-confluent`); none for plain `avro`.
    id: Option<u32>,
}

impl AvroEncoder {
    pub fn new(avro: String, id: Option<u32>) -> Result<Self> {
        let arrow = arrow_schema_of(&avro)?;
        Ok(Self { avro, arrow, id })
    }

    /// Each row of `batch` (the table's columns, in the schema's order) as one record.
    pub fn encode(&self, batch: &RecordBatch) -> Result<Vec<Vec<u8>>> {
        let batch = conform(&self.avro, &self.arrow, batch)?;
        let schema = batch.schema().as_ref().clone();
        let builder = WriterBuilder::new(schema);
        let mut encoder = match self.id {
            Some(id) => builder.with_fingerprint_strategy(FingerprintStrategy::Id(id)).build_encoder::<AvroSoeFormat>(),
            None => builder.build_encoder::<AvroBinaryFormat>(),
        }
        .map_err(avro_error)?;
        encoder.encode(&batch).map_err(avro_error)?;
        let rows = encoder.flush();
        Ok(rows.iter().map(|r| r.to_vec()).collect())
    }
}

impl AvroEncoder {
    /// Change events for a Debezium topic, as Flink writes them: `+I` and `+U` as `c` events
    /// with `after`, `-U` and `-D` as `d` events with `before`. The encoder's schema is
    /// [`envelope_schema`]'s.
    pub fn encode_changes(&self, batch: &RecordBatch, ops: &[Op]) -> Result<Vec<Vec<u8>>> {
        use datafusion::arrow::array::{StringArray, StructArray};
        use datafusion::arrow::buffer::NullBuffer;
        let fields = batch.schema().fields().clone();
        let inserted: Vec<bool> = ops.iter().map(|o| matches!(o, Op::Insert | Op::UpdateAfter)).collect();
        let side = |present: NullBuffer| -> Result<ArrayRef> {
            Ok(Arc::new(StructArray::try_new(fields.clone(), batch.columns().to_vec(), Some(present))?))
        };
        let before = side(NullBuffer::from(inserted.iter().map(|i| !i).collect::<Vec<_>>()))?;
        let after = side(NullBuffer::from(inserted.clone()))?;
        let op: ArrayRef = Arc::new(StringArray::from_iter_values(inserted.iter().map(|i| if *i { "c" } else { "d" })));
        let events = RecordBatch::try_new(Arc::new(envelope_arrow(&batch.schema())), vec![before, after, op])?;
        self.encode(&events)
    }
}

/// Avro records to rows of the table's columns: plain records (all written with the table's
/// schema) or Confluent-framed ones, each decoded with its writer's schema (by id) and
/// resolved against the table's (a field added with a default, one dropped). The reader
/// schema takes each writer's record names (see [`with_writer_names`]): a topic's schemas
/// are named by whoever registered them, and Avro resolves records by name.
pub struct AvroDecoder {
    reader: Json,
    table: SchemaRef,
    framed: bool,
    /// Debezium change events (`before`, `after`, `op`) whose rows are the table's.
    envelope: bool,
    /// Writer schemas by registry id; for plain records, the table's under id 0.
    writers: HashMap<u32, String>,
    /// A decoder per writer schema, built on first use.
    decoders: HashMap<u32, arrow_avro::reader::Decoder>,
}

/// Rows per batch of the streaming decoder.
const BATCH: usize = 8192;

impl AvroDecoder {
    /// `reader`: the table's Avro schema ([`table_schema`]), or for change events
    /// [`envelope_schema`]'s.
    pub fn new(reader: String, table: SchemaRef, framed: bool, envelope: bool) -> Result<Self> {
        let writers = match framed {
            true => HashMap::new(),
            false => HashMap::from([(0, reader.clone())]),
        };
        let reader = serde_json::from_str(&reader).map_err(avro_error)?;
        Ok(Self { reader, table, framed, envelope, writers, decoders: HashMap::new() })
    }

    /// The writer schema ids of Confluent-framed records that are not known yet.
    pub fn unknown_ids(&self, values: &[&[u8]]) -> Vec<u32> {
        let mut ids: Vec<u32> =
            values.iter().filter_map(|v| framed_id(v)).filter(|id| !self.writers.contains_key(id)).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    pub fn add_writer(&mut self, id: u32, schema: String) {
        self.writers.insert(id, schema);
        self.decoders.remove(&id);
    }

    /// Each record's writer id (0 for plain records); an error for one not framed or of an
    /// id the registry lacks.
    fn ids(&self, values: &[&[u8]]) -> Result<Vec<u32>> {
        if !self.framed {
            return Ok(vec![0; values.len()]);
        }
        values
            .iter()
            .map(|v| {
                let id = framed_id(v).ok_or_else(|| {
                    WeirError::user("not in Confluent's Avro framing (a zero byte and a 4-byte schema id)")
                })?;
                match self.writers.contains_key(&id) {
                    true => Ok(id),
                    false => Err(WeirError::user(format!("schema id {id} is not in the schema registry"))),
                }
            })
            .collect()
    }

    /// The records as one batch of the table's columns (or, for change events, of
    /// `before`, `after` and `op`); an error if any record does not decode (the caller
    /// then finds which, record by record).
    pub fn decode(&mut self, values: &[&[u8]]) -> Result<Option<RecordBatch>> {
        let ids = self.ids(values)?;
        let mut batches = Vec::new();
        let mut from = 0;
        // Runs of records of one writer schema, each through its decoder.
        while from < values.len() {
            let id = ids[from];
            let to = ids[from..].iter().position(|i| *i != id).map_or(values.len(), |n| from + n);
            let mut buf = Vec::with_capacity(values[from..to].iter().map(|v| v.len() + 5).sum());
            for v in &values[from..to] {
                if !self.framed {
                    // Plain records get the framing of the table's schema (id 0), which the
                    // streaming decoder reads records by.
                    buf.extend_from_slice(&[0, 0, 0, 0, 0]);
                }
                buf.extend_from_slice(v);
            }
            let result = self.decode_run(id, &buf, to - from);
            if result.is_err() {
                // Its state is that of a record cut short: start afresh.
                self.decoders.remove(&id);
            }
            batches.extend(result?);
            from = to;
        }
        let Some(first) = batches.first() else { return Ok(None) };
        let batch = datafusion::arrow::compute::concat_batches(&first.schema(), &batches)?;
        if self.envelope {
            return Ok(Some(batch));
        }
        Ok(Some(to_table(&batch, &self.table)?))
    }

    fn decoder(&mut self, id: u32) -> Result<&mut arrow_avro::reader::Decoder> {
        if !self.decoders.contains_key(&id) {
            let text =
                self.writers.get(&id).ok_or_else(|| WeirError::internal("an Avro writer schema went missing"))?;
            let writer: Json = serde_json::from_str(text).map_err(avro_error)?;
            let reader = with_writer_names(&self.reader, &writer, &mut Default::default());
            let mut store = SchemaStore::new_with_type(FingerprintAlgorithm::Id);
            store.set(Fingerprint::Id(id), AvroSchema::new(text.clone())).map_err(avro_error)?;
            let decoder = ReaderBuilder::new()
                .with_writer_schema_store(store)
                .with_reader_schema(AvroSchema::new(reader.to_string()))
                .with_batch_size(BATCH)
                .build_decoder()
                .map_err(avro_error)?;
            self.decoders.insert(id, decoder);
        }
        self.decoders.get_mut(&id).ok_or_else(|| WeirError::internal("no Avro decoder"))
    }

    fn decode_run(&mut self, id: u32, buf: &[u8], records: usize) -> Result<Vec<RecordBatch>> {
        let decoder = self.decoder(id)?;
        let (mut at, mut batches) = (0, Vec::new());
        while at < buf.len() {
            let read = decoder.decode(&buf[at..]).map_err(avro_error)?;
            at += read;
            if decoder.batch_is_full() || read == 0 {
                match decoder.flush().map_err(avro_error)? {
                    Some(b) => batches.push(b),
                    None if read == 0 => return Err(WeirError::user("a record shorter than its Avro encoding")),
                    None => {}
                }
            }
        }
        if let Some(b) = decoder.flush().map_err(avro_error)? {
            batches.push(b);
        }
        if batches.iter().map(RecordBatch::num_rows).sum::<usize>() != records {
            return Err(WeirError::user("not one Avro record per value"));
        }
        Ok(batches)
    }
}

/// `batch`'s columns cast to the table's types.
fn to_table(batch: &RecordBatch, table: &SchemaRef) -> Result<RecordBatch> {
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .zip(table.fields())
        .map(|(a, f)| if a.data_type() == f.data_type() { Ok(a.clone()) } else { cast(a, f.data_type()) })
        .collect::<std::result::Result<_, _>>()?;
    Ok(RecordBatch::try_new(table.clone(), columns)?)
}

/// `reader` with each record named as the writer's record in the same place (with its
/// namespace and aliases), and a record the writer names again written as that name: Avro
/// resolves a record only against one of the same name, and the table's schema names its
/// records as Flink does (`record`, `record_<field>`), which other writers do not.
pub fn with_writer_names(reader: &Json, writer: &Json, defined: &mut std::collections::HashSet<String>) -> Json {
    match (reader, writer) {
        // A nullable reader type against the writer's union (or its one type).
        (Json::Array(branches), _) => {
            let writer_branches: Vec<&Json> = match writer {
                Json::Array(w) => w.iter().collect(),
                w => vec![w],
            };
            let adapted = branches.iter().map(|b| {
                if kind(b) != Some("record") {
                    return b.clone();
                }
                match writer_branches.iter().find(|w| is_record(w, defined)) {
                    Some(w) => with_writer_names(b, w, defined),
                    None => b.clone(),
                }
            });
            Json::Array(adapted.collect())
        }
        (Json::Object(r), _) if kind(reader) == Some("record") => {
            if let Json::String(name) = writer {
                if defined.contains(name) {
                    return Json::String(name.clone());
                }
            }
            let Json::Object(w) = writer else { return reader.clone() };
            if w.get("type").and_then(Json::as_str) != Some("record") {
                return reader.clone();
            }
            let mut out = r.clone();
            for key in ["name", "namespace", "aliases"] {
                match w.get(key) {
                    Some(v) => out.insert(key.to_string(), v.clone()),
                    None => out.remove(key),
                };
            }
            if let Some(name) = w.get("name").and_then(Json::as_str) {
                defined.insert(name.to_string());
                if let Some(ns) = w.get("namespace").and_then(Json::as_str) {
                    defined.insert(format!("{ns}.{name}"));
                }
            }
            let writer_fields = w.get("fields").and_then(Json::as_array);
            if let Some(Json::Array(fields)) = r.get("fields") {
                let fields = fields
                    .iter()
                    .map(|f| {
                        let name = f.get("name");
                        let theirs = writer_fields.and_then(|w| w.iter().find(|x| x.get("name") == name));
                        match (f.get("type"), theirs.and_then(|t| t.get("type"))) {
                            (Some(rt), Some(wt)) => {
                                let mut f = f.clone();
                                f["type"] = with_writer_names(rt, wt, defined);
                                f
                            }
                            _ => f.clone(),
                        }
                    })
                    .collect();
                out.insert("fields".into(), Json::Array(fields));
            }
            Json::Object(out)
        }
        (Json::Object(r), Json::Object(w)) => {
            // Arrays and maps: their items or values.
            let mut out = r.clone();
            for key in ["items", "values"] {
                if let (Some(rt), Some(wt)) = (r.get(key), w.get(key)) {
                    out.insert(key.to_string(), with_writer_names(rt, wt, defined));
                }
            }
            Json::Object(out)
        }
        _ => reader.clone(),
    }
}

fn kind(t: &Json) -> Option<&str> {
    t.get("type").and_then(Json::as_str)
}

fn is_record(w: &Json, defined: &std::collections::HashSet<String>) -> bool {
    match w {
        Json::String(name) => defined.contains(name),
        w => kind(w) == Some("record"),
    }
}

/// The schema id of a Confluent-framed record.
pub fn framed_id(v: &[u8]) -> Option<u32> {
    match v {
        [0, a, b, c, d, ..] => Some(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Float64Array, Int64Array, StringArray};

    fn table() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("score", DataType::Float64, true),
        ]))
    }

    fn batch() -> RecordBatch {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![1, 2, 3])),
            Arc::new(StringArray::from(vec![Some("a"), None, Some("é")])),
            Arc::new(Float64Array::from(vec![Some(1.5), Some(-2.0), None])),
        ];
        RecordBatch::try_new(table(), columns).expect("batch")
    }

    #[test]
    fn plain_and_framed_records_read_back() -> Result<()> {
        let avro = table_schema("t", &table())?;
        let plain = AvroEncoder::new(avro.clone(), None)?.encode(&batch())?;
        assert_eq!(plain[0], vec![2, 2, 2, b'a', 2, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f]);
        let refs: Vec<&[u8]> = plain.iter().map(Vec::as_slice).collect();
        let mut decoder = AvroDecoder::new(avro.clone(), table(), false, false)?;
        assert_eq!(decoder.decode(&refs)?, Some(batch()));

        let framed = AvroEncoder::new(avro.clone(), Some(7))?.encode(&batch())?;
        assert_eq!(&framed[0][..5], &[0, 0, 0, 0, 7]);
        let refs: Vec<&[u8]> = framed.iter().map(Vec::as_slice).collect();
        let mut decoder = AvroDecoder::new(avro.clone(), table(), true, false)?;
        assert_eq!(decoder.unknown_ids(&refs), vec![7]);
        assert!(decoder.decode(&refs).is_err(), "an unknown writer schema");
        decoder.add_writer(7, avro);
        assert_eq!(decoder.decode(&refs)?, Some(batch()));
        Ok(())
    }

    /// A writer schema without `score` (an earlier version): read as NULL.
    #[test]
    fn an_earlier_writer_schema_is_resolved() -> Result<()> {
        let old = Arc::new(table().project(&[0, 1])?);
        let old_avro = table_schema("t", &old)?;
        let old_batch = batch().project(&[0, 1])?;
        let old_batch = RecordBatch::try_new(old.clone(), old_batch.columns().to_vec())?;
        let framed = AvroEncoder::new(old_avro.clone(), Some(1))?.encode(&old_batch)?;
        let refs: Vec<&[u8]> = framed.iter().map(Vec::as_slice).collect();
        let mut decoder = AvroDecoder::new(table_schema("t", &table())?, table(), true, false)?;
        decoder.add_writer(1, old_avro);
        let got = decoder.decode(&refs)?.expect("rows");
        assert_eq!(got.column(2).null_count(), 3);
        assert_eq!(got.column(1), batch().column(1));
        Ok(())
    }

    /// Debezium's names replace Flink's, and the second use of `Value` is a reference.
    #[test]
    fn reader_records_take_the_writers_names() -> Result<()> {
        let reader: Json =
            serde_json::from_str(&envelope_schema("t", &table().project(&[0, 1])?)?).map_err(avro_error)?;
        let writer = json!({"type": "record", "name": "Envelope", "namespace": "db.inv.customers", "fields": [
            {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
                {"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"]}]}]},
            {"name": "after", "type": ["null", "Value"]},
            {"name": "op", "type": "string"}]});
        let got = with_writer_names(&reader, &writer, &mut Default::default());
        assert_eq!(got["name"], "Envelope");
        assert_eq!(got["namespace"], "db.inv.customers");
        assert_eq!(got["fields"][0]["type"][1]["name"], "Value");
        assert!(got["fields"][0]["type"][1].get("namespace").is_none(), "inherits the envelope's");
        assert_eq!(got["fields"][1]["type"], json!(["null", "Value"]));
        assert_eq!(got["fields"][2], reader["fields"][2], "op is not a record");
        Ok(())
    }

    /// Change events to rows: `c`/`r` insert `after`, `u` is a pair, `d` deletes `before`;
    /// an update without `before` or an unknown op is an error.
    #[test]
    fn change_events_become_rows_with_ops() -> Result<()> {
        use datafusion::arrow::array::{StringArray, StructArray};
        use datafusion::arrow::buffer::NullBuffer;
        let rows = batch();
        let side = |present: Vec<bool>| -> Result<ArrayRef> {
            Ok(Arc::new(StructArray::try_new(
                rows.schema().fields().clone(),
                rows.columns().to_vec(),
                Some(NullBuffer::from(present)),
            )?))
        };
        let events = |ops: Vec<&str>, before: Vec<bool>, after: Vec<bool>| -> Result<RecordBatch> {
            let op: ArrayRef = Arc::new(StringArray::from(ops));
            Ok(RecordBatch::try_new(Arc::new(envelope_arrow(&table())), vec![side(before)?, side(after)?, op])?)
        };
        let (got, ops, event) =
            changes(&events(vec!["c", "u", "d"], vec![false, true, true], vec![true, true, false])?, &table())?;
        assert_eq!(ops, vec![Op::Insert, Op::UpdateBefore, Op::UpdateAfter, Op::Delete]);
        assert_eq!(event, vec![0, 1, 1, 2]);
        let ids = got.column(0).as_any().downcast_ref::<Int64Array>().expect("ids");
        assert_eq!(ids.values().to_vec(), vec![1, 2, 2, 3]);
        let err = changes(&events(vec!["u"; 3], vec![false; 3], vec![true; 3])?, &table()).err().expect("an error");
        assert!(err.message.contains("no 'before' row: an update needs its old row"), "{}", err.message);
        let err = changes(&events(vec!["x"; 3], vec![true; 3], vec![true; 3])?, &table()).err().expect("an error");
        assert!(err.message.contains("unknown op 'x'"), "{}", err.message);
        Ok(())
    }
}

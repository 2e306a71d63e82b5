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
use weir_core::{sql_type_name, Result, WeirError};

/// The Avro schema Flink's `AvroSchemaConverter` derives from a table's columns: a record
/// named `record` (nested rows `record_<field>`), nullable columns as `["null", T]` with a
/// null default, TIMESTAMP as `timestamp-millis`/`-micros`, DECIMAL as `bytes` `decimal`.
pub fn table_schema(table: &str, schema: &Schema) -> Result<String> {
    let fields: Vec<Json> = schema.fields().iter().map(|f| field(table, "record", f)).collect::<Result<_>>()?;
    Ok(json!({"type": "record", "name": "record", "namespace": "org.apache.flink.avro.generated", "fields": fields})
        .to_string())
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

fn avro_error(e: impl std::fmt::Display) -> WeirError {
    WeirError::user(format!("Avro: {e}"))
}

/// The Arrow types arrow-avro reads an Avro schema as (what a batch is cast to before it is
/// encoded with that schema).
fn arrow_schema_of(avro: &str) -> Result<SchemaRef> {
    let mut store = SchemaStore::new_with_type(FingerprintAlgorithm::Id);
    store.set(Fingerprint::Id(0), AvroSchema::new(avro.to_string())).map_err(avro_error)?;
    let decoder = ReaderBuilder::new()
        .with_writer_schema_store(store)
        .with_active_fingerprint(Fingerprint::Id(0))
        .build_decoder()
        .map_err(avro_error)?;
    Ok(decoder.schema())
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
        let columns: Vec<ArrayRef> = batch
            .columns()
            .iter()
            .zip(self.arrow.fields())
            .map(|(a, f)| if a.data_type() == f.data_type() { Ok(a.clone()) } else { cast(a, f.data_type()) })
            .collect::<std::result::Result<_, _>>()?;
        let fields: Vec<Field> = self
            .arrow
            .fields()
            .iter()
            .zip(batch.schema().fields())
            .map(|(f, b)| f.as_ref().clone().with_nullable(b.is_nullable() || f.is_nullable()))
            .collect();
        let metadata = HashMap::from([(SCHEMA_METADATA_KEY.to_string(), self.avro.clone())]);
        let schema = Schema::new_with_metadata(fields, metadata);
        let batch = RecordBatch::try_new(Arc::new(schema.clone()), columns)?;
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

/// Avro records to rows of the table's columns: plain records (all written with the table's
/// schema) or Confluent-framed ones, each decoded with its writer's schema (by id) and
/// resolved against the table's (a field added with a default, one dropped).
pub struct AvroDecoder {
    reader: String,
    table: SchemaRef,
    framed: bool,
    /// Writer schemas by registry id; for plain records, the table's under id 0.
    writers: HashMap<u32, String>,
    /// Built for the writer schemas known; rebuilt when one is added.
    decoder: Option<arrow_avro::reader::Decoder>,
}

/// Rows per batch of the streaming decoder.
const BATCH: usize = 8192;

impl AvroDecoder {
    pub fn new(reader: String, table: SchemaRef, framed: bool) -> Self {
        let writers = match framed {
            true => HashMap::new(),
            false => HashMap::from([(0, reader.clone())]),
        };
        Self { reader, table, framed, writers, decoder: None }
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
        self.decoder = None;
    }

    /// The records as one batch of the table's columns; an error if any record does not
    /// decode (the caller then finds which, record by record).
    pub fn decode(&mut self, values: &[&[u8]]) -> Result<Option<RecordBatch>> {
        let mut buf = Vec::with_capacity(values.iter().map(|v| v.len() + 5).sum());
        for v in values {
            match self.framed {
                true => {
                    let id = framed_id(v).ok_or_else(|| {
                        WeirError::user("not in Confluent's Avro framing (a zero byte and a 4-byte schema id)")
                    })?;
                    if !self.writers.contains_key(&id) {
                        return Err(WeirError::user(format!("schema id {id} is not in the schema registry")));
                    }
                    buf.extend_from_slice(v);
                }
                // Plain records get the framing of the table's schema (id 0), which the
                // streaming decoder reads records by.
                false => {
                    buf.extend_from_slice(&[0, 0, 0, 0, 0]);
                    buf.extend_from_slice(v);
                }
            }
        }
        let result = self.decode_framed(&buf, values.len());
        if result.is_err() {
            // Its state is that of a record cut short: start afresh.
            self.decoder = None;
        }
        result
    }

    fn decode_framed(&mut self, buf: &[u8], records: usize) -> Result<Option<RecordBatch>> {
        if self.decoder.is_none() {
            let mut store = SchemaStore::new_with_type(FingerprintAlgorithm::Id);
            for (id, s) in &self.writers {
                store.set(Fingerprint::Id(*id), AvroSchema::new(s.clone())).map_err(avro_error)?;
            }
            let decoder = ReaderBuilder::new()
                .with_writer_schema_store(store)
                .with_reader_schema(AvroSchema::new(self.reader.clone()))
                .with_batch_size(BATCH)
                .build_decoder()
                .map_err(avro_error)?;
            self.decoder = Some(decoder);
        }
        let decoder = self.decoder.as_mut().ok_or_else(|| WeirError::internal("no Avro decoder"))?;
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
        let Some(first) = batches.first() else { return Ok(None) };
        let batch = datafusion::arrow::compute::concat_batches(&first.schema(), &batches)?;
        if batch.num_rows() != records {
            return Err(WeirError::user("not one Avro record per value"));
        }
        let columns: Vec<ArrayRef> = batch
            .columns()
            .iter()
            .zip(self.table.fields())
            .map(|(a, f)| if a.data_type() == f.data_type() { Ok(a.clone()) } else { cast(a, f.data_type()) })
            .collect::<std::result::Result<_, _>>()?;
        Ok(Some(RecordBatch::try_new(self.table.clone(), columns)?))
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
        let mut decoder = AvroDecoder::new(avro.clone(), table(), false);
        assert_eq!(decoder.decode(&refs)?, Some(batch()));

        let framed = AvroEncoder::new(avro.clone(), Some(7))?.encode(&batch())?;
        assert_eq!(&framed[0][..5], &[0, 0, 0, 0, 7]);
        let refs: Vec<&[u8]> = framed.iter().map(Vec::as_slice).collect();
        let mut decoder = AvroDecoder::new(avro.clone(), table(), true);
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
        let mut decoder = AvroDecoder::new(table_schema("t", &table())?, table(), true);
        decoder.add_writer(1, old_avro);
        let got = decoder.decode(&refs)?.expect("rows");
        assert_eq!(got.column(2).null_count(), 3);
        assert_eq!(got.column(1), batch().column(1));
        Ok(())
    }
}

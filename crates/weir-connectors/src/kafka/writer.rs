//! Rows of a Kafka table as records: value (and key, timestamp and headers) encoded as the table's
//! formats say, sent through whichever producer the caller writes with (the sink's own, or
//! a worker task's one transactional producer).

use std::time::Duration;

use datafusion::arrow::array::Array;
use datafusion::arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, ProducerContext, ThreadedProducer};
use weir_core::{Chunk, Op, Result, TableDef, WeirError};

use super::codec::{encode, Codec};
use super::source::kafka_error;
use crate::format::avro::{envelope_schema, table_schema, AvroEncoder};

pub struct TopicWriter {
    table: String,
    topic: String,
    value: Codec,
    key: Option<(Codec, Vec<usize>)>,
    /// The Avro formats' encoders of the value and the key: plain ones made at once,
    /// Confluent ones by [`TopicWriter::prepare`] (registering the schema).
    value_avro: Option<AvroEncoder>,
    key_avro: Option<AvroEncoder>,
    /// `upsert-kafka`: changes are written by key.
    upsert: bool,
    /// Columns written as the value (metadata columns are not), and the column that gives
    /// the record timestamp (`METADATA FROM 'timestamp'`), if any.
    value_columns: Vec<usize>,
    timestamp_column: Option<usize>,
    /// The column whose map becomes each record's headers (`METADATA FROM 'headers'`).
    headers_column: Option<usize>,
}

impl TopicWriter {
    pub fn new(table: &TableDef, schema: &SchemaRef) -> Result<Self> {
        let value = Codec::from_table(
            table,
            if table.options.get("value.format").is_some() { "value.format" } else { "format" },
        )?;
        let upsert = table.options.get("connector") == Some("upsert-kafka");
        let key_fields = match upsert {
            true => Some(table.primary_key.join(";")),
            false => table.options.get("key.fields").map(str::to_string),
        };
        let key = match key_fields.as_deref() {
            None => None,
            Some(fields) => {
                let columns = fields
                    .split(';')
                    .map(|f| {
                        schema.index_of(f.trim()).map_err(|_| {
                            WeirError::user(format!(
                                "table '{}': 'key.fields' names '{f}', which is not a column",
                                table.name
                            ))
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                let codec = match table.options.get("key.format") {
                    Some(_) => Codec::from_table(table, "key.format")?,
                    None => Codec::Json,
                };
                Some((codec, columns))
            }
        };
        let value_columns: Vec<usize> =
            (0..schema.fields().len()).filter(|i| !table.metadata.contains_key(schema.field(*i).name())).collect();
        let plain = |codec: &Codec, columns: &[usize]| -> Result<Option<AvroEncoder>> {
            match codec {
                Codec::Avro => Ok(Some(AvroEncoder::new(table_schema(&table.name, &schema.project(columns)?)?, None)?)),
                _ => Ok(None),
            }
        };
        let value_avro = plain(&value, &value_columns)?;
        let key_avro = match &key {
            Some((codec, columns)) => plain(codec, columns)?,
            None => None,
        };
        Ok(Self {
            table: table.name.clone(),
            topic: super::topic(table)?,
            value,
            key,
            value_avro,
            key_avro,
            upsert,
            value_columns,
            timestamp_column: table
                .metadata
                .iter()
                .find(|(_, key)| key.as_str() == "timestamp")
                .and_then(|(column, _)| schema.index_of(column).ok()),
            headers_column: table
                .metadata
                .iter()
                .find(|(_, key)| key.as_str() == "headers")
                .and_then(|(column, _)| schema.index_of(column).ok()),
        })
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Register (or look up) the table's schemas in the registry of an `avro-confluent`
    /// format, once, before the first write.
    pub async fn prepare(&mut self, schema: &SchemaRef) -> Result<()> {
        if let (Codec::AvroConfluent(c), None) = (&self.value, &self.value_avro) {
            let columns = schema.project(&self.value_columns)?;
            let avro = match c.debezium {
                true => envelope_schema(&self.table, &columns)?,
                false => table_schema(&self.table, &columns)?,
            };
            let id = c.registry.id_for(&c.subject, &avro, c.register).await?;
            self.value_avro = Some(AvroEncoder::new(avro, Some(id))?);
        }
        if let (Some((Codec::AvroConfluent(c), columns)), None) = (&self.key, &self.key_avro) {
            let avro = table_schema(&self.table, &schema.project(columns)?)?;
            let id = c.registry.id_for(&c.subject, &avro, c.register).await?;
            self.key_avro = Some(AvroEncoder::new(avro, Some(id))?);
        }
        Ok(())
    }

    fn encode(
        codec: &Codec,
        avro: &Option<AvroEncoder>,
        batch: &datafusion::arrow::record_batch::RecordBatch,
    ) -> Result<Vec<Vec<u8>>> {
        match (codec, avro) {
            (Codec::Avro | Codec::AvroConfluent(_), Some(encoder)) => encoder.encode(batch),
            (Codec::Avro | Codec::AvroConfluent(_), None) => {
                Err(WeirError::internal("the Avro schema was not registered before the first write"))
            }
            _ => encode(codec, batch),
        }
    }

    /// Refuse a chunk the table's format cannot express (updates to a plain topic).
    pub fn check(&self, chunk: &Chunk) -> Result<()> {
        if !chunk.is_append_only() && !self.upsert && !self.value.is_changelog() {
            return Err(WeirError::not_supported(format!(
                "writing updates or deletes to the Kafka table '{}'",
                self.table
            )));
        }
        Ok(())
    }

    /// Send the chunk's rows: `upsert-kafka` writes `+I`/`+U` as the key's value, `-D` as a
    /// tombstone and skips `-U`. Delivery errors come through the producer's context.
    pub fn write(&self, producer: &impl RecordProducer, chunk: &Chunk) -> Result<()> {
        self.check(chunk)?;
        if chunk.num_rows() == 0 {
            return Ok(());
        }
        let rows = chunk.batch.project(&self.value_columns)?;
        let values = match (&self.value, &self.value_avro) {
            (Codec::DebeziumJson, _) => {
                super::codec::debezium_events(Self::encode(&self.value, &None, &rows)?, &chunk.ops())
            }
            (c, Some(encoder)) if c.is_debezium_avro() => encoder.encode_changes(&rows, &chunk.ops())?,
            _ => Self::encode(&self.value, &self.value_avro, &rows)?,
        };
        let timestamps = match self.timestamp_column {
            None => None,
            Some(c) => {
                let ms = datafusion::arrow::compute::cast(
                    chunk.batch.column(c),
                    &DataType::Timestamp(TimeUnit::Millisecond, None),
                )?;
                let ms = datafusion::arrow::compute::cast(&ms, &DataType::Int64)?;
                ms.as_any().downcast_ref::<datafusion::arrow::array::Int64Array>().cloned()
            }
        };
        let headers =
            self.headers_column.map(|c| super::metadata::headers_to_write(chunk.batch.column(c))).transpose()?;
        let keys = match &self.key {
            None => None,
            Some((codec, columns)) => Some(Self::encode(codec, &self.key_avro, &chunk.batch.project(columns)?)?),
        };
        for (i, value) in values.iter().enumerate() {
            let op = chunk.op(i);
            if self.upsert && op == Op::UpdateBefore {
                continue;
            }
            let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.topic);
            if !self.upsert || op != Op::Delete {
                record = record.payload(value.as_slice());
            }
            if let Some(keys) = &keys {
                record = record.key(keys[i].as_slice());
            }
            if let Some(ts) = timestamps.as_ref().filter(|t| t.is_valid(i)) {
                record = record.timestamp(ts.value(i));
            }
            if let Some(h) = headers.as_ref().and_then(|h| h[i].clone()) {
                record = record.headers(h);
            }
            send(producer, record, &self.table)?;
        }
        Ok(())
    }
}

/// A send's outcome: a record not taken comes back with the error, to be sent again.
pub type Sent<'a> = std::result::Result<(), (KafkaError, BaseRecord<'a, [u8], [u8]>)>;

/// A producer that rows are sent through: the sink's own, which its caller polls, or a worker
/// task's, which polls itself on a thread.
pub trait RecordProducer {
    // As rdkafka's own `send`: the record comes back whole to be sent again.
    #[allow(clippy::result_large_err)]
    fn send_record<'a>(&self, record: BaseRecord<'a, [u8], [u8]>) -> Sent<'a>;

    /// Serve the delivery reports that are ready: their messages hold space in librdkafka's
    /// queue until then.
    fn serve(&self) {}
}

impl<C: ProducerContext<DeliveryOpaque = ()>> RecordProducer for BaseProducer<C> {
    fn send_record<'a>(&self, record: BaseRecord<'a, [u8], [u8]>) -> Sent<'a> {
        self.send(record)
    }

    fn serve(&self) {
        super::producer::serve(self)
    }
}

impl<C: ProducerContext<DeliveryOpaque = ()>> RecordProducer for ThreadedProducer<C> {
    fn send_record<'a>(&self, record: BaseRecord<'a, [u8], [u8]>) -> Sent<'a> {
        self.send(record)
    }
}

/// How long a send waits for room in librdkafka's queue before the write fails: nothing
/// has been delivered for that long (the cluster is unreachable, or refuses every batch).
const QUEUE_FULL_TIMEOUT: Duration = Duration::from_secs(60);

/// Send one record, waiting while librdkafka's queue is full (serving what is delivered).
pub fn send(producer: &impl RecordProducer, mut record: BaseRecord<'_, [u8], [u8]>, table: &str) -> Result<()> {
    let mut full_since: Option<std::time::Instant> = None;
    loop {
        match producer.send_record(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                match full_since {
                    None => full_since = Some(std::time::Instant::now()),
                    Some(since) if since.elapsed() > QUEUE_FULL_TIMEOUT => {
                        return Err(WeirError::external(format!(
                            "Kafka: writing table '{table}': the producer's queue stayed full for {} s (nothing was \
                             delivered): is the cluster reachable?",
                            QUEUE_FULL_TIMEOUT.as_secs()
                        )));
                    }
                    Some(_) => std::thread::sleep(Duration::from_millis(1)),
                }
                producer.serve();
            }
            Err((e, _)) => return Err(kafka_error(&format!("writing table '{table}'"), e)),
        }
    }
}

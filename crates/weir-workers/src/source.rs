//! Reading one partition of a repartition topic, `read_committed`: the rows upstream tasks
//! committed, in the order they committed them, and their watermark markers. The partition's
//! watermark is the minimum of the latest marker of every upstream task; it ends when every
//! upstream task has sent its end-of-time marker (the last record each writes).

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use weir_core::{Op, Result, Source, TableDef, Watermark, WeirError};

use super::codec::{decode_chunk, parse_marker, MARKER};

pub struct RepartitionSource {
    consumer: BaseConsumer,
    topic: String,
    partition: i32,
    schema: SchemaRef,
    /// Next offset to read.
    next: i64,
    assigned: bool,
    /// Tasks of the sub-topology that writes the topic, and the latest marker of each.
    upstream: usize,
    marks: BTreeMap<usize, i64>,
    last_ops: Option<Vec<Op>>,
}

fn kafka(what: &str, e: rdkafka::error::KafkaError) -> WeirError {
    WeirError::external(format!("Kafka: {what}: {e}"))
}

impl RepartitionSource {
    pub fn new(table: &TableDef, partition: i32, upstream: usize) -> Result<Self> {
        let topic = table.options.get("topic").unwrap_or_default().to_string();
        let mut config = rdkafka::ClientConfig::new();
        for (property, value) in weir_connectors::kafka::properties(table)? {
            config.set(property, value);
        }
        config
            .set("group.id", format!("{topic}-reader"))
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("isolation.level", "read_committed")
            // Never jump over rows: an offset gone (retention shorter than the job's lag)
            // fails the task instead of skipping to the end.
            .set("auto.offset.reset", "error");
        let consumer: BaseConsumer = config.create().map_err(|e| kafka("cannot create a consumer", e))?;
        Ok(Self {
            consumer,
            topic,
            partition,
            schema: table.schema.clone(),
            next: 0,
            assigned: false,
            upstream,
            marks: BTreeMap::new(),
            last_ops: None,
        })
    }

    fn ended(&self) -> bool {
        self.marks.len() == self.upstream && self.marks.values().all(|w| *w == i64::MAX)
    }
}

#[async_trait]
impl Source for RepartitionSource {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if !self.assigned {
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(&self.topic, self.partition, Offset::Offset(self.next))
                .map_err(|e| kafka("cannot assign a partition", e))?;
            self.consumer.assign(&tpl).map_err(|e| kafka(&format!("cannot read topic '{}'", self.topic), e))?;
            self.assigned = true;
        }
        let mut wait = Duration::from_millis(1);
        loop {
            if self.ended() {
                return Ok(None);
            }
            // Polled without blocking; the wait is an await, so a read given up for a
            // barrier loses nothing (a record is taken only when it is returned).
            let Some(polled) = self.consumer.poll(Duration::ZERO) else {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_millis(20));
                continue;
            };
            let message = polled.map_err(|e| {
                kafka(
                    &format!("reading topic '{}', partition {} at offset {}", self.topic, self.partition, self.next),
                    e,
                )
            })?;
            self.next = message.offset() + 1;
            let is_marker = message.headers().is_some_and(|h| h.iter().any(|h| h.key == MARKER));
            let payload = message.payload().unwrap_or_default();
            if is_marker {
                let (task, watermark) = parse_marker(payload).ok_or_else(|| {
                    WeirError::internal(format!("a watermark marker in topic '{}' is damaged", self.topic))
                })?;
                log::debug!("{}/{}: marker of upstream task {task}: {watermark}", self.topic, self.partition);
                let before = self.watermark();
                let mark = self.marks.entry(task).or_insert(i64::MIN);
                *mark = (*mark).max(watermark);
                if self.watermark() != before {
                    self.last_ops = None;
                    return Ok(Some(RecordBatch::new_empty(self.schema.clone())));
                }
                continue;
            }
            let (batch, ops) = decode_chunk(payload, &self.schema)?;
            log::debug!(
                "{}/{}: read offset {}: {} rows",
                self.topic,
                self.partition,
                message.offset(),
                batch.num_rows()
            );
            self.last_ops = ops;
            return Ok(Some(batch));
        }
    }

    fn cancel_safe(&self) -> bool {
        true
    }

    fn batch_ops(&self) -> Option<Vec<Op>> {
        self.last_ops.clone()
    }

    fn watermark(&self) -> Option<Watermark> {
        if self.marks.len() < self.upstream {
            return None;
        }
        self.marks.values().min().map(|w| Watermark(*w))
    }

    fn offsets(&self) -> Vec<(String, i32, i64)> {
        vec![(self.topic.clone(), self.partition, self.next)]
    }

    fn position(&self) -> Option<Vec<u8>> {
        let marks: BTreeMap<String, i64> = self.marks.iter().map(|(t, w)| (t.to_string(), *w)).collect();
        serde_json::to_vec(&serde_json::json!({ "offset": self.next, "marks": marks })).ok()
    }

    fn seek(&mut self, position: &[u8]) -> Result<()> {
        let damaged = || WeirError::internal("a repartition topic's position in a checkpoint is damaged");
        let value: serde_json::Value = serde_json::from_slice(position).map_err(|_| damaged())?;
        self.next = value["offset"].as_i64().ok_or_else(damaged)?;
        let marks = value["marks"].as_object().ok_or_else(damaged)?;
        self.marks = marks
            .iter()
            .map(|(t, w)| Ok((t.parse().map_err(|_| damaged())?, w.as_i64().ok_or_else(damaged)?)))
            .collect::<Result<_>>()?;
        Ok(())
    }
}

//! The runtime end to end without SQL: idle sources (with Tokio's clock paused, so that
//! timeouts are exact whatever the machine's speed) and hash exchanges between stages.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::array::TimestampMillisecondArray;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::physical_expr::expressions::Column;
use tokio::time::Instant;
use weir_core::{Chunk, ConnectorFactory, Options, Result, Sink, Source, Split, TableDef, Watermark, WeirError};

use crate::{spawn_job, JobOptions, Node, OperatorSpec, Partitioning, SinkSpec};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), false)]))
}

/// Split 0 has one event at 1000 ms, then nothing more (a quiet partition). Split 1 has an
/// event every 100 ms of wall time, 1100 ms, 1200 ms, … of event time.
struct Partition {
    split: usize,
    sent: i64,
}

#[async_trait]
impl Source for Partition {
    fn schema(&self) -> SchemaRef {
        schema()
    }

    async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if self.split == 0 && self.sent > 0 {
            std::future::pending::<()>().await;
        }
        if self.split == 1 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.sent += 1;
        let ts = if self.split == 0 { 1000 } else { 1000 + 100 * self.sent };
        let column = Arc::new(TimestampMillisecondArray::from(vec![ts]));
        Ok(Some(RecordBatch::try_new(schema(), vec![column])?))
    }
}

struct Partitions;

impl ConnectorFactory for Partitions {
    fn validate(&self, _: &TableDef) -> Result<()> {
        Ok(())
    }
    fn source(&self, _: &TableDef, _: Option<Vec<usize>>, split: Split) -> Result<Box<dyn Source>> {
        Ok(Box::new(Partition { split: split.index, sent: 0 }))
    }
    fn sink(&self, _: &TableDef, _: SchemaRef, _: Split) -> Result<Box<dyn Sink>> {
        Err(WeirError::internal("not used"))
    }
}

/// Records when each watermark arrived.
struct Watermarks {
    start: Instant,
    seen: Arc<Mutex<Vec<(Duration, i64)>>>,
}

#[async_trait]
impl Sink for Watermarks {
    async fn write_chunk(&mut self, _: Chunk) -> Result<()> {
        Ok(())
    }
    async fn on_watermark(&mut self, w: Watermark) -> Result<()> {
        if let Ok(mut seen) = self.seen.lock() {
            seen.push((self.start.elapsed(), w.0));
        }
        Ok(())
    }
    async fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn an_idle_source_stops_holding_the_watermark_back_after_the_timeout_and_not_before() {
    let table = Arc::new(TableDef::new("events", schema(), Options::default()));
    let root = Node::Source { table, projection: None, schema: schema(), changelog: weir_core::Changelog::AppendOnly }
        .with_operator(OperatorSpec::Watermark { expr: Arc::new(Column::new("ts", 0)), display: "ts".into() });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let mut sink = Some(Watermarks { start, seen: seen.clone() });
    let spec = SinkSpec {
        name: "watermarks".into(),
        connector: "test".into(),
        parallel: false,
        make: Box::new(move |_| {
            Ok(Box::new(sink.take().ok_or_else(|| WeirError::internal("one sink"))?) as Box<dyn Sink>)
        }),
    };
    let options = JobOptions { parallelism: 2, idle_timeout: Some(Duration::from_secs(2)), ..Default::default() };
    let job = spawn_job(1, "idle".into(), vec![(root, spec)], Arc::new(Partitions), options).expect("job");
    tokio::time::sleep(Duration::from_secs(5)).await;
    job.cancel();
    job.wait().await.expect("cancelled");

    let seen = seen.lock().expect("watermarks").clone();
    // Before split 0 has been quiet for 2 s, the watermark is held at its event, 1000 ms.
    let before: Vec<_> = seen.iter().filter(|(t, _)| *t < Duration::from_secs(2)).collect();
    assert!(!before.is_empty(), "no watermark at all before the timeout: {seen:?}");
    assert!(before.iter().all(|(_, w)| *w == 1000), "advanced before the timeout: {seen:?}");
    // After it, the watermark follows split 1 alone: 1100 ms of event time per 100 ms of wall.
    let first_past = seen.iter().find(|(_, w)| *w > 1000).expect("never advanced");
    assert!(first_past.0 >= Duration::from_secs(2), "advanced at {:?}", first_past.0);
    let last = seen.last().map(|(_, w)| *w).unwrap_or_default();
    assert!(last >= 1000 + 100 * 45, "watermark stuck at {last}: {seen:?}");
}

/// Keeps the keys each sink task received.
struct Keys {
    task: usize,
    seen: Arc<Mutex<Vec<(usize, i64)>>>,
}

#[async_trait]
impl Sink for Keys {
    async fn write_chunk(&mut self, chunk: Chunk) -> Result<()> {
        use datafusion::arrow::array::{Array, Int64Array};
        let keys = chunk.batch.column(0).as_any().downcast_ref::<Int64Array>().cloned();
        let keys = keys.ok_or_else(|| WeirError::internal("keys are not Int64"))?;
        if let Ok(mut seen) = self.seen.lock() {
            seen.extend(keys.values().iter().map(|k| (self.task, *k)));
        }
        Ok(())
    }
    async fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_hash_exchange_sends_each_key_to_one_task_and_loses_nothing() {
    use datafusion::arrow::array::Int64Array;
    let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
    let batches = (0..5)
        .map(|b| {
            let keys: Vec<i64> = (0..2000).map(|i| (b * 2000 + i) % 37).collect();
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(keys))])
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .expect("batches");
    let root =
        Node::Exchange { partitioning: Partitioning::Hash(vec![0]), input: Box::new(Node::Values { batches, schema }) };
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sinks = seen.clone();
    let spec = SinkSpec {
        name: "keys".into(),
        connector: "test".into(),
        parallel: true,
        make: Box::new(move |split| Ok(Box::new(Keys { task: split.index, seen: sinks.clone() }) as Box<dyn Sink>)),
    };
    let options = JobOptions { parallelism: 3, ..Default::default() };
    let job = spawn_job(1, "exchange".into(), vec![(root, spec)], Arc::new(Partitions), options).expect("job");
    job.wait().await.expect("finished");

    let seen = seen.lock().expect("keys").clone();
    assert_eq!(seen.len(), 10_000, "rows lost or duplicated");
    let mut owner = std::collections::HashMap::new();
    for (task, key) in &seen {
        assert_eq!(*owner.entry(*key).or_insert(*task), *task, "key {key} reached two tasks");
    }
    assert_eq!(owner.len(), 37);
    let tasks: std::collections::HashSet<_> = owner.values().collect();
    assert_eq!(tasks.len(), 3, "some task got no key");
    assert_eq!(job.status().rows_written(), 10_000);
}

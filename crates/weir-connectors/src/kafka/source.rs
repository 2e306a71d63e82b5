//! Reading a Kafka topic, or the topics matching `'topic-pattern'` when the job starts. The
//! partitions, in (topic, partition) order, are spread over the source tasks (the `i`th to
//! task `i % tasks`); each task assigns its partitions itself (no consumer
//! group rebalancing) and reads from the offsets in the checkpoint it restarts from, or
//! from `'scan.startup.mode'`. Offsets are resolved to numbers at start, so a checkpoint
//! taken before a partition delivered anything still rewinds it to the same place.
//! `'scan.bounded.mode' = 'latest-offset'` ends the stream at the offsets the partitions had
//! when the job started.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use rdkafka::consumer::{BaseConsumer, Consumer};

use super::context::Watched;
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use weir_core::{Result, Source, Split, TableDef, WeirError};

use super::codec::{Codec, Decoder, RecordAt};
use super::metadata;
use super::scan_options::{specific_offsets, startup, Startup};
use crate::format::ParsePolicy;

const METADATA_TIMEOUT: Duration = Duration::from_secs(30);
const BATCH_ROWS: usize = 8192;

pub(crate) fn kafka_error(what: &str, e: KafkaError) -> WeirError {
    WeirError::external(format!("Kafka: {what}: {e}"))
}

pub struct KafkaSource {
    consumer: BaseConsumer<Watched>,
    topic: String,
    schema: SchemaRef,
    decoder: Decoder,
    /// This task's partitions (topic, partition); the index is the partition's id here.
    parts: Vec<(String, i32)>,
    index: std::collections::HashMap<(String, i32), u32>,
    /// Next offset to read, per partition of this task.
    positions: BTreeMap<u32, i64>,
    /// Bounded: where each partition ends (exclusive).
    ends: Option<BTreeMap<u32, i64>>,
    /// Startup offsets still to be resolved at the first read (a restore may replace them).
    assigned: bool,
    startup: Startup,
    /// Where each output column comes from.
    columns: Vec<Column>,
    /// A column holds the records' headers: only then are they read.
    wants_headers: bool,
    /// `'scan.records-per-second'`: at most this many records per second from this task.
    rate: Option<(f64, Instant, u64)>,
    /// A record polled for the next batch (each batch holds one partition's records).
    held: Option<(RecordAt, Vec<u8>)>,
    /// The next wait of the poll loop while nothing comes.
    idle_wait: Duration,
    last_partition: Option<u32>,
    /// `debezium-json` and `upsert-kafka`: the ops of the last batch's rows.
    last_ops: Option<Vec<weir_core::Op>>,
    upsert: bool,
    /// With `properties.group.id`: positions at checkpoints not yet complete, committed to the
    /// group when they are (for monitoring consumer lag; never read back by Weir).
    group_commits: Option<BTreeMap<u64, BTreeMap<u32, i64>>>,
    /// Replaying: where each partition's replay ends (exclusive), the position of the run
    /// being replayed ([`Source::replay_to`]).
    bound: Option<BTreeMap<u32, i64>>,
}

impl KafkaSource {
    pub fn new(table: &TableDef, projection: Option<Vec<usize>>, split: Split) -> Result<Self> {
        let topic = super::topic(table)?;
        let group = table.options.get("properties.group.id").map(str::to_string);
        let fixed =
            [("enable.auto.commit", "false"), ("enable.auto.offset.store", "false"), ("enable.partition.eof", "false")];
        let mut config = super::client_config(table, &fixed)?;
        if group.is_none() {
            // librdkafka wants a group id even without a group; nothing is committed to it.
            config.set("group.id", format!("weir-{}", table.name));
        }
        if table.options.get("properties.isolation.level").is_none() {
            config.set("isolation.level", "read_committed");
        }
        let context = Watched::default();
        let consumer: BaseConsumer<Watched> =
            config.create_with_context(context.clone()).map_err(|e| kafka_error("cannot create a consumer", e))?;
        // One topic, or every topic whose name matches 'topic-pattern' (when the job starts).
        let pattern = match table.options.get("topic-pattern") {
            None => None,
            Some(p) => Some(regex::Regex::new(&format!("^(?:{p})$")).map_err(|e| {
                WeirError::user(format!("table '{}': 'topic-pattern' is not a regular expression: {e}", table.name))
                    .at(table.options.location("topic-pattern"))
            })?),
        };
        let metadata = metadata(&consumer, &context, if pattern.is_some() { None } else { Some(topic.as_str()) })
            .map_err(|e| {
                let e = e.context(format!("table '{}': cannot read the metadata of Kafka topic '{topic}'", table.name));
                match certificate_check(table, &e) {
                    Some(precisely) => WeirError { message: format!("{}; checked again: {precisely}", e.message), ..e },
                    None => e,
                }
            })?;
        let mut all: Vec<(String, i32)> = metadata
            .topics()
            .iter()
            .filter(|t| t.error().is_none())
            .filter(|t| match &pattern {
                Some(p) => p.is_match(t.name()),
                None => t.name() == topic,
            })
            .flat_map(|t| t.partitions().iter().map(move |p| (t.name().to_string(), p.id())))
            .collect();
        all.sort();
        if all.is_empty() {
            return Err(WeirError::user(format!(
                "table '{}': topic '{topic}' does not exist or has no partitions",
                table.name
            )));
        }
        let parts: Vec<(String, i32)> =
            all.into_iter().enumerate().filter(|(i, _)| i % split.count == split.index).map(|(_, tp)| tp).collect();
        let index = parts.iter().enumerate().map(|(i, tp)| (tp.clone(), i as u32)).collect();
        let projection = projection.unwrap_or_else(|| (0..table.schema.fields().len()).collect());
        let schema = std::sync::Arc::new(table.schema.project(&projection)?);
        let codec = Codec::from_table(
            table,
            if table.options.get("value.format").is_some() { "value.format" } else { "format" },
        )?;
        // Decoding needs the value's columns: those the query reads (JSON maps by name), or
        // all of them (CSV maps by position); metadata columns come from the record.
        let is_value = |i: &usize| !table.metadata.contains_key(table.schema.field(*i).name());
        let value_columns: Vec<usize> = match codec {
            // By position: every value column, in order.
            Codec::Csv { .. } | Codec::Avro | Codec::AvroConfluent(_) => {
                (0..table.schema.fields().len()).filter(is_value).collect()
            }
            _ => projection.iter().copied().filter(is_value).collect(),
        };
        let decode_schema = std::sync::Arc::new(table.schema.project(&value_columns)?);
        let columns = projection
            .iter()
            .map(|i| {
                let field = table.schema.field(*i);
                match table.metadata.get(field.name()) {
                    Some(key) => Ok(Column::Metadata(metadata::metadata_key(table, key)?)),
                    None => Ok(Column::Value(decode_schema.index_of(field.name())?)),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let skip = ["format.ignore-parse-errors", "json.ignore-parse-errors", "csv.ignore-parse-errors"]
            .iter()
            .map(|k| table.options.bool(&table.name, k, false))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .any(|b| b);
        let decoder = Decoder::new(
            &table.name,
            codec,
            decode_schema,
            if skip { ParsePolicy::Skip } else { ParsePolicy::Fail },
            topic.clone(),
        )?;
        let startup = startup(table)?;
        let mut source = Self {
            consumer,
            topic: topic.clone(),
            schema,
            decoder,
            positions: (0..parts.len() as u32).map(|i| (i, -1)).collect(),
            parts,
            index,
            ends: None,
            assigned: false,
            startup,
            wants_headers: columns.iter().any(|c| matches!(c, Column::Metadata(metadata::MetadataKey::Headers))),
            columns,
            rate: None,
            held: None,
            idle_wait: super::IDLE_POLL,
            last_partition: None,
            last_ops: None,
            upsert: table.options.get("connector") == Some("upsert-kafka"),
            group_commits: group.is_some().then(BTreeMap::new),
            bound: None,
        };
        if let Some(rate) = table.options.get("scan.records-per-second") {
            let rate: f64 = rate.parse().ok().filter(|r: &f64| *r > 0.0).ok_or_else(|| {
                WeirError::user(format!("table '{}': 'scan.records-per-second' must be a positive number", table.name))
                    .at(table.options.location("scan.records-per-second"))
            })?;
            source.rate = Some((rate, Instant::now(), 0));
        }
        source.resolve_startup(group.is_some())?;
        match table.options.get("scan.bounded.mode") {
            None | Some("unbounded") => {}
            Some("latest-offset") => {
                let mut ends = BTreeMap::new();
                for (i, (t, p)) in source.parts.iter().enumerate() {
                    let (_, high) = source
                        .consumer
                        .fetch_watermarks(t, *p, METADATA_TIMEOUT)
                        .map_err(|e| kafka_error("cannot read the end offsets", e))?;
                    ends.insert(i as u32, high);
                }
                source.ends = Some(ends);
            }
            Some("specific-offsets") => {
                let given = specific_offsets(table)?;
                let mut ends = BTreeMap::new();
                for (i, (_, p)) in source.parts.iter().enumerate() {
                    let end = given.get(p).copied().ok_or_else(|| {
                        WeirError::user(format!(
                            "table '{}': 'scan.bounded.specific-offsets' gives no offset for partition {p} of topic '{topic}'",
                            table.name
                        ))
                        .at(table.options.location("scan.bounded.specific-offsets"))
                    })?;
                    ends.insert(i as u32, end);
                }
                source.ends = Some(ends);
            }
            Some(mode) => {
                return Err(WeirError::user(format!(
                    "table '{}': 'scan.bounded.mode' must be 'unbounded', 'latest-offset' or 'specific-offsets', not '{mode}'",
                    table.name
                ))
                .at(table.options.location("scan.bounded.mode")))
            }
        }
        Ok(source)
    }

    /// Startup offsets as numbers.
    fn resolve_startup(&mut self, has_group: bool) -> Result<()> {
        let list_of = |offset: Option<i64>| -> Result<TopicPartitionList> {
            let mut list = TopicPartitionList::new();
            for (t, p) in &self.parts {
                match offset {
                    None => {
                        list.add_partition(t, *p);
                    }
                    Some(o) => list
                        .add_partition_offset(t, *p, Offset::Offset(o))
                        .map_err(|e| kafka_error("a partition list", e))?,
                }
            }
            Ok(list)
        };
        let mut found: BTreeMap<u32, i64> = BTreeMap::new();
        let found_offsets = |list: TopicPartitionList, found: &mut BTreeMap<u32, i64>| {
            for e in list.elements() {
                if let (Offset::Offset(o), Some(i)) =
                    (e.offset(), self.index.get(&(e.topic().to_string(), e.partition())))
                {
                    found.insert(*i, o);
                }
            }
        };
        if self.startup == Startup::GroupOffsets && has_group {
            let offsets = self
                .consumer
                .committed_offsets(list_of(None)?, METADATA_TIMEOUT)
                .map_err(|e| kafka_error("cannot read the group's committed offsets", e))?;
            found_offsets(offsets, &mut found);
        }
        if let Startup::Timestamp(ms) = self.startup {
            let offsets = self
                .consumer
                .offsets_for_times(list_of(Some(ms))?, METADATA_TIMEOUT)
                .map_err(|e| kafka_error("cannot look up offsets for the startup timestamp", e))?;
            found_offsets(offsets, &mut found);
        }
        for (i, (t, p)) in self.parts.iter().enumerate() {
            let i = i as u32;
            let (low, high) = self
                .consumer
                .fetch_watermarks(t, *p, METADATA_TIMEOUT)
                .map_err(|e| kafka_error("cannot read a partition's offsets", e))?;
            let offset = match self.startup {
                Startup::Earliest => low,
                Startup::Latest => high,
                // A partition without a committed offset starts at the beginning.
                Startup::GroupOffsets => found.get(&i).copied().unwrap_or(low),
                Startup::Timestamp(_) => found.get(&i).copied().unwrap_or(high),
            };
            self.positions.insert(i, offset);
        }
        Ok(())
    }

    fn assign(&mut self) -> Result<()> {
        let mut list = TopicPartitionList::new();
        for (i, offset) in &self.positions {
            let (t, p) = &self.parts[*i as usize];
            list.add_partition_offset(t, *p, Offset::Offset(*offset))
                .map_err(|e| kafka_error("cannot assign a partition", e))?;
        }
        self.consumer.assign(&list).map_err(|e| kafka_error("cannot assign partitions", e))?;
        self.assigned = true;
        Ok(())
    }

    fn finished(&self) -> bool {
        self.ends
            .as_ref()
            .is_some_and(|ends| ends.iter().all(|(p, end)| self.positions.get(p).is_some_and(|o| o >= end)))
    }
}

#[async_trait]
impl Source for KafkaSource {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if !self.assigned {
            self.assign()?;
        }
        loop {
            if self.finished() {
                return Ok(None);
            }
            let mut values: Vec<Vec<u8>> = Vec::new();
            let mut at: Vec<RecordAt> = Vec::new();
            // Throttled: small batches, each when its time has come.
            let limit = match &self.rate {
                Some((rate, _, _)) => ((rate / 20.0) as usize).clamp(1, BATCH_ROWS),
                None => BATCH_ROWS,
            };
            if let Some((rate, started, sent)) = &self.rate {
                let due = *started + Duration::from_secs_f64(*sent as f64 / rate);
                if due > Instant::now() {
                    tokio::time::sleep_until(due.into()).await;
                }
            }
            let mut partition: Option<u32> = None;
            while values.len() < limit {
                let (record, payload) = match self.held.take() {
                    Some(held) => held,
                    None => {
                        let Some(message) = self.consumer.poll(Duration::ZERO) else { break };
                        let message =
                            message.map_err(|e| kafka_error(&format!("reading topic '{}'", self.topic), e))?;
                        // A partition not (or no longer) ours: a stale record.
                        let Some(part) = self.index.get(&(message.topic().to_string(), message.partition())) else {
                            continue;
                        };
                        // An upsert-kafka tombstone stands for its key's row: the key decodes
                        // as a row of the key columns.
                        let deleted = self.upsert && message.payload().is_none();
                        let at = RecordAt {
                            part: *part,
                            partition: message.partition(),
                            offset: message.offset(),
                            timestamp: message.timestamp().to_millis(),
                            timestamp_type: metadata::timestamp_type(&message.timestamp()),
                            leader_epoch: metadata::leader_epoch(&message),
                            headers: self.wants_headers.then(|| metadata::headers_of(&message)),
                            deleted,
                        };
                        let bytes = if deleted { message.key() } else { message.payload() };
                        (at, bytes.unwrap_or(&[]).to_vec())
                    }
                };
                let (p, offset) = (record.part, record.offset);
                let end = self.ends.as_ref().and_then(|e| e.get(&p)).copied().unwrap_or(i64::MAX);
                let end = end.min(self.bound.as_ref().and_then(|b| b.get(&p)).copied().unwrap_or(i64::MAX));
                // A stale record of an earlier assignment, or one past the bounded end (or
                // the replay's: read again once the replay ends, which assigns anew).
                if self.positions.get(&p).is_none_or(|next| offset < *next) || offset >= end {
                    continue;
                }
                // One partition per batch: its watermark is its own.
                if partition.is_some_and(|current| current != p) {
                    self.held = Some((record, payload));
                    break;
                }
                partition = Some(p);
                self.positions.insert(p, offset + 1);
                values.push(payload);
                at.push(record);
                if self.finished() {
                    break;
                }
            }
            self.last_partition = partition;
            if values.is_empty() {
                if self.ends.is_some() || self.bound.is_some() {
                    self.catch_up_to_ends()?;
                }
                if self.bound.is_some() && self.replayed() {
                    return Ok(Some(RecordBatch::new_empty(self.schema.clone())));
                }
                // Cancel-safe: nothing has been taken in this round.
                tokio::time::sleep(self.idle_wait).await;
                self.idle_wait = (self.idle_wait * 2).min(super::IDLE_POLL_MAX);
                continue;
            }
            self.idle_wait = super::IDLE_POLL;
            if let Some((_, _, sent)) = &mut self.rate {
                *sent += values.len() as u64;
            }
            // A batch is one partition's: errors name its topic.
            if let Some(p) = partition {
                self.decoder.topic.clone_from(&self.parts[p as usize].0);
            }
            // Avro change events decode to rows with ops in one pass.
            if self.decoder.codec.is_debezium_avro() {
                let refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
                self.decoder.prepare(&refs).await?;
                let Some((rows, ops, records)) = self.decoder.decode_changes(&refs, &at)? else { continue };
                self.last_ops = Some(ops);
                return Ok(Some(self.output(&rows, &records)?));
            }
            // Debezium events: their rows, each with its op and record.
            let (rows, ops, at) = match &self.decoder.codec {
                Codec::DebeziumJson => {
                    let (mut rows, mut ops, mut rows_at) = (Vec::new(), Vec::new(), Vec::new());
                    for (value, record) in values.iter().zip(&at) {
                        match super::codec::debezium_rows(value) {
                            Ok(event) => {
                                for (op, row) in event {
                                    ops.push(op);
                                    rows.push(row);
                                    rows_at.push(record.clone());
                                }
                            }
                            Err(_) if self.decoder.policy == crate::format::ParsePolicy::Skip => {
                                self.decoder.skipped += 1
                            }
                            Err(e) => {
                                return Err(WeirError::user(format!(
                                    "malformed debezium-json record in topic '{}' partition {} at offset {}: {e} \
                                     (set 'format.ignore-parse-errors' = 'true' to skip such records)",
                                    self.decoder.topic, record.partition, record.offset
                                )))
                            }
                        }
                    }
                    (rows, Some(ops), rows_at)
                }
                // upsert-kafka: each record the key's new row, a tombstone its deletion.
                _ if self.upsert => {
                    let ops =
                        at.iter().map(|r| if r.deleted { weir_core::Op::Delete } else { weir_core::Op::UpdateAfter });
                    (values, Some(ops.collect()), at)
                }
                _ => (values, None, at),
            };
            let refs: Vec<&[u8]> = rows.iter().map(|v| v.as_slice()).collect();
            self.decoder.prepare(&refs).await?;
            let Some((values, kept)) = self.decoder.decode(&refs, &at)? else { continue };
            let (records, ops): (Vec<RecordAt>, _) = match kept {
                Some(kept) => {
                    (kept.iter().map(|i| at[*i].clone()).collect(), ops.map(|o| kept.iter().map(|i| o[*i]).collect()))
                }
                None => (at, ops),
            };
            self.last_ops = ops;
            return Ok(Some(self.output(&values, &records)?));
        }
    }

    fn records_skipped(&self) -> u64 {
        self.decoder.skipped
    }

    /// Records are taken from the consumer only in the synchronous part of a round, and a
    /// held one stays in `self`: a read dropped while it sleeps loses nothing.
    fn cancel_safe(&self) -> bool {
        true
    }

    fn partitions(&self) -> Vec<u32> {
        self.positions.keys().copied().collect()
    }

    fn partition_lag(&self) -> Vec<weir_core::metrics::PartitionLag> {
        // The client's own positions pass transaction markers, which never reach this task;
        // ours do not. A record held for the next batch is not read yet: then ours counts.
        let client: BTreeMap<(String, i32), i64> = match (&self.held, self.consumer.position()) {
            (None, Ok(list)) => list
                .elements()
                .iter()
                .filter_map(|e| match e.offset() {
                    Offset::Offset(o) => Some(((e.topic().to_string(), e.partition()), o)),
                    _ => None,
                })
                .collect(),
            _ => BTreeMap::new(),
        };
        let mut lags = Vec::with_capacity(self.positions.len());
        for (i, position) in &self.positions {
            let Some((topic, partition)) = self.parts.get(*i as usize) else { continue };
            let Some(end) = cached_end_offset(&self.consumer, topic, *partition) else { continue };
            let theirs = client.get(&(topic.clone(), *partition)).copied().unwrap_or(-1);
            let position = (*position).max(theirs);
            if position < 0 {
                continue;
            }
            lags.push(weir_core::metrics::PartitionLag { topic: topic.clone(), partition: *partition, position, end });
        }
        lags
    }

    fn checkpoint_taken(&mut self, epoch: u64) {
        if let Some(pending) = &mut self.group_commits {
            pending.insert(epoch, self.positions.clone());
        }
    }

    fn checkpoint_complete(&mut self, epoch: u64) -> Result<()> {
        let Some(pending) = &mut self.group_commits else { return Ok(()) };
        let Some(positions) = pending.range(..=epoch).next_back().map(|(_, p)| p.clone()) else { return Ok(()) };
        pending.retain(|e, _| *e > epoch);
        let mut list = TopicPartitionList::new();
        for (i, offset) in positions.iter().filter(|(_, o)| **o >= 0) {
            let (t, p) = &self.parts[*i as usize];
            list.add_partition_offset(t, *p, Offset::Offset(*offset))
                .map_err(|e| kafka_error("a partition list", e))?;
        }
        // Best effort, asynchronous: monitoring only.
        if let Err(e) = self.consumer.commit(&list, rdkafka::consumer::CommitMode::Async) {
            log::warn!("Kafka: committing offsets of checkpoint {epoch} to the consumer group failed: {e}");
        }
        Ok(())
    }

    fn batch_partition(&self) -> Option<u32> {
        self.last_partition
    }

    fn batch_ops(&self) -> Option<Vec<weir_core::Op>> {
        self.last_ops.clone()
    }

    fn offsets(&self) -> Vec<(String, i32, i64)> {
        let parts = self.positions.iter().filter(|(_, o)| **o >= 0);
        parts.map(|(i, o)| (self.parts[*i as usize].0.clone(), self.parts[*i as usize].1, *o)).collect()
    }

    /// Next offset per partition (`topic/partition`), as JSON.
    fn position(&self) -> Option<Vec<u8>> {
        let map: BTreeMap<String, i64> = self
            .positions
            .iter()
            .map(|(i, o)| (format!("{}/{}", self.parts[*i as usize].0, self.parts[*i as usize].1), *o))
            .collect();
        serde_json::to_vec(&map).ok()
    }

    fn seek(&mut self, position: &[u8]) -> Result<()> {
        for (i, o) in self.own_offsets(&[position])? {
            if let Some(slot) = self.positions.get_mut(&i) {
                *slot = o;
            }
        }
        // A seek after reading (the end of a replay) reads from the new positions.
        self.bound = None;
        self.assigned = false;
        self.held = None;
        Ok(())
    }

    /// Each task's positions name their partitions: this task takes those of its own.
    fn seek_rescaled(&mut self, positions: &[&[u8]]) -> Result<()> {
        positions.iter().try_for_each(|p| self.seek(p))
    }

    fn replay_to(&mut self, positions: &[&[u8]]) -> Result<()> {
        let read = self.own_offsets(positions)?;
        let mut bound = BTreeMap::new();
        for (i, start) in &self.positions {
            // A partition the earlier run never read: nothing of it to read again.
            let end = read.get(i).copied().unwrap_or(*start);
            let (t, p) = &self.parts[*i as usize];
            if end > *start && self.startup == Startup::Earliest {
                let (low, _) = self
                    .consumer
                    .fetch_watermarks(t, *p, METADATA_TIMEOUT)
                    .map_err(|e| kafka_error("cannot read a partition's offsets", e))?;
                if low > 0 {
                    return Err(WeirError::user(format!(
                        "topic '{t}' partition {p} starts at offset {low} now: records the job read before may have been \
                         deleted (retention), so its state cannot be rebuilt by reading them again"
                    )));
                }
            }
            if end < *start {
                return Err(WeirError::user(format!(
                    "topic '{t}' partition {p}: the job had read up to offset {end}, before where the table starts now \
                     ({start}); its state cannot be rebuilt by reading again from there"
                )));
            }
            bound.insert(*i, end);
        }
        self.bound = Some(bound);
        Ok(())
    }

    fn replayed(&self) -> bool {
        self.bound.as_ref().is_none_or(|b| b.iter().all(|(i, end)| self.positions.get(i).is_some_and(|o| o >= end)))
    }
}

impl KafkaSource {
    /// The offsets of this task's partitions in positions of [`Source::position`].
    fn own_offsets(&self, positions: &[&[u8]]) -> Result<BTreeMap<u32, i64>> {
        let mut own = BTreeMap::new();
        for position in positions {
            let map: BTreeMap<String, i64> = serde_json::from_slice(position)
                .map_err(|_| WeirError::internal("a Kafka source position in a checkpoint is damaged"))?;
            for (p, o) in map {
                let damaged = || WeirError::internal("a Kafka partition in a checkpoint is damaged");
                let (t, n) = p.rsplit_once('/').ok_or_else(damaged)?;
                let n: i32 = n.parse().map_err(|_| damaged())?;
                // A partition that is not this task's (any more: topics matching the pattern
                // changed, or the parallelism did) is left to its own task or the startup mode.
                if let Some(i) = self.index.get(&(t.to_string(), n)) {
                    own.insert(*i, o);
                }
            }
        }
        Ok(own)
    }
}

/// Where an output column comes from.
enum Column {
    /// This column of the decoded value.
    Value(usize),
    Metadata(metadata::MetadataKey),
}

impl KafkaSource {
    /// The output batch: decoded value columns and metadata columns, in the query's order.
    fn output(&self, values: &RecordBatch, records: &[RecordAt]) -> Result<RecordBatch> {
        let topic_of = |part: u32| self.parts[part as usize].0.clone();
        let columns = self
            .columns
            .iter()
            .zip(self.schema.fields())
            .map(|(column, field)| match column {
                Column::Value(i) => Ok(values.column(*i).clone()),
                Column::Metadata(key) => metadata::column(*key, records, topic_of, field),
            })
            .collect::<Result<Vec<_>>>()?;
        let options = datafusion::arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(records.len()));
        Ok(RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)?)
    }

    /// Bounded reading in `read_committed` mode: transaction markers and aborted records
    /// take offsets but are never delivered, so a partition whose remaining offsets hold
    /// none for us counts as read to its end once the consumer's position has passed it.
    fn catch_up_to_ends(&mut self) -> Result<()> {
        let Ok(list) = self.consumer.position() else { return Ok(()) };
        for e in list.elements() {
            let Some(i) = self.index.get(&(e.topic().to_string(), e.partition())) else { continue };
            // Never past a replay's bound: what lies beyond is read after it.
            let bound = self.bound.as_ref().and_then(|b| b.get(i)).copied().unwrap_or(i64::MAX);
            if let (Offset::Offset(o), Some(next)) = (e.offset(), self.positions.get_mut(i)) {
                if o.min(bound) > *next {
                    *next = o.min(bound);
                }
            }
        }
        Ok(())
    }
}

/// A partition's end offset as the client last saw it in a fetch response (read_committed:
/// the last stable offset), without asking the broker; `None` before the first fetch.
/// OpenSSL says only "certificate verify failed" (an unknown CA and a certificate for another
/// host alike): Weir's own connection, with the same settings, says which.
fn certificate_check(table: &TableDef, e: &WeirError) -> Option<String> {
    if !e.message.contains("certificate verify failed") {
        return None;
    }
    let cluster = super::client::Cluster::of_table(table).ok()?;
    let broker = cluster.bootstrap().first()?.clone();
    cluster.connect(&broker, Duration::from_secs(5)).err().map(|e| e.message)
}

/// The cluster's metadata, asked for in steps so that a refusal (credentials, certificates)
/// ends the wait at once, reported as what it is.
fn metadata(
    consumer: &BaseConsumer<Watched>,
    context: &Watched,
    topic: Option<&str>,
) -> Result<rdkafka::metadata::Metadata> {
    let began = std::time::Instant::now();
    loop {
        match consumer.fetch_metadata(topic, Duration::from_secs(1)) {
            Ok(metadata) => return Ok(metadata),
            Err(e) => {
                // librdkafka delivers its error events through the consumer's queue: serve it
                // (nothing is assigned yet, so no record can come).
                if consumer.poll(Duration::ZERO).is_some() {
                    log::debug!("Kafka: an event before any assignment");
                }
                if let Some(refusal) = context.refusal() {
                    return Err(WeirError::user(refusal));
                }
                if began.elapsed() >= METADATA_TIMEOUT {
                    return Err(WeirError::external(e.to_string()));
                }
            }
        }
    }
}

fn cached_end_offset(consumer: &BaseConsumer<Watched>, topic: &str, partition: i32) -> Option<i64> {
    let topic = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client pointer is valid while `consumer` lives; librdkafka reads the topic
    // name and writes the two offsets, under its own lock (rdkafka 0.39 has no wrapper for
    // this cached, non-blocking call).
    let err = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some(high)
}

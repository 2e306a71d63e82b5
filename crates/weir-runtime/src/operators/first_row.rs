//! Deduplication keeping each key's first row by event time (`ROW_NUMBER() OVER (PARTITION
//! BY … ORDER BY ts ASC) … WHERE rn = 1`, `ts` the input's event-time column), append-only:
//! a key's earliest row waits until the watermark passes its time (an earlier one may still
//! come until then), is emitted once, and the key is marked done; its later rows are dropped.
//! Rows behind the watermark are late: dropped and counted. Per chunk, each key's state is
//! read with one multi-get and written once.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, UInt64Array};
use datafusion::arrow::row::{RowConverter, SortField};
use weir_core::{Chunk, Message, Result, Watermark, WeirError};
use weir_state::tables::Change;
use weir_state::{StateTables, Table, TableDecl, TableKind};

use super::keyed::KeyedLogic;
use super::state::{interner, ordered, rows_batch, Progress, StateContext};
use super::top_n::TopNSpec;
use super::window::millis;

const TABLES: [TableDecl; 2] =
    [TableDecl { name: "first", kind: TableKind::Value }, TableDecl { name: "due", kind: TableKind::Timed }];

/// A key's state: its earliest row so far (time and bytes), or done (emitted).
#[derive(Clone)]
enum First {
    Waiting { time: i64, row: Vec<u8> },
    Done,
}

impl First {
    fn encode(&self) -> Vec<u8> {
        match self {
            First::Waiting { time, row } => [&[0u8][..], &time.to_le_bytes(), row].concat(),
            First::Done => vec![1],
        }
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        match bytes.split_first() {
            Some((1, _)) => Ok(First::Done),
            Some((0, rest)) if rest.len() >= 8 => {
                let time = i64::from_le_bytes(rest[..8].try_into().map_err(|_| damaged())?);
                Ok(First::Waiting { time, row: rest[8..].to_vec() })
            }
            _ => Err(damaged()),
        }
    }
}

fn damaged() -> WeirError {
    WeirError::internal("deduplication state is damaged")
}

pub struct FirstRow {
    spec: TopNSpec,
    /// The input's event-time column.
    time: usize,
    partitions: RowConverter,
    rows: RowConverter,
    tables: StateTables,
    first: Table,
    due: Table,
    progress: Progress,
}

impl FirstRow {
    pub fn new(spec: TopNSpec, time: usize, state: &StateContext) -> Result<Self> {
        let field = |i: usize| SortField::new(spec.input_schema.field(i).data_type().clone());
        let partitions = RowConverter::new(spec.partition.iter().map(|i| field(*i)).collect())?;
        let rows = RowConverter::new((0..spec.input_schema.fields().len()).map(field).collect())?;
        let tables = state.open(&TABLES)?;
        Ok(Self {
            first: tables.table("first")?,
            due: tables.table("due")?,
            tables,
            partitions,
            rows,
            spec,
            time,
            progress: Progress::default(),
        })
    }

    /// Emit the waiting rows whose time the watermark has passed.
    fn release(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        let to = ordered(watermark.0.saturating_add(1));
        let due = self.tables.scan_times(self.due, &ordered(i64::MIN), &to)?;
        if due.is_empty() {
            return Ok(());
        }
        self.tables.delete_times(self.due, &ordered(i64::MIN), &to)?;
        // A key whose first row was replaced by an earlier one has a timer for each: both due
        // at once must release it once.
        let mut keys: Vec<(u16, &[u8])> = due.iter().map(|(g, k, _)| (*g, &k[8..])).collect();
        let mut seen = std::collections::HashSet::new();
        keys.retain(|key| seen.insert(*key));
        let states = self.tables.get_many(self.first, &keys)?;
        let mut emitted = Vec::new();
        let mut done = Vec::new();
        for ((g, k), state) in keys.iter().zip(states) {
            let Some(state) = state else { continue };
            // A timer of a row an earlier one replaced finds a later time, or the key done.
            if let First::Waiting { time, row } = First::decode(&state)? {
                if time <= watermark.0 {
                    emitted.push(row);
                    done.push((*g, *k));
                }
            }
        }
        let done_value = First::Done.encode();
        let changes: Vec<Change<'_>> = done.iter().map(|(g, k)| (*g, *k, Some(done_value.as_slice()))).collect();
        self.tables.write(self.first, &changes)?;
        if emitted.is_empty() {
            return Ok(());
        }
        let ranks: ArrayRef = Arc::new(UInt64Array::from(vec![1u64; emitted.len()]));
        let batch = rows_batch(&self.rows, emitted.iter().map(Vec::as_slice), vec![ranks], &self.spec.schema)?;
        out.push(Message::Chunk(Chunk::inserts(batch)));
        Ok(())
    }
}

impl KeyedLogic for FirstRow {
    type Own = ();

    fn name(&self) -> String {
        "FirstRow".into()
    }

    fn process(&mut self, _input: usize, chunk: Chunk, _out: &mut Vec<Message>) -> Result<()> {
        if !chunk.is_append_only() {
            return Err(WeirError::not_supported("a deduplication by event time over an updating input"));
        }
        let batch = &chunk.batch;
        let n = batch.num_rows();
        let part_columns: Vec<ArrayRef> = self.spec.partition.iter().map(|i| batch.column(*i).clone()).collect();
        let parts = self.partitions.convert_columns(&part_columns)?;
        let rows = self.rows.convert_columns(batch.columns())?;
        let groups = crate::exchange::key_groups_of_columns(&part_columns, n, self.tables.key_groups())?;
        let times = millis(batch.column(self.time))?;
        let mut index = interner::<&[u8], usize>();
        let mut distinct: Vec<(u16, &[u8])> = Vec::new();
        let mut of_row = Vec::with_capacity(n);
        for (i, group) in groups.iter().enumerate() {
            let key = parts.row(i).data();
            of_row.push(*index.entry(key).or_insert_with(|| {
                distinct.push((*group, key));
                distinct.len() - 1
            }));
        }
        let mut states: Vec<Option<First>> = self
            .tables
            .get_many(self.first, &distinct)?
            .into_iter()
            .map(|s| s.map(|s| First::decode(&s)).transpose())
            .collect::<Result<_>>()?;
        let mut changed = vec![false; distinct.len()];
        for (i, p) in of_row.iter().copied().enumerate() {
            // A row without a time is never first by time.
            if !times.is_valid(i) || times.value(i) <= self.progress.watermark.0 {
                self.progress.late += u64::from(times.is_valid(i));
                continue;
            }
            let t = times.value(i);
            let earlier = match &states[p] {
                None => true,
                Some(First::Waiting { time, .. }) => t < *time,
                Some(First::Done) => false,
            };
            if earlier {
                states[p] = Some(First::Waiting { time: t, row: rows.row(i).data().to_vec() });
                changed[p] = true;
            }
        }
        let mut writes = Vec::new();
        let mut timers = Vec::new();
        for (p, (g, k)) in distinct.iter().enumerate().filter(|(p, _)| changed[*p]) {
            if let Some(state) = &states[p] {
                if let First::Waiting { time, .. } = state {
                    timers.push((*g, [&ordered(*time)[..], k].concat()));
                }
                writes.push((*g, *k, state.encode()));
            }
        }
        let changes: Vec<Change<'_>> = writes.iter().map(|(g, k, v)| (*g, *k, Some(v.as_slice()))).collect();
        self.tables.write(self.first, &changes)?;
        let changes: Vec<Change<'_>> = timers.iter().map(|(g, k)| (*g, k.as_slice(), Some(&[][..]))).collect();
        self.tables.write(self.due, &changes)
    }

    fn fire(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        self.release(watermark, out)
    }

    fn state(&mut self) -> (&mut StateTables, &mut Progress) {
        (&mut self.tables, &mut self.progress)
    }

    fn progress(&self) -> &Progress {
        &self.progress
    }
}

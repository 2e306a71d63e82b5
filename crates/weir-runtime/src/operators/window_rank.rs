//! Top-N and deduplication per window (`PARTITION BY window_start, window_end, …` over a
//! window table function or a window aggregate), as Flink's window Top-N: rows wait in a
//! timed state table under their window's end, partition and order; when the watermark
//! passes a window's end its partitions are ranked once and their kept ranks emitted as
//! inserts. Append-only, and its rows are final. Rows of a window that has fired are late:
//! dropped and counted.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, UInt64Array};
use datafusion::arrow::row::{RowConverter, SortField};
use weir_core::{Chunk, Message, Result, Watermark, WeirError};
use weir_state::tables::Change;
use weir_state::{StateTables, Table, TableDecl, TableKind};

use super::keyed::KeyedLogic;
use super::state::{from_ordered, ordered, rows_batch, Progress, StateContext};
use super::top_n::{ranks, TopNSpec};
use super::window::millis;

const TABLES: [TableDecl; 1] = [TableDecl { name: "waiting", kind: TableKind::Timed }];

pub struct WindowTopN {
    spec: TopNSpec,
    /// Which input column is `window_end`.
    window_end: usize,
    partitions: RowConverter,
    order: RowConverter,
    rows: RowConverter,
    tables: StateTables,
    waiting: Table,
    progress: Progress,
}

impl WindowTopN {
    pub fn new(spec: TopNSpec, window_end: usize, state: &StateContext) -> Result<Self> {
        let field = |i: usize| SortField::new(spec.input_schema.field(i).data_type().clone());
        let partitions = RowConverter::new(spec.partition.iter().map(|i| field(*i)).collect())?;
        let order = RowConverter::new(
            spec.order
                .iter()
                .map(|(i, o)| SortField::new_with_options(spec.input_schema.field(*i).data_type().clone(), *o))
                .collect(),
        )?;
        let rows = RowConverter::new((0..spec.input_schema.fields().len()).map(field).collect())?;
        let tables = state.open(&TABLES)?;
        Ok(Self {
            waiting: tables.table("waiting")?,
            tables,
            partitions,
            order,
            rows,
            spec,
            window_end,
            progress: Progress::default(),
        })
    }
}

impl KeyedLogic for WindowTopN {
    type Own = ();

    fn name(&self) -> String {
        "WindowTopN".into()
    }

    /// File each row under `end | partition (length first) | order | arrival`.
    fn process(&mut self, _input: usize, chunk: Chunk, _out: &mut Vec<Message>) -> Result<()> {
        if !chunk.is_append_only() {
            return Err(WeirError::not_supported("a Top-N per window over an updating input"));
        }
        let batch = &chunk.batch;
        let n = batch.num_rows();
        let part_columns: Vec<ArrayRef> = self.spec.partition.iter().map(|i| batch.column(*i).clone()).collect();
        let order_columns: Vec<ArrayRef> = self.spec.order.iter().map(|(i, _)| batch.column(*i).clone()).collect();
        let parts = self.partitions.convert_columns(&part_columns)?;
        let orders = self.order.convert_columns(&order_columns)?;
        let rows = self.rows.convert_columns(batch.columns())?;
        let groups = crate::exchange::key_groups_of_columns(&part_columns, n, self.tables.key_groups())?;
        let ends = millis(batch.column(self.window_end))?;
        let bound = self.progress.watermark.0.saturating_add(1);
        let mut keys = Vec::with_capacity(n);
        for (i, group) in groups.iter().enumerate() {
            if !ends.is_valid(i) {
                continue;
            }
            let end = ends.value(i);
            if end <= bound {
                self.progress.late += 1;
                continue;
            }
            let part = parts.row(i).data();
            let seq =
                if self.spec.later_wins_ties { u64::MAX - self.progress.next_seq } else { self.progress.next_seq };
            self.progress.next_seq += 1;
            let key =
                [&ordered(end)[..], &(part.len() as u32).to_be_bytes(), part, orders.row(i).data(), &seq.to_be_bytes()]
                    .concat();
            self.progress.opened(end);
            keys.push((*group, key, i));
        }
        let changes: Vec<Change<'_>> =
            keys.iter().map(|(g, k, i)| (*g, k.as_slice(), Some(rows.row(*i).data()))).collect();
        self.tables.write(self.waiting, &changes)
    }

    fn state(&mut self) -> (&mut weir_state::StateTables, &mut Progress) {
        (&mut self.tables, &mut self.progress)
    }

    fn progress(&self) -> &Progress {
        &self.progress
    }

    /// Rank every window that ends at or before `watermark` + 1 ms.
    fn fire(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        let bound = watermark.0.saturating_add(1);
        let Some(&first) = self.progress.open.first() else { return Ok(()) };
        if first > bound {
            return Ok(());
        }
        let (from, to) = (ordered(first), ordered(bound.saturating_add(1)));
        let due = self.tables.scan_times(self.waiting, &from, &to)?;
        self.tables.delete_times(self.waiting, &from, &to)?;
        self.progress.fired(bound);
        let damaged = || WeirError::internal("window Top-N state is damaged");
        // Entries come by (end, group, partition, order, arrival): each (end, partition) is
        // a run of them, already ranked in order.
        let mut kept: Vec<(Vec<u8>, u64)> = Vec::new();
        let mut run: Vec<&[u8]> = Vec::new();
        let mut run_values: Vec<&[u8]> = Vec::new();
        let mut run_key: Option<(i64, u16, &[u8])> = None;
        let flush = |run: &mut Vec<&[u8]>, values: &mut Vec<&[u8]>, kept: &mut Vec<(Vec<u8>, u64)>| {
            let lens: Vec<usize> = run.iter().map(|k| k.len().saturating_sub(8)).collect();
            for (rank, value) in ranks(&self.spec, run.iter().copied(), &lens).into_iter().zip(values.iter()) {
                if rank >= self.spec.lo {
                    kept.push((value.to_vec(), rank));
                }
            }
            run.clear();
            values.clear();
        };
        for (group, key, value) in &due {
            let end = key.get(..8).and_then(|b| b.try_into().ok()).map(from_ordered).ok_or_else(damaged)?;
            let len =
                key.get(8..12).and_then(|b| b.try_into().ok()).map(u32::from_be_bytes).ok_or_else(damaged)? as usize;
            let part = key.get(12..12 + len).ok_or_else(damaged)?;
            let order = &key[12 + len..];
            if run_key != Some((end, *group, part)) {
                flush(&mut run, &mut run_values, &mut kept);
                run_key = Some((end, *group, part));
            }
            run.push(order);
            run_values.push(value);
        }
        flush(&mut run, &mut run_values, &mut kept);
        if kept.is_empty() {
            return Ok(());
        }
        let ranks: ArrayRef = Arc::new(UInt64Array::from_iter_values(kept.iter().map(|(_, rank)| *rank)));
        let batch = rows_batch(&self.rows, kept.iter().map(|(r, _)| r.as_slice()), vec![ranks], &self.spec.schema)?;
        out.push(Message::Chunk(Chunk::inserts(batch)));
        Ok(())
    }
}

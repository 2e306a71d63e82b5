//! `ORDER BY` an event-time attribute ascending (then any other columns) on an append-only
//! stream, as Flink's `RowTimeSortOperator`: rows wait in a timed state table under
//! `time | other keys | arrival`; when the watermark reaches a time its rows are emitted in
//! that order. A row at or before a time already emitted is late: dropped and counted (a row
//! behind the watermark but after the last emitted time still goes out, at the next
//! watermark, as in Flink). All rows go to one task, so the order is total.

use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};
use weir_core::{Chunk, Message, Result, Watermark, WeirError};
use weir_state::tables::Change;
use weir_state::{StateTables, Table, TableDecl, TableKind};

use super::keyed::KeyedLogic;
use super::state::{ordered, rows_batch, Progress, StateContext};
use super::window::millis;

const TABLES: [TableDecl; 1] = [TableDecl { name: "waiting", kind: TableKind::Timed }];

#[derive(Debug, Clone)]
pub struct TimeSortSpec {
    /// The event-time column, sorted first, ascending.
    pub time: usize,
    /// The other sort columns, in order.
    pub order: Vec<(usize, SortOptions)>,
    /// The input's schema, which is also the output's.
    pub schema: SchemaRef,
}

pub struct TimeSort {
    spec: TimeSortSpec,
    order: RowConverter,
    rows: RowConverter,
    tables: StateTables,
    waiting: Table,
    /// The key group of every row: the one task's (the exchange hashes no columns).
    group: u16,
    clock: Progress,
    /// The latest time emitted (Flink's `lastTriggeringTs`): rows at or before it are late.
    emitted_to: i64,
}

impl TimeSort {
    pub fn new(spec: TimeSortSpec, state: &StateContext) -> Result<Self> {
        let order = RowConverter::new(
            spec.order
                .iter()
                .map(|(i, o)| SortField::new_with_options(spec.schema.field(*i).data_type().clone(), *o))
                .collect(),
        )?;
        let rows =
            RowConverter::new(spec.schema.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect())?;
        let tables = state.open(&TABLES)?;
        let group = crate::exchange::key_groups_of_columns(&[], 1, tables.key_groups())?
            .first()
            .copied()
            .ok_or_else(|| WeirError::internal("no key group for a sort"))?;
        Ok(Self {
            waiting: tables.table("waiting")?,
            tables,
            order,
            rows,
            spec,
            group,
            clock: Progress::default(),
            emitted_to: i64::MIN,
        })
    }
}

impl KeyedLogic for TimeSort {
    type Own = i64;

    fn name(&self) -> String {
        "TimeSort".into()
    }

    /// File each row under `time | other keys | arrival`.
    fn process(&mut self, _input: usize, chunk: Chunk, _out: &mut Vec<Message>) -> Result<()> {
        if !chunk.is_append_only() {
            return Err(WeirError::not_supported("ORDER BY over an updating input"));
        }
        let batch = &chunk.batch;
        let times = millis(batch.column(self.spec.time))?;
        let order_columns: Vec<ArrayRef> = self.spec.order.iter().map(|(i, _)| batch.column(*i).clone()).collect();
        let orders = self.order.convert_columns(&order_columns)?;
        let rows = self.rows.convert_columns(batch.columns())?;
        let mut keys = Vec::with_capacity(batch.num_rows());
        for i in 0..batch.num_rows() {
            // A row without a time has no place in time order: late, as Flink drops it.
            if !times.is_valid(i) || times.value(i) <= self.emitted_to {
                self.clock.late += 1;
                continue;
            }
            let seq = self.clock.next_seq;
            self.clock.next_seq += 1;
            // Arrow's rows of no columns (ORDER BY the time alone) hold no row to index.
            let order: &[u8] = if order_columns.is_empty() { &[] } else { orders.row(i).data() };
            keys.push(([&ordered(times.value(i))[..], order, &seq.to_be_bytes()].concat(), i));
        }
        let changes: Vec<Change<'_>> =
            keys.iter().map(|(k, i)| (self.group, k.as_slice(), Some(rows.row(*i).data()))).collect();
        self.tables.write(self.waiting, &changes)
    }

    /// Emit every waiting row up to `watermark`, in order.
    fn fire(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        if watermark.0 <= self.emitted_to {
            return Ok(());
        }
        let (from, to) = (ordered(self.emitted_to.saturating_add(1)), ordered(watermark.0.saturating_add(1)));
        let due = self.tables.scan_times(self.waiting, &from, &to)?;
        if due.is_empty() {
            return Ok(());
        }
        self.tables.delete_times(self.waiting, &from, &to)?;
        if let Some((_, last, _)) = due.last() {
            let time = last.get(..8).and_then(|b| b.try_into().ok()).map(super::state::from_ordered);
            self.emitted_to = time.ok_or_else(|| WeirError::internal("sort state is damaged"))?;
        }
        let batch = rows_batch(&self.rows, due.iter().map(|(_, _, v)| v.as_slice()), Vec::new(), &self.spec.schema)?;
        out.push(Message::Chunk(Chunk::inserts(batch)));
        Ok(())
    }

    fn state(&mut self) -> (&mut StateTables, &mut Progress) {
        (&mut self.tables, &mut self.clock)
    }

    fn progress(&self) -> &Progress {
        &self.clock
    }

    /// The latest time emitted.
    fn own(&self) -> i64 {
        self.emitted_to
    }

    fn restore_own(&mut self, own: Vec<i64>) -> Result<()> {
        self.emitted_to = own.into_iter().fold(self.emitted_to, i64::max);
        Ok(())
    }
}

//! The window aggregate (`GROUP BY window_start, window_end, keys…`), its state in state
//! tables: memory or RocksDB (`SET 'state.backend'`), one logic.
//!
//! Each batch is first aggregated by itself in memory (vectorized group lookup and
//! accumulators); then every distinct (window, key) of the batch touches the state once: one
//! `get_many` for the stored accumulator states, a vectorized merge, one write back. Keys are
//! the window end (8 bytes, ordered) and the group columns in Arrow's row format, filed under
//! the key group the exchange routed the row by, so that a checkpoint restores at another
//! parallelism. A window's results are emitted once, when the watermark passes its end
//! (append-only, final); rows whose window has fired are late: dropped and counted, or
//! written to the late-data table.

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::record_batch::RecordBatchOptions;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::logical_expr::EmitTo;
use datafusion::physical_plan::aggregates::group_values::new_group_values;
use datafusion::physical_plan::aggregates::order::GroupOrdering;
use weir_core::{Chunk, Message, Result, Watermark};
use weir_state::{StateTables, Table, TableDecl, TableKind};

use super::keyed::KeyedLogic;
use super::state::{ordered, take_due, Progress, StateContext};
use super::window::{millis, Evaluated, WindowSpec};

const TABLES: [TableDecl; 1] = [TableDecl { name: "windows", kind: TableKind::Timed }];

pub struct WindowAggregate {
    spec: WindowSpec,
    tables: StateTables,
    windows: Table,
    keys: RowConverter,
    states: RowConverter,
    /// State columns per aggregate.
    state_widths: Vec<usize>,
    /// The watermark, late count, and the window ends that have state (a watermark that
    /// passes none of them costs nothing).
    progress: Progress,
    late_rows: Vec<RecordBatch>,
    groups: Vec<usize>,
}

impl WindowAggregate {
    pub fn new(spec: WindowSpec, state: &StateContext) -> Result<Self> {
        let keys = RowConverter::new(
            spec.group_schema.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect(),
        )?;
        let mut state_fields = Vec::new();
        let mut state_widths = Vec::new();
        for agg in &spec.aggregates {
            let fields = agg.state_fields()?;
            state_widths.push(fields.len());
            state_fields.extend(fields.iter().map(|f| SortField::new(f.data_type().clone())));
        }
        let states = RowConverter::new(state_fields)?;
        let tables = state.open(&TABLES)?;
        let windows = tables.table("windows")?;
        Ok(Self {
            spec,
            tables,
            windows,
            keys,
            states,
            state_widths,
            progress: Progress::default(),
            late_rows: Vec::new(),
            groups: Vec::new(),
        })
    }

    /// Split concatenated state columns by aggregate.
    fn split_states(&self, columns: Vec<ArrayRef>) -> Vec<Vec<ArrayRef>> {
        let mut out = Vec::with_capacity(self.state_widths.len());
        let mut it = columns.into_iter();
        for w in &self.state_widths {
            out.push(it.by_ref().take(*w).collect());
        }
        out
    }

    fn flush(&mut self, evaluated: Evaluated) -> Result<()> {
        let Evaluated { keys, args, filters, .. } = evaluated;
        // 1. The batch by itself.
        let mut values = new_group_values(self.spec.group_schema.clone(), &GroupOrdering::None)?;
        values.intern(&keys, &mut self.groups)?;
        let n = values.len();
        let mut accs = self.spec.accumulators()?;
        for ((acc, a), f) in accs.iter_mut().zip(&args).zip(&filters) {
            acc.update_batch(a, &self.groups, f.as_ref(), n)?;
        }
        let key_columns = values.emit(EmitTo::All)?;
        let mut batch_states = Vec::new();
        for acc in &mut accs {
            batch_states.extend(acc.state(EmitTo::All)?);
        }
        // 2. One read of the stored states of its distinct keys, each under its key group
        // (the exchange hashed the same group columns).
        let groups = crate::exchange::key_groups_of_columns(&key_columns, n, self.tables.key_groups())?;
        let ends = millis(&key_columns[self.spec.window_end])?;
        let rows = self.keys.convert_columns(&key_columns)?;
        let state_keys: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                let mut k = ordered(ends.value(i)).to_vec();
                k.extend_from_slice(rows.row(i).as_ref());
                k
            })
            .collect();
        let lookups: Vec<(u16, &[u8])> = groups.iter().zip(&state_keys).map(|(g, k)| (*g, k.as_slice())).collect();
        let stored = self.tables.get_many(self.windows, &lookups)?;
        // 3. Merge batch and stored states, vectorized.
        let all: Vec<usize> = (0..n).collect();
        let mut merged = self.spec.accumulators()?;
        for (acc, state) in merged.iter_mut().zip(self.split_states(batch_states)) {
            acc.merge_batch(&state, &all, n)?;
        }
        let existing: Vec<usize> = stored.iter().enumerate().filter(|(_, v)| v.is_some()).map(|(i, _)| i).collect();
        if !existing.is_empty() && !self.state_widths.is_empty() {
            let parser = self.states.parser();
            let rows = stored.iter().flatten().map(|v| parser.parse(v));
            let columns = self.states.convert_rows(rows)?;
            for (acc, state) in merged.iter_mut().zip(self.split_states(columns)) {
                acc.merge_batch(&state, &existing, n)?;
            }
        }
        let mut new_states = Vec::new();
        for acc in &mut merged {
            new_states.extend(acc.state(EmitTo::All)?);
        }
        // 4. One write back. Without aggregates (GROUP BY only) there is no state: an empty
        // value.
        let encoded = (!new_states.is_empty()).then(|| self.states.convert_columns(&new_states)).transpose()?;
        let values: Vec<&[u8]> = (0..n).map(|i| encoded.as_ref().map_or(&[][..], |e| e.row(i).data())).collect();
        let changes: Vec<weir_state::tables::Change<'_>> =
            lookups.iter().zip(&values).map(|((g, k), v)| (*g, *k, Some(*v))).collect();
        self.tables.write(self.windows, &changes)?;
        for end in ends.values().iter() {
            self.progress.opened(*end);
        }
        Ok(())
    }

    /// One window's results from its stored entries (group key rows, accumulator states).
    fn emit(&self, entries: &[(Vec<u8>, Vec<u8>)]) -> Result<RecordBatch> {
        let m = entries.len();
        let key_parser = self.keys.parser();
        let mut columns = self.keys.convert_rows(entries.iter().map(|(k, _)| key_parser.parse(&k[8..])))?;
        let state_parser = self.states.parser();
        let state_columns = if self.state_widths.is_empty() {
            Vec::new()
        } else {
            self.states.convert_rows(entries.iter().map(|(_, v)| state_parser.parse(v)))?
        };
        let all: Vec<usize> = (0..m).collect();
        let mut accs = self.spec.accumulators()?;
        for (acc, state) in accs.iter_mut().zip(self.split_states(state_columns)) {
            acc.merge_batch(&state, &all, m)?;
            columns.push(acc.evaluate(EmitTo::All)?);
        }
        // Group columns come back in the group schema's types; the output may differ only in
        // nullability.
        let options = RecordBatchOptions::new().with_row_count(Some(m));
        Ok(RecordBatch::try_new_with_options(self.spec.schema.clone(), columns, &options)?)
    }
}

impl KeyedLogic for WindowAggregate {
    type Own = ();

    fn name(&self) -> String {
        "WindowAggregate".into()
    }

    fn process(&mut self, _input: usize, chunk: Chunk, _out: &mut Vec<Message>) -> Result<()> {
        let evaluated =
            self.spec.evaluate(&chunk, self.progress.watermark, &mut self.progress.late, &mut self.late_rows)?;
        match evaluated {
            Some(e) => self.flush(e),
            None => Ok(()),
        }
    }

    fn take_late_rows(&mut self) -> Vec<RecordBatch> {
        std::mem::take(&mut self.late_rows)
    }

    fn state(&mut self) -> (&mut weir_state::StateTables, &mut Progress) {
        (&mut self.tables, &mut self.progress)
    }

    fn progress(&self) -> &Progress {
        &self.progress
    }

    /// Emit every window whose end is at or before `watermark` + 1 ms, oldest first.
    fn fire(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        let bound = watermark.0.saturating_add(1);
        if self.progress.open.first().is_none_or(|first| *first > bound) {
            return Ok(());
        }
        let due = take_due(&mut self.tables, self.windows, &self.progress.open, bound)?;
        self.progress.fired(bound);
        for entries in due.values() {
            out.push(Message::Chunk(Chunk::inserts(self.emit(entries)?)));
        }
        Ok(())
    }
}

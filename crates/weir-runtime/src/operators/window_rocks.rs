//! The window aggregate with its state in RocksDB (`SET 'state.backend' = 'rocksdb'`).
//!
//! Each batch is first aggregated by itself in memory (vectorized group lookup and
//! accumulators); then every distinct (window, key) of the batch touches RocksDB once: one
//! `multi_get` for their stored accumulator states, a merge, one write batch back. Keys are
//! the window end (8 bytes, ordered) followed by the group columns in Arrow's row format, so
//! a fired window is read with one range scan and deleted with one range delete. Memory holds
//! only the current batch and the set of open windows: state larger than memory lives on
//! disk. Checkpoints copy only the SST files that earlier checkpoints do not hold.

use std::collections::BTreeSet;

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::record_batch::RecordBatchOptions;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::logical_expr::EmitTo;
use datafusion::physical_plan::aggregates::group_values::new_group_values;
use datafusion::physical_plan::aggregates::order::GroupOrdering;
use weir_core::{Chunk, Message, Operator, Result, Watermark};
use weir_state::StateStore;

use super::rocks_state::{header_i64, header_u64, ordered as prefix, RocksState, StateDirs};
use super::window::{advance, millis, Evaluated, Fires, WindowSpec};

/// The operator's keys in its store.
const TABLE: u32 = 1;

pub struct RocksWindowAggregate {
    spec: WindowSpec,
    state: RocksState,
    keys: RowConverter,
    states: RowConverter,
    /// State columns per aggregate.
    state_widths: Vec<usize>,
    open: BTreeSet<i64>,
    watermark: Watermark,
    late: u64,
    late_rows: Vec<RecordBatch>,
    groups: Vec<usize>,
}

impl RocksWindowAggregate {
    pub fn new(spec: WindowSpec, dirs: StateDirs) -> Result<Self> {
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
        Ok(Self {
            spec,
            state: RocksState::open(dirs)?,
            keys,
            states,
            state_widths,
            open: BTreeSet::new(),
            watermark: Watermark::MIN,
            late: 0,
            late_rows: Vec::new(),
            groups: Vec::new(),
        })
    }

    fn store(&self) -> Result<&StateStore> {
        self.state.store()
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
        // 2. One read of the stored states of its distinct keys.
        let ends = millis(&key_columns[self.spec.window_end])?;
        let rows = self.keys.convert_columns(&key_columns)?;
        let db_keys: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                let mut k = prefix(ends.value(i)).to_vec();
                k.extend_from_slice(rows.row(i).as_ref());
                k
            })
            .collect();
        let refs: Vec<&[u8]> = db_keys.iter().map(|k| k.as_slice()).collect();
        let stored = self.store()?.table(TABLE).multi_get(&refs)?;
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
        // 4. One write back.
        // Without aggregates (GROUP BY only) there is no state: an empty value.
        let encoded = (!new_states.is_empty()).then(|| self.states.convert_columns(&new_states)).transpose()?;
        let values: Vec<&[u8]> = (0..n).map(|i| encoded.as_ref().map_or(&[][..], |e| e.row(i).data())).collect();
        let changes: Vec<(&[u8], Option<&[u8]>)> = refs.iter().zip(&values).map(|(k, v)| (*k, Some(*v))).collect();
        self.store()?.table(TABLE).write(&changes)?;
        self.open.extend(ends.values().iter().copied());
        Ok(())
    }
}

impl Operator for RocksWindowAggregate {
    fn name(&self) -> String {
        "WindowAggregate (RocksDB)".into()
    }

    fn process_chunk(&mut self, chunk: Chunk, _out: &mut Vec<Message>) -> Result<()> {
        let evaluated = self.spec.evaluate(&chunk, self.watermark, &mut self.late, &mut self.late_rows)?;
        match evaluated {
            Some(e) => self.flush(e),
            None => Ok(()),
        }
    }

    fn process_watermark(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        advance(self, watermark, out)
    }

    fn finish(&mut self, out: &mut Vec<Message>) -> Result<()> {
        self.fire(Watermark::END_OF_TIME, out)
    }

    fn late_rows(&self) -> u64 {
        self.late
    }

    fn drain_late_rows(&mut self) -> Vec<RecordBatch> {
        std::mem::take(&mut self.late_rows)
    }

    /// The store's checkpoint, with the open windows, watermark and late count.
    fn snapshot(&mut self) -> Result<Option<weir_core::OperatorSnapshot>> {
        let header = serde_json::json!({
            "open": self.open.iter().collect::<Vec<_>>(),
            "watermark": self.watermark.0,
            "late": self.late,
        });
        Ok(Some(self.state.snapshot(header)?))
    }

    fn restore(&mut self, state: &[u8]) -> Result<()> {
        let header = self.state.restore(state)?;
        self.open = header["open"].as_array().into_iter().flatten().filter_map(|v| v.as_i64()).collect();
        self.watermark = Watermark(header_i64(&header, "watermark")?);
        self.late = header_u64(&header, "late")?;
        Ok(())
    }
}

impl Fires for RocksWindowAggregate {
    fn watermark_mut(&mut self) -> &mut Watermark {
        &mut self.watermark
    }

    fn fire(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        let bound = watermark.0.saturating_add(1);
        let due: Vec<i64> = self.open.range(..=bound).copied().collect();
        for end in due {
            self.open.remove(&end);
            let (from, to) = (prefix(end), prefix(end.saturating_add(1)));
            let entries = self.store()?.table(TABLE).scan(&from, &to)?;
            if entries.is_empty() {
                continue;
            }
            let m = entries.len();
            let key_parser = self.keys.parser();
            let key_columns = self.keys.convert_rows(entries.iter().map(|(k, _)| key_parser.parse(&k[8..])))?;
            let state_parser = self.states.parser();
            let state_columns = if self.state_widths.is_empty() {
                Vec::new()
            } else {
                self.states.convert_rows(entries.iter().map(|(_, v)| state_parser.parse(v)))?
            };
            let all: Vec<usize> = (0..m).collect();
            let mut accs = self.spec.accumulators()?;
            let mut columns = key_columns;
            for (acc, state) in accs.iter_mut().zip(self.split_states(state_columns)) {
                acc.merge_batch(&state, &all, m)?;
                columns.push(acc.evaluate(EmitTo::All)?);
            }
            let options = RecordBatchOptions::new().with_row_count(Some(m));
            out.push(Message::Chunk(Chunk::inserts(RecordBatch::try_new_with_options(
                self.spec.schema.clone(),
                columns,
                &options,
            )?)));
            self.store()?.table(TABLE).delete_range(&from, &to)?;
        }
        Ok(())
    }
}

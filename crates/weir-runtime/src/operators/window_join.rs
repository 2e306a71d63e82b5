//! Window joins: rows of two windowed inputs joined when they belong to the same window
//! (`ON l.window_start = r.window_start AND l.window_end = r.window_end AND keys…`), as
//! Flink's window join. Each input's rows are kept per window until the watermark (the
//! minimum of both inputs) passes the window's end; then the window is joined at once, as a
//! hash join over its rows, and its rows are dropped. Rows of a window that has already been
//! joined are late: dropped and counted.
//!
//! The rows wait in state tables (memory or RocksDB), one table per input, each row in Arrow's
//! row format under the key group the exchange routed it by (its join keys), keyed by the
//! window end and a sequence number, so that a fired window is one scan per group and a
//! checkpoint restores at another parallelism.

use std::collections::{BTreeMap, HashMap};

use datafusion::arrow::array::{new_null_array, Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array};
use datafusion::arrow::compute::{concat_batches, take};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatchOptions;
use datafusion::arrow::row::RowConverter;
use weir_core::{Chunk, Message, Result, Watermark, WeirError};
use weir_state::tables::Change;
use weir_state::{StateTables, Table, TableDecl, TableKind};

use super::join::{JoinKind, JoinSpec};
use super::keyed::KeyedLogic;
use super::state::{ordered, take_due, Progress, StateContext};
use super::window::millis;

const TABLES: [TableDecl; 2] =
    [TableDecl { name: "left", kind: TableKind::Timed }, TableDecl { name: "right", kind: TableKind::Timed }];

pub struct WindowJoin {
    spec: JoinSpec,
    /// Which column of each input is `window_end`.
    ends: [usize; 2],
    keys: RowConverter,
    /// Whole rows of each input in Arrow's row format.
    rows: [RowConverter; 2],
    tables: StateTables,
    sides: [Table; 2],
    /// The watermark, late count, the window ends that have rows waiting, and the number
    /// of the next row kept (each has a key of its own).
    progress: Progress,
}

impl WindowJoin {
    pub fn new(spec: JoinSpec, ends: [usize; 2], state: &StateContext) -> Result<Self> {
        let (keys, rows) = spec.converters()?;
        let tables = state.open(&TABLES)?;
        Ok(Self {
            keys,
            rows,
            sides: [tables.table("left")?, tables.table("right")?],
            tables,
            spec,
            ends,
            progress: Progress::default(),
        })
    }

    fn add(&mut self, side: usize, batch: RecordBatch) -> Result<()> {
        let ends = millis(batch.column(self.ends[side]))?;
        let bound = self.progress.watermark.0.saturating_add(1);
        let groups = crate::exchange::key_groups_of(&batch, &self.spec.keys[side], self.tables.key_groups())?;
        let rows = self.rows[side].convert_columns(batch.columns())?;
        let mut keys = Vec::with_capacity(batch.num_rows());
        for (i, end) in ends.iter().enumerate() {
            // A row without a window end belongs to no window.
            let Some(end) = end else { continue };
            if end <= bound {
                self.progress.late += 1;
                continue;
            }
            let mut key = ordered(end).to_vec();
            key.extend_from_slice(&self.progress.next_seq.to_be_bytes());
            self.progress.next_seq += 1;
            self.progress.opened(end);
            keys.push((groups[i], key, i));
        }
        let changes: Vec<Change<'_>> =
            keys.iter().map(|(g, k, i)| (*g, k.as_slice(), Some(rows.row(*i).data()))).collect();
        self.tables.write(self.sides[side], &changes)
    }

    /// Rows of input `side` back from their row format.
    fn decode(&self, side: usize, values: &[Vec<u8>]) -> Result<RecordBatch> {
        let parser = self.rows[side].parser();
        let columns = self.rows[side].convert_rows(values.iter().map(|v| parser.parse(v)))?;
        let options = RecordBatchOptions::new().with_row_count(Some(values.len()));
        Ok(RecordBatch::try_new_with_options(self.spec.schemas[side].clone(), columns, &options)?)
    }

    /// Join one window's rows.
    fn join(&self, inputs: &[Vec<RecordBatch>; 2]) -> Result<Option<RecordBatch>> {
        let [left, right] = [0, 1].map(|s| concat_batches(&self.spec.schemas[s], &inputs[s]));
        let (left, right) = (left?, right?);
        let key_rows = |batch: &RecordBatch, side: usize| -> Result<_> {
            let columns: Vec<ArrayRef> = self.spec.keys[side].iter().map(|k| batch.column(*k).clone()).collect();
            // SQL equality: a NULL key matches nothing.
            let mut valid = vec![true; batch.num_rows()];
            for c in &columns {
                if let Some(nulls) = c.logical_nulls() {
                    valid.iter_mut().zip(nulls.iter()).for_each(|(v, ok)| *v &= ok);
                }
            }
            Ok((self.keys.convert_columns(&columns)?, valid))
        };
        let (left_keys, left_valid) = key_rows(&left, 0)?;
        let (right_keys, right_valid) = key_rows(&right, 1)?;
        let mut table: HashMap<&[u8], Vec<u32>> = HashMap::with_capacity(right.num_rows());
        for j in (0..right.num_rows()).filter(|j| right_valid[*j]) {
            table.entry(right_keys.row(j).data()).or_default().push(j as u32);
        }
        let (mut li, mut ri) = (Vec::new(), Vec::new());
        for i in (0..left.num_rows()).filter(|i| left_valid[*i]) {
            if let Some(matches) = table.get(left_keys.row(i).data()) {
                li.extend(std::iter::repeat_n(i as u32, matches.len()));
                ri.extend_from_slice(matches);
            }
        }
        let (mut li, mut ri) = (UInt32Array::from(li), UInt32Array::from(ri));
        if let Some(filter) = &self.spec.filter {
            let joined = self.pairs(&left, &right, &li, &ri, &self.spec.pair_schema)?;
            let keep = filter.evaluate(&joined)?.into_array(joined.num_rows())?;
            let keep = keep
                .as_any()
                .downcast_ref::<BooleanArray>()
                .ok_or_else(|| WeirError::internal("join condition is not boolean"))?;
            // NULL (unknown) is not true: no match.
            let keep = match keep.nulls() {
                Some(_) => datafusion::arrow::compute::prep_null_mask_filter(keep),
                None => keep.clone(),
            };
            let pick = |a: &UInt32Array| -> Result<UInt32Array> {
                let f = datafusion::arrow::compute::filter(a, &keep)?;
                f.as_any().downcast_ref::<UInt32Array>().cloned().ok_or_else(|| WeirError::internal("join index type"))
            };
            li = pick(&li)?;
            ri = pick(&ri)?;
        }
        let with_partner = |n: usize, matched: &UInt32Array, partner: bool| -> UInt32Array {
            let mut seen = vec![false; n];
            matched.values().iter().for_each(|i| seen[*i as usize] = true);
            (0..n as u32).filter(|i| seen[*i as usize] == partner).collect::<Vec<_>>().into()
        };
        let one_side = |batch: &RecordBatch, rows: UInt32Array| -> Result<Option<RecordBatch>> {
            let columns =
                batch.columns().iter().map(|c| take(c.as_ref(), &rows, None)).collect::<std::result::Result<_, _>>()?;
            (!rows.is_empty()).then(|| self.output(columns, rows.len())).transpose()
        };
        match self.spec.kind {
            JoinKind::LeftSemi => return one_side(&left, with_partner(left.num_rows(), &li, true)),
            JoinKind::LeftAnti => return one_side(&left, with_partner(left.num_rows(), &li, false)),
            JoinKind::RightSemi => return one_side(&right, with_partner(right.num_rows(), &ri, true)),
            JoinKind::RightAnti => return one_side(&right, with_partner(right.num_rows(), &ri, false)),
            _ => {}
        }
        let mut parts = vec![self.pairs(&left, &right, &li, &ri, &self.spec.schema)?];
        let unmatched = |n: usize, matched: &UInt32Array| with_partner(n, matched, false);
        if matches!(self.spec.kind, JoinKind::Left | JoinKind::Full) {
            let rows = unmatched(left.num_rows(), &li);
            parts.push(self.padded(&left, &rows, 0)?);
        }
        if matches!(self.spec.kind, JoinKind::Right | JoinKind::Full) {
            let rows = unmatched(right.num_rows(), &ri);
            parts.push(self.padded(&right, &rows, 1)?);
        }
        let out = concat_batches(&self.spec.schema, &parts)?;
        Ok((out.num_rows() > 0).then_some(out))
    }

    /// Rows pairing left row `li[k]` with right row `ri[k]`, in `schema`.
    fn pairs(
        &self,
        left: &RecordBatch,
        right: &RecordBatch,
        li: &UInt32Array,
        ri: &UInt32Array,
        schema: &SchemaRef,
    ) -> Result<RecordBatch> {
        let mut columns = Vec::with_capacity(self.spec.schema.fields().len());
        for c in left.columns() {
            columns.push(take(c.as_ref(), li, None)?);
        }
        for c in right.columns() {
            columns.push(take(c.as_ref(), ri, None)?);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(li.len()));
        Ok(RecordBatch::try_new_with_options(schema.clone(), columns, &options)?)
    }

    /// Output rows of one input without a partner, the other input's columns NULL.
    fn padded(&self, batch: &RecordBatch, rows: &UInt32Array, side: usize) -> Result<RecordBatch> {
        let n = rows.len();
        let taken =
            batch.columns().iter().map(|c| take(c.as_ref(), rows, None)).collect::<std::result::Result<Vec<_>, _>>()?;
        let nulls = |s: usize| -> Vec<ArrayRef> {
            self.spec.schemas[s].fields().iter().map(|f| new_null_array(f.data_type(), n)).collect()
        };
        let columns = if side == 0 { [taken, nulls(1)].concat() } else { [nulls(0), taken].concat() };
        self.output(columns, n)
    }

    fn output(&self, columns: Vec<ArrayRef>, rows: usize) -> Result<RecordBatch> {
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        Ok(RecordBatch::try_new_with_options(self.spec.schema.clone(), columns, &options)?)
    }
}

impl KeyedLogic for WindowJoin {
    type Own = ();

    fn name(&self) -> String {
        "WindowJoin".into()
    }

    fn process(&mut self, input: usize, chunk: Chunk, _out: &mut Vec<Message>) -> Result<()> {
        if !chunk.is_append_only() {
            return Err(WeirError::not_supported("window joins of updates or deletes"));
        }
        if input > 1 {
            return Err(WeirError::internal(format!("a join has two inputs, not input {input}")));
        }
        self.add(input, chunk.batch)
    }

    fn state(&mut self) -> (&mut weir_state::StateTables, &mut Progress) {
        (&mut self.tables, &mut self.progress)
    }

    fn progress(&self) -> &Progress {
        &self.progress
    }

    /// Join every window whose end is at or before `watermark` + 1 ms, oldest first.
    fn fire(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        let bound = watermark.0.saturating_add(1);
        if self.progress.open.first().is_none_or(|first| *first > bound) {
            return Ok(());
        }
        // Per window end, each input's rows (in their row format).
        let mut due: BTreeMap<i64, [Vec<Vec<u8>>; 2]> = BTreeMap::new();
        for side in 0..2 {
            for (end, entries) in take_due(&mut self.tables, self.sides[side], &self.progress.open, bound)? {
                due.entry(end).or_default()[side].extend(entries.into_iter().map(|(_, v)| v));
            }
        }
        self.progress.fired(bound);
        for rows in due.values() {
            let inputs = [vec![self.decode(0, &rows[0])?], vec![self.decode(1, &rows[1])?]];
            if let Some(batch) = self.join(&inputs)? {
                out.push(Message::Chunk(Chunk::inserts(batch)));
            }
        }
        Ok(())
    }
}

//! Window joins: rows of two windowed inputs joined when they belong to the same window
//! (`ON l.window_start = r.window_start AND l.window_end = r.window_end AND keys…`), as
//! Flink's window join. Each input's rows are kept per window until the watermark (the
//! minimum of both inputs) passes the window's end; then the window is joined at once, as a
//! hash join over its rows, and its rows are dropped. Rows of a window that has already been
//! joined are late: dropped and counted.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, Array, ArrayRef, BooleanArray, Int64Array, RecordBatch, UInt32Array};
use datafusion::arrow::compute::kernels::cmp::eq;
use datafusion::arrow::compute::{concat_batches, filter_record_batch, take};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatchOptions;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;
use weir_core::{Chunk, Message, Operator, Result, Watermark, WeirError};

use super::window::{advance, millis, Fires};

/// Which rows without a partner are kept (padded with NULLs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    Inner,
    Left,
    Right,
    Full,
    /// Rows of one input with (semi) or without (anti) a partner, that input's columns only.
    LeftSemi,
    LeftAnti,
    RightSemi,
    RightAnti,
}

/// A window join as planned. Key columns include both windows' `window_start` and
/// `window_end`; `ends` says which column of each input is `window_end`.
#[derive(Debug, Clone)]
pub struct JoinSpec {
    pub kind: JoinKind,
    pub keys: [Vec<usize>; 2],
    pub ends: [usize; 2],
    pub schemas: [SchemaRef; 2],
    /// Condition beyond the equal keys, over a left row and a right row side by side.
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    /// The left columns, then the right columns: what `filter` reads.
    pub pair_schema: SchemaRef,
    /// The output: both inputs' columns, or one input's for semi and anti joins.
    pub schema: SchemaRef,
}

pub struct WindowJoin {
    spec: JoinSpec,
    keys: RowConverter,
    /// Buffered rows per window end, per input.
    windows: BTreeMap<i64, [Vec<RecordBatch>; 2]>,
    watermark: Watermark,
    late: u64,
}

impl WindowJoin {
    pub fn new(spec: JoinSpec) -> Result<Self> {
        let fields =
            spec.keys[0].iter().map(|k| SortField::new(spec.schemas[0].field(*k).data_type().clone())).collect();
        Ok(Self {
            keys: RowConverter::new(fields)?,
            spec,
            windows: BTreeMap::new(),
            watermark: Watermark::MIN,
            late: 0,
        })
    }

    fn add(&mut self, side: usize, batch: RecordBatch) -> Result<()> {
        let ends = millis(batch.column(self.spec.ends[side]))?;
        let bound = self.watermark.0.saturating_add(1);
        let mut distinct: Vec<i64> = ends.iter().flatten().collect();
        distinct.sort_unstable();
        distinct.dedup();
        let ends: ArrayRef = Arc::new(ends);
        for end in distinct {
            let rows = if distinct_is_whole(&ends, end) {
                batch.clone()
            } else {
                filter_record_batch(&batch, &eq(&ends, &Int64Array::new_scalar(end))?)?
            };
            if end <= bound {
                self.late += rows.num_rows() as u64;
                continue;
            }
            self.windows.entry(end).or_default()[side].push(rows);
        }
        Ok(())
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

/// Whether every row of `ends` is `end` (no need to filter).
fn distinct_is_whole(ends: &ArrayRef, end: i64) -> bool {
    let ends = ends.as_any().downcast_ref::<Int64Array>();
    ends.is_some_and(|e| e.null_count() == 0 && e.values().iter().all(|v| *v == end))
}

impl Operator for WindowJoin {
    fn name(&self) -> String {
        "WindowJoin".into()
    }

    fn process_chunk(&mut self, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        self.process_input(0, chunk, out)
    }

    fn process_input(&mut self, input: usize, chunk: Chunk, _out: &mut Vec<Message>) -> Result<()> {
        if !chunk.is_append_only() {
            return Err(WeirError::not_supported("window joins of updates or deletes"));
        }
        if input > 1 {
            return Err(WeirError::internal(format!("a join has two inputs, not input {input}")));
        }
        self.add(input, chunk.batch)
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

    /// The watermark, the late count, then each input's buffered rows as an Arrow IPC
    /// stream (the left one's length first).
    fn snapshot(&mut self) -> Result<Option<weir_core::OperatorSnapshot>> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&self.watermark.0.to_le_bytes());
        bytes.extend_from_slice(&self.late.to_le_bytes());
        let mut streams = Vec::with_capacity(2);
        for side in 0..2 {
            let mut stream = Vec::new();
            let mut writer =
                datafusion::arrow::ipc::writer::StreamWriter::try_new(&mut stream, &self.spec.schemas[side])?;
            for inputs in self.windows.values() {
                for batch in &inputs[side] {
                    writer.write(batch)?;
                }
            }
            writer.finish()?;
            drop(writer);
            streams.push(stream);
        }
        bytes.extend_from_slice(&(streams[0].len() as u64).to_le_bytes());
        bytes.extend_from_slice(&streams[0]);
        bytes.extend_from_slice(&streams[1]);
        Ok(Some(weir_core::OperatorSnapshot::bytes(bytes)))
    }

    fn restore(&mut self, states: &[&[u8]]) -> Result<()> {
        let state = weir_core::single_state(states, "a window join")?;
        let damaged = || WeirError::internal("window join state in a checkpoint is damaged");
        let word = |at: usize| -> Result<[u8; 8]> {
            state.get(at..at + 8).and_then(|b| b.try_into().ok()).ok_or_else(damaged)
        };
        let watermark = Watermark(i64::from_le_bytes(word(0)?));
        self.late = u64::from_le_bytes(word(8)?);
        let left_len = u64::from_le_bytes(word(16)?) as usize;
        let left = state.get(24..24 + left_len).ok_or_else(damaged)?;
        let right = state.get(24 + left_len..).ok_or_else(damaged)?;
        // Rows go back into their windows as they came (nothing in them is late).
        self.watermark = Watermark::MIN;
        for (side, stream) in [left, right].into_iter().enumerate() {
            let reader = datafusion::arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(stream), None)?;
            for batch in reader {
                self.add(side, batch?)?;
            }
        }
        self.watermark = watermark;
        Ok(())
    }
}

impl Fires for WindowJoin {
    fn watermark_mut(&mut self) -> &mut Watermark {
        &mut self.watermark
    }

    fn fire(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        let bound = watermark.0.saturating_add(1);
        let due: Vec<i64> = self.windows.range(..=bound).map(|(end, _)| *end).collect();
        for end in due {
            let Some(inputs) = self.windows.remove(&end) else { continue };
            if let Some(batch) = self.join(&inputs)? {
                out.push(Message::Chunk(Chunk::inserts(batch)));
            }
        }
        Ok(())
    }
}

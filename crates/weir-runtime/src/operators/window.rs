//! Event-time windows: assigning rows to windows (Flink's window table functions) and
//! aggregating each window's groups until the watermark passes its end.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, Int64Array, RecordBatch, TimestampMillisecondArray, UInt32Array,
};
use datafusion::arrow::compute::{cast, filter, take};
use datafusion::arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatchOptions;
use datafusion::logical_expr::GroupsAccumulator;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::PhysicalExpr;
use weir_core::{Chunk, Message, Operator, Result, Watermark, WeirError};

/// Which windows a row belongs to (all in milliseconds).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// `TUMBLE(size [, offset])`: one window `[floor(ts), floor(ts) + size)`.
    Tumble { size: i64, offset: i64 },
    /// `HOP(slide, size [, offset])`: `size / slide` overlapping windows.
    Hop { slide: i64, size: i64, offset: i64 },
    /// `CUMULATE(step, max [, offset])`: windows `[floor_max(ts), floor_max(ts) + k * step)`
    /// that contain ts.
    Cumulate { step: i64, max: i64, offset: i64 },
    /// `SESSION(gap)`: each row starts as the window `[ts, ts + gap)`; the session aggregate
    /// merges a key's windows that overlap or touch into sessions.
    Session { gap: i64 },
}

/// As derived, but without an offset of zero: the text is part of a plan's fingerprint, which
/// checkpoints taken before windows had offsets still match.
impl std::fmt::Debug for WindowKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (text, offset) = match *self {
            WindowKind::Tumble { size, offset } => (format!("Tumble {{ size: {size}"), offset),
            WindowKind::Hop { slide, size, offset } => (format!("Hop {{ slide: {slide}, size: {size}"), offset),
            WindowKind::Cumulate { step, max, offset } => (format!("Cumulate {{ step: {step}, max: {max}"), offset),
            WindowKind::Session { gap } => (format!("Session {{ gap: {gap}"), 0),
        };
        match offset {
            0 => write!(f, "{text} }}"),
            o => write!(f, "{text}, offset: {o} }}"),
        }
    }
}

impl WindowKind {
    /// Append the windows of event time `ts` as (start, end) to `out`. Windows align to the
    /// epoch plus the offset (Flink's `ts - (ts - offset) mod size`).
    fn windows(&self, ts: i64, out: &mut Vec<(i64, i64)>) {
        match *self {
            WindowKind::Tumble { size, offset } => {
                let start = ts - (ts - offset).rem_euclid(size);
                out.push((start, start + size));
            }
            WindowKind::Hop { slide, size, offset } => {
                // Windows start at multiples of `slide` (plus the offset), oldest first: every
                // start in (ts - size, ts].
                let last = ts - (ts - offset).rem_euclid(slide);
                let first = ts - size + 1;
                let mut start = first + (last - first).rem_euclid(slide);
                while start <= last {
                    out.push((start, start + size));
                    start += slide;
                }
            }
            WindowKind::Cumulate { step, max, offset } => {
                let start = ts - (ts - offset).rem_euclid(max);
                let mut end = start + step;
                while end <= start + max {
                    if end > ts {
                        out.push((start, end));
                    }
                    end += step;
                }
            }
            WindowKind::Session { gap } => out.push((ts, ts.saturating_add(gap))),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            WindowKind::Tumble { size, offset } => format!("TUMBLE({size} ms{})", offset_text(*offset)),
            WindowKind::Hop { slide, size, offset } => {
                format!("HOP(slide {slide} ms, size {size} ms{})", offset_text(*offset))
            }
            WindowKind::Cumulate { step, max, offset } => {
                format!("CUMULATE(step {step} ms, max {max} ms{})", offset_text(*offset))
            }
            WindowKind::Session { gap } => format!("SESSION(gap {gap} ms)"),
        }
    }
}

fn offset_text(offset: i64) -> String {
    match offset {
        0 => String::new(),
        o => format!(", offset {o} ms"),
    }
}

/// Adds `window_start`, `window_end`, `window_time` to every row, repeating a row for each of
/// its windows (HOP, CUMULATE).
pub struct WindowAssign {
    kind: WindowKind,
    time_column: usize,
    schema: SchemaRef,
}

impl WindowAssign {
    pub fn new(kind: WindowKind, time_column: usize, schema: SchemaRef) -> Self {
        Self { kind, time_column, schema }
    }
}

/// Event times of a timestamp column in milliseconds.
pub fn millis(column: &ArrayRef) -> Result<Int64Array> {
    let ms = cast(column, &DataType::Timestamp(TimeUnit::Millisecond, None))?;
    let ms = cast(&ms, &DataType::Int64)?;
    ms.as_any().downcast_ref::<Int64Array>().cloned().ok_or_else(|| WeirError::internal("event time is not Int64"))
}

impl Operator for WindowAssign {
    fn name(&self) -> String {
        "WindowAssign".into()
    }

    fn process_chunk(&mut self, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        let ts = millis(chunk.batch.column(self.time_column))?;
        let mut rows: Vec<u32> = Vec::with_capacity(ts.len());
        let mut starts: Vec<i64> = Vec::with_capacity(ts.len());
        let mut ends: Vec<i64> = Vec::with_capacity(ts.len());
        let mut windows = Vec::with_capacity(4);
        for (row, t) in ts.iter().enumerate() {
            // A row without event time belongs to no window.
            let Some(t) = t else { continue };
            windows.clear();
            self.kind.windows(t, &mut windows);
            for (s, e) in &windows {
                rows.push(row as u32);
                starts.push(*s);
                ends.push(*e);
            }
        }
        let n = rows.len();
        if n == 0 {
            return Ok(());
        }
        let indices = UInt32Array::from(rows);
        let mut columns: Vec<ArrayRef> =
            if n == chunk.num_rows() && indices.values().iter().enumerate().all(|(i, r)| *r as usize == i) {
                chunk.batch.columns().to_vec()
            } else {
                chunk
                    .batch
                    .columns()
                    .iter()
                    .map(|c| take(c.as_ref(), &indices, None))
                    .collect::<std::result::Result<_, _>>()?
            };
        let times: Vec<i64> = ends.iter().map(|e| e - 1).collect();
        columns.push(Arc::new(TimestampMillisecondArray::from(starts)));
        columns.push(Arc::new(TimestampMillisecondArray::from(ends)));
        columns.push(Arc::new(TimestampMillisecondArray::from(times)));
        let options = RecordBatchOptions::new().with_row_count(Some(n));
        let batch = RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)?;
        out.push(Message::Chunk(Chunk::inserts(batch)));
        Ok(())
    }
}

/// What a window aggregate computes, whatever keeps its state.
#[derive(Debug, Clone)]
pub struct WindowSpec {
    pub group_exprs: Vec<Arc<dyn PhysicalExpr>>,
    /// Name and type of each group column.
    pub group_schema: SchemaRef,
    /// Which group expression is `window_end`.
    pub window_end: usize,
    pub aggregates: Vec<Arc<AggregateFunctionExpr>>,
    /// `FILTER (WHERE …)` of each aggregate.
    pub filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    /// Output: the group columns, then one column per aggregate.
    pub schema: SchemaRef,
    /// Where late rows go, instead of only being counted.
    pub late: Option<LateOutput>,
}

/// Late rows written to a table (`'late-data.table'`): which input columns make its row.
#[derive(Debug, Clone)]
pub struct LateOutput {
    pub table: Arc<weir_core::TableDef>,
    /// For each column of the table, the input column it is taken from.
    pub columns: Vec<usize>,
}

impl LateOutput {
    /// The rows of `batch` where `mask` is true, as rows of the late-data table.
    pub(crate) fn rows(&self, batch: &RecordBatch, mask: &BooleanArray) -> Result<RecordBatch> {
        let rows = mask.true_count();
        let schema = self.table.schema.clone();
        let columns = self
            .columns
            .iter()
            .zip(schema.fields())
            .map(|(i, field)| Ok(cast(&filter(batch.column(*i), mask)?, field.data_type())?))
            .collect::<Result<Vec<_>>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        Ok(RecordBatch::try_new_with_options(schema, columns, &options)?)
    }
}

impl WindowSpec {
    /// Evaluate a chunk: group keys, arguments, filters, window ends; late rows dropped and
    /// added to `late`. `None` if no row is left.
    /// Late rows are added to `late_rows` if the spec has a late-data table.
    pub(crate) fn evaluate(
        &self,
        chunk: &Chunk,
        watermark: Watermark,
        late: &mut u64,
        late_rows: &mut Vec<RecordBatch>,
    ) -> Result<Option<Evaluated>> {
        let evaluated =
            evaluate(chunk, &self.group_exprs, &self.aggregates, &self.filters, self.window_end, watermark)?;
        let Some((mask, count)) = &evaluated.late else { return Ok(Some(evaluated)) };
        *late += *count as u64;
        if let Some(output) = &self.late {
            late_rows.push(output.rows(&chunk.batch, mask)?);
        }
        if *count == chunk.num_rows() {
            return Ok(None);
        }
        let keep = datafusion::arrow::compute::not(mask)?;
        let (keys, args, filters) = select_rows(&evaluated.keys, &evaluated.args, &evaluated.filters, &keep)?;
        Ok(Some(Evaluated { keys, args, filters, late: None }))
    }

    pub(crate) fn accumulators(&self) -> Result<Vec<Box<dyn GroupsAccumulator>>> {
        accumulators(&self.aggregates)
    }
}

/// A batch's group keys, aggregate arguments and filters, with late rows removed.
pub(crate) struct Evaluated {
    pub keys: Vec<ArrayRef>,
    pub args: Vec<Vec<ArrayRef>>,
    pub filters: Vec<Option<BooleanArray>>,
    /// Which rows are late, and how many.
    pub late: Option<(BooleanArray, usize)>,
}

/// Evaluate a chunk for a window aggregate; rows whose window has fired (end at or before
/// `watermark` + 1 ms) are late: marked in [`Evaluated::late`], not removed.
pub(crate) fn evaluate(
    chunk: &Chunk,
    group_exprs: &[Arc<dyn PhysicalExpr>],
    aggregates: &[Arc<AggregateFunctionExpr>],
    filters: &[Option<Arc<dyn PhysicalExpr>>],
    window_end: usize,
    watermark: Watermark,
) -> Result<Evaluated> {
    if !chunk.is_append_only() {
        return Err(WeirError::not_supported("window aggregation of updates or deletes"));
    }
    let batch = &chunk.batch;
    let rows = batch.num_rows();
    let eval = |e: &Arc<dyn PhysicalExpr>| e.evaluate(batch).and_then(|v| v.into_array(rows));
    let keys = group_exprs.iter().map(eval).collect::<datafusion::error::Result<Vec<_>>>()?;
    let args = aggregates
        .iter()
        .map(|a| a.expressions().iter().map(eval).collect::<datafusion::error::Result<Vec<_>>>())
        .collect::<datafusion::error::Result<Vec<_>>>()?;
    let filter_masks = filters
        .iter()
        .map(|f| match f {
            None => Ok(None),
            Some(f) => Ok(eval(f)?.as_any().downcast_ref::<BooleanArray>().cloned()),
        })
        .collect::<Result<Vec<_>>>()?;
    let ends = millis(&keys[window_end])?;
    let bound = watermark.0.saturating_add(1);
    let late_rows = ends.iter().filter(|e| e.is_some_and(|e| e <= bound)).count();
    let late = (late_rows > 0).then(|| {
        let mask: BooleanArray = ends.iter().map(|e| Some(e.is_some_and(|e| e <= bound))).collect();
        (mask, late_rows)
    });
    Ok(Evaluated { keys, args, filters: filter_masks, late })
}

/// The rows of keys, arguments and filters where `mask` is true.
#[allow(clippy::type_complexity)]
pub(crate) fn select_rows(
    keys: &[ArrayRef],
    args: &[Vec<ArrayRef>],
    filters: &[Option<BooleanArray>],
    mask: &BooleanArray,
) -> Result<(Vec<ArrayRef>, Vec<Vec<ArrayRef>>, Vec<Option<BooleanArray>>)> {
    let sub = |a: &ArrayRef| filter(a.as_ref(), mask);
    let k = keys.iter().map(sub).collect::<std::result::Result<Vec<_>, _>>()?;
    let a = args
        .iter()
        .map(|v| v.iter().map(sub).collect::<std::result::Result<Vec<_>, _>>())
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let f = filters
        .iter()
        .map(|f| match f {
            None => Ok(None),
            Some(f) => Ok(filter(f, mask)?.as_any().downcast_ref::<BooleanArray>().cloned()),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((k, a, f))
}

/// Accumulators for `aggregates`, vectorized where DataFusion has them, one per group behind
/// DataFusion's adapter otherwise (e.g. `COUNT(DISTINCT x)`).
pub(crate) fn accumulators(aggregates: &[Arc<AggregateFunctionExpr>]) -> Result<Vec<Box<dyn GroupsAccumulator>>> {
    aggregates
        .iter()
        .map(|agg| {
            if agg.groups_accumulator_supported() {
                Ok(agg.create_groups_accumulator()?)
            } else {
                let agg = agg.clone();
                Ok(Box::new(datafusion::physical_expr::GroupsAccumulatorAdapter::new(move || agg.create_accumulator()))
                    as Box<dyn GroupsAccumulator>)
            }
        })
        .collect()
}

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Array, Int64Array};
use datafusion::arrow::compute::{cast, max};
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::physical_expr::PhysicalExpr;
use weir_core::{Chunk, Message, Operator, Result, Watermark, WeirError};

/// Emits, after each chunk, the highest value of the table's watermark expression seen so far
/// (Flink's bounded-out-of-orderness strategy: the expression is usually `ts - INTERVAL …`).
/// Event time comes from the data only, never from the wall clock.
///
/// When the source task reads several partitions (Kafka), the highest value is kept per
/// partition and the watermark is their minimum, so that a partition behind the others does
/// not see its rows made late by theirs; a partition that has had no data for the source's
/// idle timeout stops holding the minimum back until it has data again (the timeout is
/// wall-clock time, as in Flink: it moves watermarks sooner, it never changes a result that
/// the data alone determines).
pub struct WatermarkGenerator {
    expr: Arc<dyn PhysicalExpr>,
    /// The expression as `column - delay` (ms), when it is one: its highest value is then the
    /// column's highest minus the delay, one max over the column instead of an interval
    /// subtraction per row.
    shifted: Option<(usize, i64)>,
    current: Watermark,
    /// Per partition: highest value, and when it last had data.
    partitions: BTreeMap<u32, (Watermark, Instant)>,
    idle_timeout: Option<Duration>,
}

impl WatermarkGenerator {
    pub fn new(expr: Arc<dyn PhysicalExpr>) -> Self {
        let shifted = shifted_column(&expr);
        Self { expr, shifted, current: Watermark::MIN, partitions: BTreeMap::new(), idle_timeout: None }
    }

    /// The highest value of the expression over `batch`, in milliseconds.
    fn highest(&self, batch: &datafusion::arrow::record_batch::RecordBatch) -> Result<Option<i64>> {
        let (values, delay) = match self.shifted {
            Some((column, delay)) => (batch.column(column).clone(), delay),
            None => (self.expr.evaluate(batch)?.into_array(batch.num_rows())?, 0),
        };
        let millis = cast(&values, &DataType::Timestamp(TimeUnit::Millisecond, None))?;
        let millis = cast(&millis, &DataType::Int64)?;
        let millis = millis
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| WeirError::internal("watermark values are not Int64"))?;
        Ok(max(millis).map(|m| m.saturating_sub(delay)))
    }

    /// The minimum over the partitions that are not idle.
    fn partitions_watermark(&self) -> Option<Watermark> {
        let now = Instant::now();
        self.partitions
            .values()
            .filter(|(_, seen)| self.idle_timeout.is_none_or(|t| now.duration_since(*seen) < t))
            .map(|(w, _)| *w)
            .min()
    }
}

impl Operator for WatermarkGenerator {
    fn name(&self) -> String {
        "Watermark".into()
    }

    fn source_partitions(&mut self, partitions: &[u32], idle_timeout: Option<Duration>) {
        let now = Instant::now();
        for p in partitions {
            self.partitions.entry(*p).or_insert((Watermark::MIN, now));
        }
        self.idle_timeout = idle_timeout;
    }

    fn process_chunk(&mut self, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        let highest = self.highest(&chunk.batch)?.map(Watermark);
        let origin = chunk.origin.filter(|p| self.partitions.contains_key(p));
        out.push(Message::Chunk(chunk));
        let candidate = match origin {
            None => highest,
            Some(p) => {
                if let Some(entry) = self.partitions.get_mut(&p) {
                    entry.1 = Instant::now();
                    if let Some(h) = highest.filter(|h| *h > entry.0) {
                        entry.0 = h;
                    }
                }
                self.partitions_watermark()
            }
        };
        if let Some(w) = candidate.filter(|w| *w > self.current) {
            self.current = w;
            out.push(Message::Watermark(w));
        }
        Ok(())
    }

    /// The watermark, then each partition's highest value.
    fn snapshot(&mut self) -> Result<Option<weir_core::OperatorSnapshot>> {
        let mut bytes = self.current.0.to_le_bytes().to_vec();
        for (p, (w, _)) in &self.partitions {
            bytes.extend_from_slice(&p.to_le_bytes());
            bytes.extend_from_slice(&w.0.to_le_bytes());
        }
        Ok(Some(weir_core::OperatorSnapshot::bytes(bytes)))
    }

    /// From one snapshot; or from every source task's of an earlier run at another
    /// parallelism: the lowest of their watermarks (this task may now read what any of them
    /// had left; a watermark only rises from there), per partition only from one snapshot
    /// (sources of partitions do not restore at another parallelism).
    fn restore(&mut self, states: &[&[u8]]) -> Result<()> {
        let damaged = || WeirError::internal("watermark state in a checkpoint is damaged");
        let mut lowest: Option<Watermark> = None;
        for state in states {
            let head = state.get(..8).and_then(|h| h.try_into().ok()).ok_or_else(damaged)?;
            let w = Watermark(i64::from_le_bytes(head));
            lowest = Some(lowest.map_or(w, |l| l.min(w)));
        }
        self.current = lowest.ok_or_else(damaged)?;
        let [state] = states else { return Ok(()) };
        let rest = &state[8..];
        if rest.len() % 12 != 0 {
            return Err(damaged());
        }
        let now = Instant::now();
        for entry in rest.chunks(12) {
            let p = u32::from_le_bytes(entry[..4].try_into().map_err(|_| damaged())?);
            let w = i64::from_le_bytes(entry[4..].try_into().map_err(|_| damaged())?);
            self.partitions.insert(p, (Watermark(w), now));
        }
        Ok(())
    }

    fn process_watermark(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        // Only the end-of-input watermark arrives from upstream; never move backwards.
        if watermark > self.current {
            self.current = watermark;
            out.push(Message::Watermark(watermark));
        }
        Ok(())
    }
}

/// `(column, delay in ms)` if `expr` is a column, or a column minus a constant interval of
/// whole milliseconds without months.
fn shifted_column(expr: &Arc<dyn PhysicalExpr>) -> Option<(usize, i64)> {
    use datafusion::common::ScalarValue;
    use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
    if let Some(c) = expr.downcast_ref::<Column>() {
        return Some((c.index(), 0));
    }
    let b = expr.downcast_ref::<BinaryExpr>()?;
    if *b.op() != datafusion::logical_expr::Operator::Minus {
        return None;
    }
    let column = b.left().downcast_ref::<Column>()?.index();
    let delay = match b.right().downcast_ref::<Literal>()?.value() {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months == 0 && v.nanoseconds % 1_000_000 == 0 => {
            i64::from(v.days) * 86_400_000 + v.nanoseconds / 1_000_000
        }
        ScalarValue::IntervalDayTime(Some(v)) => i64::from(v.days) * 86_400_000 + i64::from(v.milliseconds),
        _ => return None,
    };
    Some((column, delay))
}

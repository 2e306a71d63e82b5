use std::sync::Arc;

use datafusion::arrow::array::{Array, Int64Array};
use datafusion::arrow::compute::{cast, max};
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::physical_expr::PhysicalExpr;
use weir_core::{Chunk, Message, Operator, Result, Watermark, WeirError};

/// Emits, after each chunk, the highest value of the table's watermark expression seen so far
/// (Flink's bounded-out-of-orderness strategy: the expression is usually `ts - INTERVAL …`).
/// Event time comes from the data only, never from the wall clock.
pub struct WatermarkGenerator {
    expr: Arc<dyn PhysicalExpr>,
    current: Watermark,
}

impl WatermarkGenerator {
    pub fn new(expr: Arc<dyn PhysicalExpr>) -> Self {
        Self { expr, current: Watermark::MIN }
    }
}

impl Operator for WatermarkGenerator {
    fn name(&self) -> String {
        "Watermark".into()
    }

    fn process_chunk(&mut self, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        let values = self.expr.evaluate(&chunk.batch)?.into_array(chunk.num_rows())?;
        let millis = cast(&values, &DataType::Timestamp(TimeUnit::Millisecond, None))?;
        let millis = cast(&millis, &DataType::Int64)?;
        let millis = millis
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| WeirError::internal("watermark values are not Int64"))?;
        let highest = max(millis);
        out.push(Message::Chunk(chunk));
        if let Some(highest) = highest {
            if Watermark(highest) > self.current {
                self.current = Watermark(highest);
                out.push(Message::Watermark(self.current));
            }
        }
        Ok(())
    }

    fn snapshot(&mut self) -> Result<Option<Vec<u8>>> {
        Ok(Some(self.current.0.to_le_bytes().to_vec()))
    }

    fn restore(&mut self, state: &[u8]) -> Result<()> {
        let bytes: [u8; 8] =
            state.try_into().map_err(|_| WeirError::internal("watermark state in a checkpoint is damaged"))?;
        self.current = Watermark(i64::from_le_bytes(bytes));
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

//! Flink's `CURRENT_WATERMARK(rowtime)`: the watermark of the operator that evaluates it, as a
//! column. This operator appends the watermark it has last seen to every chunk (NULL before
//! the first, as in Flink), and the projection or filter above reads that column where the
//! query calls the function.
//!
//! The watermark is kept in the checkpoint, so a restored job goes on from the watermark it
//! had, not from NULL. It is still a value that depends on how rows were batched (a
//! watermark follows each chunk a source reads, and a replay may read other chunks), so the
//! exactly-once checks count it as non-deterministic, as Flink's documentation does.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, TimestampMillisecondArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use weir_core::{Chunk, Message, Operator, OperatorSnapshot, Result, Watermark, WeirError};

pub struct AppendWatermark {
    schema: SchemaRef,
    current: Watermark,
}

impl AppendWatermark {
    /// `schema`: the input's columns and one more, `TIMESTAMP(3)`, for the watermark.
    pub fn new(schema: SchemaRef) -> Self {
        Self { schema, current: Watermark::MIN }
    }
}

impl Operator for AppendWatermark {
    fn name(&self) -> String {
        "CurrentWatermark".into()
    }

    fn process_chunk(&mut self, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        let rows = chunk.num_rows();
        let value = (self.current != Watermark::MIN).then_some(self.current.0);
        let column: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![value; rows]));
        let columns = chunk.batch.columns().iter().cloned().chain([column]).collect();
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        let batch = RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)?;
        out.push(Message::Chunk(chunk.with_batch(batch)));
        Ok(())
    }

    fn process_watermark(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        self.current = self.current.max(watermark);
        out.push(Message::Watermark(watermark));
        Ok(())
    }

    fn snapshot(&mut self) -> Result<Option<OperatorSnapshot>> {
        Ok(Some(OperatorSnapshot::bytes(self.current.0.to_le_bytes().to_vec())))
    }

    /// Restored at another parallelism, a task starts from the lowest of the old tasks'
    /// watermarks: no row it sees can have been behind a higher one.
    fn restore(&mut self, states: &[&[u8]]) -> Result<()> {
        let damaged = || WeirError::internal("the CURRENT_WATERMARK state in a checkpoint is damaged");
        let mut lowest: Option<i64> = None;
        for state in states {
            let bytes: [u8; 8] = (*state).try_into().map_err(|_| damaged())?;
            let w = i64::from_le_bytes(bytes);
            lowest = Some(lowest.map_or(w, |l| l.min(w)));
        }
        self.current = lowest.map_or(Watermark::MIN, Watermark);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};

    fn chunk(rows: i64) -> Chunk {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        let column: ArrayRef = Arc::new(datafusion::arrow::array::Int64Array::from_iter_values(0..rows));
        Chunk::inserts(RecordBatch::try_new(schema, vec![column]).unwrap())
    }

    fn appended(op: &mut AppendWatermark, rows: i64) -> Vec<Option<i64>> {
        let mut out = Vec::new();
        op.process_chunk(chunk(rows), &mut out).unwrap();
        let [Message::Chunk(c)] = out.as_slice() else { panic!("one chunk") };
        let col = c.batch.column(1).as_any().downcast_ref::<TimestampMillisecondArray>().unwrap();
        col.iter().collect()
    }

    fn op() -> AppendWatermark {
        AppendWatermark::new(Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("w", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        ])))
    }

    #[test]
    fn null_before_the_first_watermark_then_the_last_one_and_kept_over_a_restore() {
        let mut a = op();
        assert_eq!(appended(&mut a, 2), [None, None]);
        a.process_watermark(Watermark(1000), &mut Vec::new()).unwrap();
        assert_eq!(appended(&mut a, 1), [Some(1000)]);
        // A lower watermark (from another input) does not take it back.
        a.process_watermark(Watermark(500), &mut Vec::new()).unwrap();
        assert_eq!(appended(&mut a, 1), [Some(1000)]);
        let Some(snapshot) = a.snapshot().unwrap() else { panic!("a snapshot") };
        let bytes = snapshot.state;
        let mut restored = op();
        restored.restore(&[&bytes]).unwrap();
        assert_eq!(appended(&mut restored, 1), [Some(1000)]);
        // Two old tasks into one: the lower.
        let mut merged = op();
        merged.restore(&[&bytes, &700i64.to_le_bytes()]).unwrap();
        assert_eq!(appended(&mut merged, 1), [Some(700)]);
        assert!(op().restore(&[&[1, 2]]).is_err());
    }
}

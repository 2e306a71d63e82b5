//! A changelog chunk: an Arrow batch plus, per row, what the row means.
//!
//! Append-only streams (everything Weir produces today) carry no op column at all, so the
//! common case costs nothing. Once updating operators exist, a chunk carries an `Int8Array`
//! of [`Op`] codes beside the batch, row for row, as RisingWave's stream chunks and Flink's
//! `RowKind` do. Kernels that select rows (filter, take) are applied to the ops array too.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, Int8Array};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use crate::Result;

/// What a row of a changelog means. The codes are the values of the ops array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i8)]
pub enum Op {
    Insert = 0,
    UpdateBefore = 1,
    UpdateAfter = 2,
    Delete = 3,
}

impl Op {
    /// Flink's short form, as its print sink shows it: `+I`, `-U`, `+U`, `-D`.
    pub fn short(self) -> &'static str {
        match self {
            Op::Insert => "+I",
            Op::UpdateBefore => "-U",
            Op::UpdateAfter => "+U",
            Op::Delete => "-D",
        }
    }

    pub fn from_code(code: i8) -> Option<Op> {
        Some(match code {
            0 => Op::Insert,
            1 => Op::UpdateBefore,
            2 => Op::UpdateAfter,
            3 => Op::Delete,
            _ => return None,
        })
    }
}

/// A batch of rows flowing between operators.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub batch: RecordBatch,
    /// `None`: every row is an insert. Otherwise one [`Op`] code per row.
    pub ops: Option<Arc<Int8Array>>,
    /// The source partition the rows were read from, when a source task reads several
    /// (Kafka partitions): watermarks are tracked per partition.
    pub origin: Option<u32>,
}

impl Chunk {
    /// An append-only chunk.
    pub fn inserts(batch: RecordBatch) -> Self {
        Self { batch, ops: None, origin: None }
    }

    /// The same chunk, read from source partition `origin`.
    pub fn from_partition(mut self, origin: Option<u32>) -> Self {
        self.origin = origin;
        self
    }

    pub fn num_rows(&self) -> usize {
        self.batch.num_rows()
    }

    pub fn schema(&self) -> SchemaRef {
        self.batch.schema()
    }

    pub fn is_append_only(&self) -> bool {
        self.ops.is_none()
    }

    /// The op of row `i` (inserts when there is no ops array).
    pub fn op(&self, i: usize) -> Op {
        match &self.ops {
            None => Op::Insert,
            Some(ops) => Op::from_code(ops.value(i)).unwrap_or(Op::Insert),
        }
    }

    /// Keep the rows where `mask` is true, ops included.
    pub fn filter(&self, mask: &BooleanArray) -> Result<Chunk> {
        let batch = filter_record_batch(&self.batch, mask)?;
        let ops = match &self.ops {
            None => None,
            Some(ops) => {
                let kept: ArrayRef = datafusion::arrow::compute::filter(ops.as_ref(), mask)?;
                let kept = kept
                    .as_any()
                    .downcast_ref::<Int8Array>()
                    .cloned()
                    .ok_or_else(|| crate::WeirError::internal("ops array is not Int8"))?;
                Some(Arc::new(kept))
            }
        };
        Ok(Chunk { batch, ops, origin: self.origin })
    }

    /// The same rows and ops with other columns (a projection).
    pub fn with_batch(&self, batch: RecordBatch) -> Chunk {
        Chunk { batch, ops: self.ops.clone(), origin: self.origin }
    }

    /// `len` rows from `offset`, ops included.
    pub fn slice(&self, offset: usize, len: usize) -> Chunk {
        Chunk {
            batch: self.batch.slice(offset, len),
            ops: self.ops.as_ref().map(|o| Arc::new(o.slice(offset, len))),
            origin: self.origin,
        }
    }
}

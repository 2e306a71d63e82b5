//! A changelog chunk: an Arrow batch plus, per row, what the row means.
//!
//! Append-only streams carry no op column at all, so the common case costs nothing. An
//! updating stream's chunks carry an `Int8Array` of [`Op`] codes beside the batch, row for
//! row, as RisingWave's stream chunks and Flink's `RowKind` do.
//!
//! An update is a pair, `-U` old row then `+U` new row, always next to each other in one
//! chunk. Kernels that select rows keep that true: a filter that keeps one half of a pair
//! turns it into a `-D` or a `+I` ([`Chunk::filter`]), and an exchange that sends the halves
//! to different tasks does the same.

use std::sync::Arc;

use datafusion::arrow::array::{Array, BooleanArray, Int8Array};
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

    /// +1 for a row that adds (`+I`, `+U`), -1 for one that takes away (`-U`, `-D`).
    pub fn sign(self) -> i64 {
        match self {
            Op::Insert | Op::UpdateAfter => 1,
            Op::UpdateBefore | Op::Delete => -1,
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
    /// `None`: every row is an insert. Otherwise one valid [`Op`] code per row: only built
    /// from [`Op`]s or checked ([`Chunk::from_codes`]), so that no reader meets another code.
    ops: Option<Arc<Int8Array>>,
    /// The source partition the rows were read from, when a source task reads several
    /// (Kafka partitions): watermarks are tracked per partition.
    pub origin: Option<u32>,
}

impl Chunk {
    /// An append-only chunk.
    pub fn inserts(batch: RecordBatch) -> Self {
        Self { batch, ops: None, origin: None }
    }

    /// A changelog chunk: `ops` row for row (update pairs next to each other).
    pub fn changes(batch: RecordBatch, ops: &[Op]) -> Self {
        let codes: Int8Array = ops.iter().map(|o| Some(*o as i8)).collect();
        Self { batch, ops: Some(Arc::new(codes)), origin: None }
    }

    /// A changelog chunk from op codes made elsewhere (taken, repaired, decoded): each must
    /// be an [`Op`]'s, one per row, or it is an error naming the first that is not.
    pub fn from_codes(batch: RecordBatch, codes: Int8Array, origin: Option<u32>) -> Result<Self> {
        if codes.len() != batch.num_rows() || codes.null_count() > 0 {
            return Err(crate::WeirError::internal(format!(
                "a changelog chunk of {} rows with {} op codes ({} NULL)",
                batch.num_rows(),
                codes.len(),
                codes.null_count()
            )));
        }
        if let Some((row, code)) = codes.values().iter().enumerate().find(|(_, c)| !(0..=3).contains(*c)) {
            return Err(crate::WeirError::internal(format!("a changelog chunk with op code {code} at row {row}")));
        }
        Ok(Self { batch, ops: Some(Arc::new(codes)), origin })
    }

    /// The op codes, `None` when every row is an insert.
    pub fn op_codes(&self) -> Option<&Arc<Int8Array>> {
        self.ops.as_ref()
    }

    /// The rows at `indices`, with their ops.
    pub fn take(&self, indices: &datafusion::arrow::array::UInt32Array) -> Result<Chunk> {
        let batch = datafusion::arrow::compute::take_record_batch(&self.batch, indices)?;
        let ops = match &self.ops {
            None => None,
            Some(ops) => {
                Some(Arc::new(datafusion::arrow::compute::take(ops.as_ref(), indices, None).and_then(|a| {
                    a.as_any().downcast_ref::<Int8Array>().cloned().ok_or_else(|| {
                        datafusion::arrow::error::ArrowError::InvalidArgumentError("ops array is not Int8".into())
                    })
                })?))
            }
        };
        Ok(Chunk { batch, ops, origin: self.origin })
    }

    /// The op of every row.
    pub fn ops(&self) -> Vec<Op> {
        (0..self.num_rows()).map(|i| self.op(i)).collect()
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

    /// Whether every row is an insert (no ops, or only `+I`).
    pub fn is_append_only(&self) -> bool {
        self.ops.as_ref().is_none_or(|ops| ops.values().iter().all(|o| *o == Op::Insert as i8))
    }

    /// The op of row `i` (inserts when there is no ops array).
    pub fn op(&self, i: usize) -> Op {
        match &self.ops {
            None => Op::Insert,
            // Every code was checked when the chunk was made.
            Some(ops) => Op::from_code(ops.value(i)).unwrap_or(Op::Insert),
        }
    }

    /// Keep the rows where `mask` is true (a null is false), ops included. An update pair
    /// with only its `-U` kept becomes a `-D`, with only its `+U` kept a `+I`.
    pub fn filter(&self, mask: &BooleanArray) -> Result<Chunk> {
        let batch = filter_record_batch(&self.batch, mask)?;
        let Some(ops) = &self.ops else { return Ok(Chunk { batch, ops: None, origin: self.origin }) };
        let keep = |i: usize| mask.is_valid(i) && mask.value(i);
        let kept_ops = repair_pairs(ops, keep, |_| 0);
        let kept: Int8Array = (0..ops.len()).filter(|i| keep(*i)).map(|i| Some(kept_ops[i])).collect();
        Ok(Chunk { batch, ops: Some(Arc::new(kept)), origin: self.origin })
    }

    /// The same rows and ops with other columns (a projection).
    pub fn with_batch(&self, batch: RecordBatch) -> Chunk {
        Chunk { batch, ops: self.ops.clone(), origin: self.origin }
    }

    /// `len` rows from `offset`, ops included. The caller cuts between update pairs.
    pub fn slice(&self, offset: usize, len: usize) -> Chunk {
        Chunk {
            batch: self.batch.slice(offset, len),
            ops: self.ops.as_ref().map(|o| Arc::new(o.slice(offset, len))),
            origin: self.origin,
        }
    }
}

/// The op codes of `ops` after the rows where `keep` is false are taken out and the rest is
/// split up by `part` (the task each row goes to): each update pair whose halves do not
/// both stay in one part becomes a `-D` and a `+I`, so that every part is a changelog of its
/// own. The codes of rows taken out are left as they were.
pub fn repair_pairs(ops: &Int8Array, keep: impl Fn(usize) -> bool, part: impl Fn(usize) -> usize) -> Vec<i8> {
    let mut codes: Vec<i8> = ops.values().to_vec();
    let mut i = 0;
    while i + 1 < codes.len() {
        if codes[i] == Op::UpdateBefore as i8 && codes[i + 1] == Op::UpdateAfter as i8 {
            if !(keep(i) && keep(i + 1) && part(i) == part(i + 1)) {
                codes[i] = Op::Delete as i8;
                codes[i + 1] = Op::Insert as i8;
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    codes
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int64Array, UInt32Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn batch(n: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from((0..n).collect::<Vec<_>>()))]).expect("batch")
    }

    #[test]
    fn op_codes_made_elsewhere_are_checked() {
        let ok = Chunk::from_codes(batch(3), Int8Array::from(vec![0, 1, 2]), Some(4)).expect("valid codes");
        assert_eq!(ok.ops(), vec![Op::Insert, Op::UpdateBefore, Op::UpdateAfter]);
        assert_eq!(ok.origin, Some(4));
        let e = Chunk::from_codes(batch(3), Int8Array::from(vec![0, 7, 2]), None).expect_err("code 7");
        assert!(e.to_string().contains("op code 7 at row 1"), "{e}");
        let e = Chunk::from_codes(batch(3), Int8Array::from(vec![Some(0), None, Some(3)]), None).expect_err("a NULL");
        assert!(e.to_string().contains("1 NULL"), "{e}");
        assert!(Chunk::from_codes(batch(3), Int8Array::from(vec![0, 3]), None).is_err(), "one code short");
    }

    #[test]
    fn taking_rows_takes_their_ops() {
        let c = Chunk::changes(batch(4), &[Op::Insert, Op::UpdateBefore, Op::UpdateAfter, Op::Delete]);
        let taken = c.take(&UInt32Array::from(vec![3, 0])).expect("take");
        assert_eq!(taken.ops(), vec![Op::Delete, Op::Insert]);
        assert_eq!(
            taken.batch.column(0).as_ref(),
            &Int64Array::from(vec![3, 0]) as &dyn datafusion::arrow::array::Array
        );
        let inserts = Chunk::inserts(batch(2)).take(&UInt32Array::from(vec![1])).expect("take");
        assert!(inserts.op_codes().is_none());
    }
}

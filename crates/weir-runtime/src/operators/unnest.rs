//! Array expansion (`CROSS JOIN UNNEST`): each row becomes one row per element of its list
//! columns, in one pass over the batch.
//!
//! Several lists of a row are zipped, the shorter padded with NULL (a map's keys and values,
//! an array and its ordinals). A row whose lists are all NULL or empty gives no row, as in
//! Flink. Each output row keeps its input row's op, except that an update's halves become a
//! retraction and an insert (`-U` → `-D`, `+U` → `+I`): the rows of the old and the new value
//! are no longer pairs.

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int8Array, OffsetSizeTrait, UInt32Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use weir_core::{Chunk, Message, Op, Operator, Result, WeirError};

/// What an [`Unnest`] expands, as planned.
#[derive(Debug, Clone)]
pub struct UnnestSpec {
    /// The input's list columns to expand.
    pub lists: Vec<usize>,
    /// For each output column, the input column it comes from (an element of it, for a list).
    pub outputs: Vec<usize>,
    pub schema: SchemaRef,
}

pub struct Unnest {
    spec: UnnestSpec,
}

impl Unnest {
    pub fn new(spec: UnnestSpec) -> Self {
        Self { spec }
    }
}

/// A list column's per-row offsets and lengths (NULL: none), and its values.
struct Lists {
    starts: Vec<usize>,
    lengths: Vec<usize>,
    values: ArrayRef,
}

fn lists_of(column: &ArrayRef) -> Result<Lists> {
    match column.data_type() {
        DataType::List(_) => Ok(lists_with::<i32>(column)),
        DataType::LargeList(_) => Ok(lists_with::<i64>(column)),
        other => Err(WeirError::internal(format!("UNNEST of a {other} column"))),
    }
}

fn lists_with<O: OffsetSizeTrait>(column: &ArrayRef) -> Lists {
    let list = column.as_list::<O>();
    let o = list.value_offsets();
    let rows = column.len();
    Lists {
        starts: (0..rows).map(|i| o[i].as_usize()).collect(),
        lengths: (0..rows).map(|i| if column.is_valid(i) { (o[i + 1] - o[i]).as_usize() } else { 0 }).collect(),
        values: list.values().clone(),
    }
}

impl Operator for Unnest {
    fn name(&self) -> String {
        "Unnest".into()
    }

    fn process_chunk(&mut self, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        let rows = chunk.num_rows();
        let lists = self.spec.lists.iter().map(|&c| lists_of(chunk.batch.column(c))).collect::<Result<Vec<_>>>()?;
        // Each row's output rows: its longest list.
        let counts: Vec<usize> = (0..rows).map(|i| lists.iter().map(|l| l.lengths[i]).max().unwrap_or(0)).collect();
        let total: usize = counts.iter().sum();
        if total == 0 {
            return Ok(());
        }
        if total > u32::MAX as usize {
            return Err(WeirError::user(format!("UNNEST of a batch into {total} rows: too many at once")));
        }
        let mut parents = Vec::with_capacity(total);
        for (i, &n) in counts.iter().enumerate() {
            parents.extend(std::iter::repeat_n(i as u32, n));
        }
        let parents = UInt32Array::from(parents);
        // Per list: the element of each output row, NULL past the list's end.
        let elements: Vec<UInt32Array> = lists
            .iter()
            .map(|l| {
                let mut idx = Vec::with_capacity(total);
                for (i, &n) in counts.iter().enumerate() {
                    idx.extend((0..n).map(|j| (j < l.lengths[i]).then(|| (l.starts[i] + j) as u32)));
                }
                UInt32Array::from(idx)
            })
            .collect();
        let mut columns = Vec::with_capacity(self.spec.outputs.len());
        for &input in &self.spec.outputs {
            let column = match self.spec.lists.iter().position(|&c| c == input) {
                Some(p) => take(lists[p].values.as_ref(), &elements[p], None)?,
                None => take(chunk.batch.column(input).as_ref(), &parents, None)?,
            };
            columns.push(column);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(total));
        let batch = RecordBatch::try_new_with_options(self.spec.schema.clone(), columns, &options)?;
        let ops = chunk.op_codes().map(|ops| {
            let codes: Int8Array = parents
                .values()
                .iter()
                .map(|&p| {
                    Some(match Op::from_code(ops.value(p as usize)) {
                        Some(Op::UpdateBefore) => Op::Delete as i8,
                        Some(Op::UpdateAfter) => Op::Insert as i8,
                        _ => ops.value(p as usize),
                    })
                })
                .collect();
            codes
        });
        let chunk = match ops {
            None => Chunk::inserts(batch).from_partition(chunk.origin),
            Some(codes) => Chunk::from_codes(batch, codes, chunk.origin)?,
        };
        out.push(Message::Chunk(chunk));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, ListArray, StringArray};
    use datafusion::arrow::datatypes::Int64Type;
    use datafusion::arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    fn spec() -> UnnestSpec {
        let schema =
            Arc::new(Schema::new(vec![Field::new("id", DataType::Utf8, true), Field::new("x", DataType::Int64, true)]));
        UnnestSpec { lists: vec![1], outputs: vec![0, 1], schema }
    }

    fn input(ops: &[Op]) -> Chunk {
        let lists = ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(1), Some(2)]),
            None,
            Some(vec![]),
            Some(vec![Some(3)]),
        ]);
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Utf8, true),
            Field::new("xs", lists.data_type().clone(), true),
        ]));
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(vec!["a", "b", "c", "d"])), Arc::new(lists)])
                .expect("batch");
        Chunk::changes(batch, ops)
    }

    #[test]
    fn each_element_is_a_row_and_null_or_empty_lists_give_none() {
        let mut op = Unnest::new(spec());
        let mut out = Vec::new();
        op.process_chunk(input(&[Op::Insert, Op::Insert, Op::Insert, Op::Delete]), &mut out).expect("unnest");
        let [Message::Chunk(c)] = out.as_slice() else { panic!("one chunk") };
        let ids = c.batch.column(0).as_string::<i32>();
        let xs = c.batch.column(1).as_any().downcast_ref::<Int64Array>().expect("int64");
        let rows: Vec<(String, i64, Op)> =
            (0..c.num_rows()).map(|i| (ids.value(i).to_string(), xs.value(i), c.op(i))).collect();
        assert_eq!(rows, vec![("a".into(), 1, Op::Insert), ("a".into(), 2, Op::Insert), ("d".into(), 3, Op::Delete)]);
    }

    #[test]
    fn an_update_becomes_a_retraction_and_an_insert_of_each_element() {
        let mut op = Unnest::new(spec());
        let mut out = Vec::new();
        op.process_chunk(input(&[Op::UpdateBefore, Op::UpdateAfter, Op::Insert, Op::UpdateAfter]), &mut out)
            .expect("unnest");
        let [Message::Chunk(c)] = out.as_slice() else { panic!("one chunk") };
        assert_eq!(c.ops(), vec![Op::Delete, Op::Delete, Op::Insert]);
    }
}

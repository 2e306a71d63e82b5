//! Routing a task's output to the tasks of the next stage: by key hash, round-robin, or to
//! all of them. Rows are split by hashing the key columns over whole batches with Weir's own
//! hash ([`crate::key_hash`]), the same on every machine and version: state restored from a
//! checkpoint must meet its keys again. A hash picks a key group, and the group its task
//! ([`KeyGroups`]): so a key's task at any parallelism is the one that owns its group's state.

use std::sync::Arc;

use datafusion::arrow::array::{Int8Array, UInt32Array};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use weir_core::{Chunk, Result, WeirError};
use weir_state::KeyGroups;

use crate::plan::{Node, OperatorSpec};

/// How rows are spread over the next stage's tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partitioning {
    /// Rows with equal values in these columns go to the same task.
    Hash(Vec<usize>),
    /// Whole batches to each task in turn (rebalancing skewed inputs).
    RoundRobin,
    /// Every batch to every task.
    Broadcast,
}

impl Partitioning {
    pub fn describe(&self, schema: &datafusion::arrow::datatypes::Schema) -> String {
        match self {
            Partitioning::Hash(keys) => {
                let names: Vec<_> = keys.iter().map(|k| schema.field(*k).name().as_str()).collect();
                format!("hash({})", names.join(", "))
            }
            Partitioning::RoundRobin => "round-robin".into(),
            Partitioning::Broadcast => "broadcast".into(),
        }
    }
}

/// The key group of each row of `batch`, by its `keys` columns: what the exchange routed it
/// by, so an operator can file the row's state under it.
pub fn key_groups_of(
    batch: &datafusion::arrow::record_batch::RecordBatch,
    keys: &[usize],
    groups: KeyGroups,
) -> Result<Vec<u16>> {
    let columns: Vec<_> = keys.iter().map(|k| batch.column(*k).clone()).collect();
    key_groups_of_columns(&columns, batch.num_rows(), groups)
}

/// The key group of each of `rows` rows of the key `columns` (in the exchange's order; none:
/// every row in group 0).
pub fn key_groups_of_columns(
    columns: &[datafusion::arrow::array::ArrayRef],
    rows: usize,
    groups: KeyGroups,
) -> Result<Vec<u16>> {
    Ok(crate::key_hash::hash_rows(columns, rows)?.into_iter().map(|h| groups.of_hash(h)).collect())
}

/// Split `chunk` by the key groups of its `keys` columns into `n` parts, one per task of the
/// next stage (`None` for empty parts). An update pair whose halves go to different tasks
/// (its key columns changed) arrives as a `-D` at one and a `+I` at the other.
pub fn hash_partition(chunk: &Chunk, keys: &[usize], n: usize, groups: KeyGroups) -> Result<Vec<Option<Chunk>>> {
    let rows = chunk.num_rows();
    // One next task takes every row: no key to hash (at parallelism 1 this was a tenth of a
    // windowed aggregate's CPU). The keyed operator finds its key groups itself.
    if n == 1 {
        return Ok(vec![(rows > 0).then(|| chunk.clone())]);
    }
    let mut indices: Vec<Vec<u32>> = vec![Vec::with_capacity(rows / n + 1); n];
    let tasks: Vec<usize> =
        key_groups_of(&chunk.batch, keys, groups)?.into_iter().map(|g| groups.task_of(g, n)).collect();
    for (row, task) in tasks.iter().enumerate() {
        indices[*task].push(row as u32);
    }
    let chunk = match chunk.op_codes() {
        Some(ops) => {
            let codes = weir_core::chunk::repair_pairs(ops, |_| true, |i| tasks[i]);
            Chunk::from_codes(chunk.batch.clone(), Int8Array::from(codes), chunk.origin)?
        }
        None => chunk.clone(),
    };
    let chunk = &chunk;
    indices
        .into_iter()
        .map(|idx| {
            if idx.is_empty() {
                return Ok(None);
            }
            if idx.len() == rows {
                return Ok(Some(chunk.clone()));
            }
            Ok(Some(chunk.take(&UInt32Array::from(idx))?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::record_batch::RecordBatch;

    use super::*;

    #[test]
    fn equal_keys_go_to_one_part_and_nothing_is_lost() {
        let schema =
            Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true), Field::new("s", DataType::Utf8, true)]));
        let keys: Vec<Option<i64>> = (0..10_000).map(|i| if i % 97 == 0 { None } else { Some(i % 100) }).collect();
        let strings: Vec<String> = (0..10_000).map(|i| format!("v{}", i % 7)).collect();
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(keys)), Arc::new(StringArray::from(strings))])
                .expect("batch");
        let chunk = Chunk::inserts(batch);
        // By one column and by two.
        for key_columns in [vec![0], vec![0, 1]] {
            let parts = hash_partition(&chunk, &key_columns, 4, KeyGroups::default()).expect("partition");
            let mut owner: HashMap<String, usize> = HashMap::new();
            let mut total = 0;
            for (p, part) in parts.iter().enumerate() {
                let Some(part) = part else { continue };
                total += part.num_rows();
                for row in 0..part.num_rows() {
                    let key: Vec<String> = key_columns
                        .iter()
                        .map(|c| {
                            datafusion::arrow::util::display::array_value_to_string(part.batch.column(*c), row)
                                .expect("value")
                        })
                        .collect();
                    let previous = owner.insert(key.join("|"), p);
                    assert!(previous.is_none_or(|q| q == p), "key {key:?} in parts {previous:?} and {p}");
                }
            }
            assert_eq!(total, 10_000);
            assert_eq!(parts.iter().filter(|p| p.is_some()).count(), 4, "a part got nothing");
        }
        // The same split every time (fixed seed).
        let a = hash_partition(&chunk, &[0], 4, KeyGroups::default()).expect("partition");
        let b = hash_partition(&chunk, &[0], 4, KeyGroups::default()).expect("partition");
        let sizes =
            |p: &Vec<Option<Chunk>>| p.iter().map(|c| c.as_ref().map_or(0, |c| c.num_rows())).collect::<Vec<_>>();
        assert_eq!(sizes(&a), sizes(&b));
        // No key columns (a global session): every row to one task, none lost.
        let parts = hash_partition(&chunk, &[], 4, KeyGroups::default()).expect("partition");
        assert_eq!(sizes(&parts), vec![10_000, 0, 0, 0]);
        // One next task: the chunk as it is, nothing hashed; an empty chunk is no part.
        let one = hash_partition(&chunk, &[0, 1], 1, KeyGroups::default()).expect("partition");
        assert_eq!(sizes(&one), vec![10_000]);
        assert_eq!(one[0].as_ref().map(|c| c.batch.clone()), Some(chunk.batch.clone()));
        let empty = Chunk::inserts(chunk.batch.slice(0, 0));
        assert!(hash_partition(&empty, &[0], 1, KeyGroups::default()).expect("partition")[0].is_none());
    }
}

/// The plan-time check of the rule keyed state rests on: a keyed operator files each row's
/// state under the key group of its key columns, hashed in order, so its input must have been
/// exchanged by exactly those columns in that order. Were they not, a key's rows would reach
/// one task and its state be filed for another's groups: lost on a rescale, with no error.
/// An operator whose keys are not plain columns of its input is not checked.
pub fn check_keyed_inputs(node: &Node) -> Result<()> {
    let check = |spec: &OperatorSpec, side: usize, input: &Node| -> Result<()> {
        let (Some(keys), Node::Exchange { partitioning: Partitioning::Hash(hashed), .. }) = (state_keys(spec), input)
        else {
            return Ok(());
        };
        match keys.get(side) {
            Some(keys) if keys != hashed => Err(WeirError::internal(format!(
                "{} keeps its state by columns {keys:?} of its input, which was exchanged by columns {hashed:?}",
                spec.describe()
            ))),
            _ => Ok(()),
        }
    };
    match node {
        Node::Source { .. } | Node::Values { .. } => Ok(()),
        Node::Operator { spec, input } => {
            check(spec, 0, input)?;
            check_keyed_inputs(input)
        }
        Node::Join { left, right, spec } => {
            check(spec, 0, left)?;
            check(spec, 1, right)?;
            check_keyed_inputs(left)?;
            check_keyed_inputs(right)
        }
        Node::Exchange { input, .. } => check_keyed_inputs(input),
        Node::Union { inputs, .. } => inputs.iter().try_for_each(check_keyed_inputs),
    }
}

/// The input columns a keyed operator hashes its rows' state by, per input; `None` if it
/// keeps no keyed state or its keys are computed.
fn state_keys(spec: &OperatorSpec) -> Option<Vec<Vec<usize>>> {
    let columns = |exprs: &[&Arc<dyn PhysicalExpr>]| -> Option<Vec<usize>> {
        exprs.iter().map(|e| e.downcast_ref::<Column>().map(Column::index)).collect()
    };
    match spec {
        OperatorSpec::GroupAggregate { spec, .. } => Some(vec![(0..spec.keys).collect()]),
        OperatorSpec::WindowAggregate { spec, .. } => {
            Some(vec![columns(&spec.group_exprs.iter().collect::<Vec<_>>())?])
        }
        OperatorSpec::SessionAggregate { spec, .. } => {
            let keys: Vec<_> = spec.key_positions().into_iter().map(|p| &spec.spec.group_exprs[p]).collect();
            Some(vec![columns(&keys)?])
        }
        OperatorSpec::Join { spec, .. } | OperatorSpec::WindowJoin { spec, .. } => Some(spec.keys.to_vec()),
        OperatorSpec::TopN { spec, .. }
        | OperatorSpec::WindowTopN { spec, .. }
        | OperatorSpec::FirstRow { spec, .. } => Some(vec![spec.partition.clone()]),
        OperatorSpec::OverAggregate { spec, .. } => Some(vec![spec.partition.clone()]),
        OperatorSpec::MatchRecognize { spec, .. } => Some(vec![spec.partition.clone()]),
        OperatorSpec::UpsertNormalize { spec } => Some(vec![spec.key.clone()]),
        OperatorSpec::UpsertMaterialize { spec } => Some(vec![spec.key.clone()]),
        _ => None,
    }
}

#[cfg(test)]
mod check_tests {
    use std::sync::Arc;

    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;
    use crate::operators::UpsertSpec;

    #[test]
    fn a_keyed_operator_over_an_exchange_by_other_columns_is_refused() {
        let schema =
            Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true), Field::new("b", DataType::Int64, true)]));
        let keyed_over = |hashed: Vec<usize>| {
            let values = Node::Values { batches: Vec::new(), schema: schema.clone() };
            let spec = UpsertSpec { key: vec![1], schema: schema.clone() };
            Node::Exchange { partitioning: Partitioning::Hash(hashed), input: Box::new(values) }
                .with_operator(OperatorSpec::UpsertNormalize { spec })
        };
        assert!(check_keyed_inputs(&keyed_over(vec![1])).is_ok());
        let err = check_keyed_inputs(&keyed_over(vec![0])).expect_err("exchanged by another column");
        assert!(
            err.message.contains("columns [1]") && err.message.contains("exchanged by columns [0]"),
            "{}",
            err.message
        );
        // Above a union, too.
        let union = Node::Union { inputs: vec![keyed_over(vec![0, 1])], schema: schema.clone() };
        assert!(check_keyed_inputs(&union).is_err());
    }
}

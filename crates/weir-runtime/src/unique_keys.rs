//! The unique keys of a plan's output: sets of columns whose values identify one row among
//! the rows in effect, derived as Flink derives its upsert keys, so that an upsert sink (or a
//! database table) accepts a query by the primary key Flink would accept it by.
//!
//! - a group aggregate: its group columns; a deduplication: its partition columns;
//! - a Top-N by row number: its partition columns and the rank, and (the rank not selected)
//!   its partition and order columns; a Top-1: its partition columns;
//! - an upsert source: its key;
//! - a regular join: a unique key of each side together; and a side's unique key alone where
//!   the join's equal keys hold a unique key of the other side (each row meets one row);
//! - followed through filters, column selections and projections of columns (casts of a
//!   column included: a sink's wider type keeps values apart).

use std::sync::Arc;

use datafusion::physical_expr::expressions::{CastExpr, Column, TryCastExpr};
use datafusion::physical_expr::PhysicalExpr;

use crate::operators::{JoinKind, RankKind};
use crate::plan::{Node, OperatorSpec};

impl Node {
    /// Every unique key known of the output, each as sorted column indices; the first is the
    /// most natural (the rank before the order columns).
    pub fn unique_keys(&self) -> Vec<Vec<usize>> {
        let mut keys = self.keys();
        for k in &mut keys {
            k.sort_unstable();
            k.dedup();
        }
        let mut distinct: Vec<Vec<usize>> = Vec::new();
        for k in keys {
            if !distinct.contains(&k) {
                distinct.push(k);
            }
        }
        distinct
    }

    /// The unique key to write an upsert sink by: the one equal to `wanted` (the sink's
    /// primary key), or else the first known.
    pub fn unique_key_for(&self, wanted: &[usize]) -> Option<Vec<usize>> {
        let mut wanted = wanted.to_vec();
        wanted.sort_unstable();
        let keys = self.unique_keys();
        keys.iter().find(|k| **k == wanted).or(keys.first()).cloned()
    }

    fn keys(&self) -> Vec<Vec<usize>> {
        match self {
            Node::Exchange { input, .. } => input.keys(),
            Node::Operator { spec, input } => match spec {
                OperatorSpec::GroupAggregate { spec, .. } => vec![(0..spec.keys).collect()],
                OperatorSpec::UpsertNormalize { spec } => vec![spec.key.clone()],
                OperatorSpec::UpsertMaterialize { spec } => vec![spec.key.clone()],
                OperatorSpec::FirstRow { spec, .. } => vec![spec.partition.clone()],
                OperatorSpec::TopN { spec, .. } if spec.kind == RankKind::RowNumber => {
                    if spec.hi <= 1 {
                        return vec![spec.partition.clone()];
                    }
                    let rank = spec.partition.iter().copied().chain([spec.input_schema.fields().len()]).collect();
                    let order = spec.partition.iter().copied().chain(spec.order.iter().map(|(c, _)| *c)).collect();
                    vec![rank, order]
                }
                OperatorSpec::Filter { .. }
                | OperatorSpec::Watermark { .. }
                | OperatorSpec::ProcessingTimeWatermark { .. }
                | OperatorSpec::Limit { .. }
                | OperatorSpec::AppendWatermark { .. } => input.keys(),
                OperatorSpec::Select { indices, .. } => through(input.keys(), |k| indices.iter().position(|i| *i == k)),
                OperatorSpec::Project { exprs, .. } => {
                    through(input.keys(), |k| exprs.iter().position(|e| column_of(e) == Some(k)))
                }
                _ => Vec::new(),
            },
            Node::Join { left, spec: OperatorSpec::Join { spec, .. }, .. }
                if matches!(spec.kind, JoinKind::LeftSemi | JoinKind::LeftAnti) =>
            {
                left.keys()
            }
            Node::Join { right, spec: OperatorSpec::Join { spec, .. }, .. }
                if matches!(spec.kind, JoinKind::RightSemi | JoinKind::RightAnti) =>
            {
                right.keys()
            }
            Node::Join { left, right, spec: OperatorSpec::Join { spec, .. } } => {
                let width = spec.schemas[0].fields().len();
                let (lefts, rights) = (left.keys(), right.keys());
                let shifted = |k: &Vec<usize>| k.iter().map(|c| c + width).collect::<Vec<_>>();
                let mut keys = Vec::new();
                // A side's rows each meet at most one row of the other, whose equal keys hold
                // a unique key of it.
                let holds =
                    |keys: &[Vec<usize>], join: &[usize]| keys.iter().any(|k| k.iter().all(|c| join.contains(c)));
                if holds(&rights, &spec.keys[1]) && spec.kind != JoinKind::Right && spec.kind != JoinKind::Full {
                    keys.extend(lefts.iter().cloned());
                }
                if holds(&lefts, &spec.keys[0]) && spec.kind != JoinKind::Left && spec.kind != JoinKind::Full {
                    keys.extend(rights.iter().map(shifted));
                }
                for l in &lefts {
                    for r in &rights {
                        keys.push(l.iter().copied().chain(shifted(r)).collect());
                    }
                }
                keys
            }
            _ => Vec::new(),
        }
    }
}

/// Each key mapped column by column; keys with a column that does not pass are dropped.
fn through(keys: Vec<Vec<usize>>, map: impl Fn(usize) -> Option<usize>) -> Vec<Vec<usize>> {
    keys.into_iter().filter_map(|k| k.into_iter().map(&map).collect::<Option<Vec<_>>>()).collect()
}

/// The input column an expression passes on: a column, or a cast of one.
fn column_of(e: &Arc<dyn PhysicalExpr>) -> Option<usize> {
    if let Some(c) = e.downcast_ref::<Column>() {
        return Some(c.index());
    }
    if let Some(cast) = e.downcast_ref::<CastExpr>() {
        return column_of(cast.expr());
    }
    if let Some(cast) = e.downcast_ref::<TryCastExpr>() {
        return column_of(cast.expr());
    }
    None
}

//! `GROUP BY GROUPING SETS (…)`, `ROLLUP (…)` and `CUBE (…)` (in a window aggregate or
//! not): one aggregate per grouping set, each projected to the columns of the whole (a key
//! not in its set is NULL, `__grouping_id` says which keys are), and the branches' rows
//! unioned, as the SQL standard defines grouping sets. Each branch is an ordinary aggregate,
//! planned as one (a window aggregate when its set holds the window's columns).

use datafusion::common::{Column, ScalarValue};
use datafusion::logical_expr::{Aggregate, Expr, GroupingSet, LogicalPlan, LogicalPlanBuilder};

use super::*;

impl Planner {
    /// The union of one aggregate per grouping set of `agg`, or `None` if it has none.
    pub(super) fn grouping_sets_node(&self, agg: &Aggregate) -> Result<Option<Node>> {
        let [Expr::GroupingSet(set)] = agg.group_expr.as_slice() else { return Ok(None) };
        let keys = set.distinct_expr();
        let sets = sets_of(set);
        let schema = agg.schema.clone();
        let mut inputs = Vec::with_capacity(sets.len());
        for members in sets {
            let branch = LogicalPlanBuilder::from(agg.input.as_ref().clone())
                .aggregate(members.clone(), agg.aggr_expr.clone())?
                .build()?;
            let LogicalPlan::Aggregate(branch_agg) = &branch else {
                return Err(WeirError::internal("a grouping set did not plan to an aggregate"));
            };
            // DataFusion's grouping id: bit i (from the highest) set when key i is not grouped.
            let mut grouping_id: u64 = 0;
            let mut exprs = Vec::with_capacity(schema.fields().len());
            for (i, key) in keys.iter().enumerate() {
                let (qualifier, field) = schema.qualified_field(i);
                let grouped = members.iter().position(|m| m == *key);
                grouping_id = (grouping_id << 1) | u64::from(grouped.is_none());
                let value = match grouped {
                    Some(at) => {
                        let (q, f) = branch_agg.schema.qualified_field(at);
                        Expr::Column(Column::from((q, f)))
                    }
                    None => Expr::Literal(ScalarValue::try_from(field.data_type())?, None),
                };
                exprs.push(value.alias_qualified(qualifier.cloned(), field.name()));
            }
            let width = keys.len();
            // The grouping id (DataFusion's column after the keys), then the aggregates.
            let (id_qualifier, id_field) = schema.qualified_field(width);
            let id = ScalarValue::try_from(id_field.data_type())
                .and_then(|t| ScalarValue::try_from_string(grouping_id.to_string(), &t.data_type()))?;
            exprs.push(Expr::Literal(id, None).alias_qualified(id_qualifier.cloned(), id_field.name()));
            for (n, _) in agg.aggr_expr.iter().enumerate() {
                let (q, f) = branch_agg.schema.qualified_field(members.len() + n);
                let (oq, of) = schema.qualified_field(width + 1 + n);
                exprs.push(Expr::Column(Column::from((q, f))).alias_qualified(oq.cloned(), of.name()));
            }
            let projected = LogicalPlanBuilder::from(branch).project(exprs)?.build()?;
            inputs.push(self.to_node(&projected)?);
        }
        Ok(Some(Node::Union { inputs, schema: Arc::new(schema.as_arrow().clone()) }))
    }
}

/// The grouping sets a `GROUPING SETS`, `ROLLUP` or `CUBE` stands for.
fn sets_of(set: &GroupingSet) -> Vec<Vec<Expr>> {
    match set {
        GroupingSet::GroupingSets(sets) => sets.clone(),
        // (a, b, c), (a, b), (a), ()
        GroupingSet::Rollup(exprs) => (0..=exprs.len()).rev().map(|n| exprs[..n].to_vec()).collect(),
        // Every subset.
        GroupingSet::Cube(exprs) => (0..1u64 << exprs.len())
            .rev()
            .map(|mask| {
                exprs
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << (exprs.len() - 1 - i)) != 0)
                    .map(|(_, e)| e.clone())
                    .collect()
            })
            .collect(),
    }
}

//! A function call that a filter and a projection above it both compute is computed once.
//!
//! DataFusion's common-subexpression rule shares within one plan node; a `WHERE` and its
//! `SELECT` are two nodes, so a query such as Nexmark q21 (`REGEXP_EXTRACT(url, …)` in both)
//! ran the regex twice per row. Here the call is computed once, in a projection below the
//! filter, and the filter and the projections above it read its column:
//!
//! ```text
//! Projection: …, f(x) …              Projection: …, __weir_shared_0 …
//!   Filter: f(x) IS NOT NULL    =>     Filter: __weir_shared_0 IS NOT NULL
//!     input                              Projection: input's columns, f(x) AS __weir_shared_0
//!                                          input
//! ```
//!
//! Only what changes nothing else is shared:
//! - calls the filter evaluates for every row (not in the right side of `AND`/`OR`, a `CASE`
//!   branch, or an argument of a function that short-circuits), so computing them before the
//!   filter raises no error the query would not have raised;
//! - calls of immutable functions only (not `PROCTIME()`, `RAND()`, `CURRENT_WATERMARK`);
//! - in projections that read the call's columns as the filter does (each projection between
//!   passes those columns through unchanged).
//!
//! Columns keep their names: an output column whose expression changed is aliased to its old
//! name. It runs on the optimized plan, after DataFusion's rules, which would otherwise push
//! the filter back through the new projection.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, Result};
use datafusion::logical_expr::{
    BinaryExpr, Expr, ExprSchemable, Filter, LogicalPlan, Operator, Projection, Volatility,
};

const PREFIX: &str = "__weir_shared_";

/// `plan` with each shareable call computed once below its filter.
pub(super) fn share_filter_calls(plan: LogicalPlan) -> Result<LogicalPlan> {
    let mut next = 0;
    Ok(plan.transform_down(|node| rewrite(node, &mut next))?.data)
}

fn rewrite(node: LogicalPlan, next: &mut usize) -> Result<Transformed<LogicalPlan>> {
    // The projections from `node` down to a filter, top first.
    let mut chain: Vec<&Projection> = Vec::new();
    let mut below = &node;
    while let LogicalPlan::Projection(p) = below {
        chain.push(p);
        below = p.input.as_ref();
    }
    let LogicalPlan::Filter(filter) = below else { return Ok(Transformed::no(node)) };
    // A ranking's filter over its window (through projections) is recognized by its shape:
    // left as it is.
    if chain.is_empty() || over_window(filter.input.as_ref()) {
        return Ok(Transformed::no(node));
    }
    let mut calls = Vec::new();
    unconditional_calls(&filter.predicate, &mut calls);
    // Each call, with the highest projection that may read it as a column.
    let mut shared: Vec<(Expr, usize, String)> = Vec::new();
    for call in calls {
        if shared.iter().any(|(s, _, _)| *s == call) {
            continue;
        }
        let columns = call.column_refs();
        let passed_through = |i: usize| {
            chain[i + 1..]
                .iter()
                .all(|p| columns.iter().all(|c| p.expr.iter().any(|e| matches!(e, Expr::Column(x) if x == *c))))
        };
        let highest = (0..chain.len()).find(|&i| passed_through(i) && chain[i].expr.iter().any(|e| contains(e, &call)));
        if let Some(highest) = highest {
            shared.push((call, highest, format!("{PREFIX}{next}")));
            *next += 1;
        }
    }
    if shared.is_empty() {
        return Ok(Transformed::no(node));
    }
    let input = filter.input.clone();
    let mut computed: Vec<Expr> = input.schema().columns().into_iter().map(Expr::Column).collect();
    computed.extend(shared.iter().map(|(call, _, name)| call.clone().alias(name)));
    let computed = LogicalPlan::Projection(Projection::try_new(computed, input)?);
    let predicate = replace(filter.predicate.clone(), &shared, usize::MAX)?.data;
    let mut plan = LogicalPlan::Filter(Filter::try_new(predicate, Arc::new(computed))?);
    for (i, p) in chain.iter().enumerate().rev() {
        let mut exprs = Vec::with_capacity(p.expr.len() + shared.len());
        for e in &p.expr {
            let rewritten = replace(e.clone(), &shared, i)?;
            exprs.push(match rewritten.transformed {
                // Its output column keeps its name.
                true => {
                    let (qualifier, field) = e.to_field(p.input.schema().as_ref())?;
                    rewritten.data.unalias().alias_qualified(qualifier, field.name())
                }
                false => rewritten.data,
            });
        }
        // A projection below the highest reader passes the column up.
        exprs.extend(shared.iter().filter(|(_, h, _)| i > *h).map(|(_, _, name)| col(name)));
        plan = LogicalPlan::Projection(Projection::try_new(exprs, Arc::new(plan))?);
    }
    Ok(Transformed::yes(plan))
}

fn over_window(mut plan: &LogicalPlan) -> bool {
    loop {
        match plan {
            LogicalPlan::Projection(p) => plan = p.input.as_ref(),
            LogicalPlan::SubqueryAlias(a) => plan = a.input.as_ref(),
            LogicalPlan::Window(_) => return true,
            _ => return false,
        }
    }
}

fn col(name: &str) -> Expr {
    Expr::Column(Column::from_name(name))
}

/// `e` with each shared call read from its column, in the projection at `level` of the chain
/// (`usize::MAX`: the filter).
fn replace(e: Expr, shared: &[(Expr, usize, String)], level: usize) -> Result<Transformed<Expr>> {
    e.transform_down(|x| {
        match shared.iter().find(|(call, highest, _)| (level == usize::MAX || level >= *highest) && *call == x) {
            Some((_, _, name)) => Ok(Transformed::yes(col(name))),
            None => Ok(Transformed::no(x)),
        }
    })
}

fn contains(e: &Expr, call: &Expr) -> bool {
    e.exists(|x| Ok(x == call)).unwrap_or(false)
}

/// A call worth sharing: immutable all the way down, and not Weir's watermark function (it
/// reads a column the filter's planning adds).
fn shareable(call: &Expr) -> bool {
    !call
        .exists(|x| {
            Ok(matches!(x, Expr::ScalarFunction(f)
                if f.func.signature().volatility != Volatility::Immutable || f.name() == super::current_watermark::NAME))
        })
        .unwrap_or(true)
}

/// The function calls `e` evaluates for every row, outermost only.
fn unconditional_calls(e: &Expr, out: &mut Vec<Expr>) {
    match e {
        Expr::ScalarFunction(f) => {
            if shareable(e) {
                out.push(e.clone());
            } else if !f.func.short_circuits() {
                f.args.iter().for_each(|a| unconditional_calls(a, out));
            }
        }
        // The right side of AND and OR may not run.
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::And | Operator::Or, .. }) => unconditional_calls(left, out),
        Expr::BinaryExpr(BinaryExpr { left, right, .. }) => {
            unconditional_calls(left, out);
            unconditional_calls(right, out);
        }
        // Only a CASE's operand and first condition run for every row.
        Expr::Case(c) => {
            if let Some(operand) = &c.expr {
                unconditional_calls(operand, out);
            } else if let Some((when, _)) = c.when_then_expr.first() {
                unconditional_calls(when, out);
            }
        }
        Expr::Alias(a) => unconditional_calls(&a.expr, out),
        Expr::Not(x)
        | Expr::IsNull(x)
        | Expr::IsNotNull(x)
        | Expr::IsTrue(x)
        | Expr::IsFalse(x)
        | Expr::IsNotTrue(x)
        | Expr::IsNotFalse(x)
        | Expr::IsUnknown(x)
        | Expr::IsNotUnknown(x)
        | Expr::Negative(x) => unconditional_calls(x, out),
        Expr::Cast(c) => unconditional_calls(&c.expr, out),
        Expr::InList(l) => unconditional_calls(&l.expr, out),
        Expr::Like(l) => unconditional_calls(&l.expr, out),
        Expr::Between(b) => unconditional_calls(&b.expr, out),
        _ => {}
    }
}

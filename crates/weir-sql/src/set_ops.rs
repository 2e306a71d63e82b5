//! `INTERSECT ALL` and `EXCEPT ALL` are refused. DataFusion plans them as a semi or anti join
//! of every left row, which keeps all copies of a left row that has one partner (`a, a, a
//! INTERSECT ALL a` would give three rows, not SQL's and Flink's one). `INTERSECT` and
//! `EXCEPT` are planned over distinct left rows and are exact.

use datafusion::sql::sqlparser::ast::{Query, SetExpr, SetOperator, SetQuantifier, Statement, TableFactor};
use weir_core::{Result, WeirError};

pub fn refuse_bag_set_operations(statement: &Statement) -> Result<()> {
    match statement {
        Statement::Query(q) => query(q),
        Statement::Insert(insert) => insert.source.as_deref().map_or(Ok(()), query),
        Statement::CreateView(view) => query(&view.query),
        _ => Ok(()),
    }
}

fn query(q: &Query) -> Result<()> {
    if let Some(with) = &q.with {
        for cte in &with.cte_tables {
            query(&cte.query)?;
        }
    }
    set_expr(&q.body)
}

fn set_expr(s: &SetExpr) -> Result<()> {
    match s {
        SetExpr::SetOperation { op, set_quantifier, left, right } => {
            let all = matches!(set_quantifier, SetQuantifier::All | SetQuantifier::AllByName);
            if all && matches!(op, SetOperator::Intersect | SetOperator::Except | SetOperator::Minus) {
                return Err(WeirError::not_supported(format!(
                    "{op} ALL (a row's copies would not be counted against the other side's): write {op}, which \
                     compares distinct rows"
                )));
            }
            set_expr(left)?;
            set_expr(right)
        }
        SetExpr::Query(q) => query(q),
        SetExpr::Select(select) => {
            for from in &select.from {
                for relation in std::iter::once(&from.relation).chain(from.joins.iter().map(|j| &j.relation)) {
                    if let TableFactor::Derived { subquery, .. } = relation {
                        query(subquery)?;
                    }
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

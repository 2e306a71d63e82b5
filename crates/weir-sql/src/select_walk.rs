//! Every `SELECT` of a statement, innermost first: in CTEs, set operations and derived tables
//! in `FROM`. The syntax-tree rewrites (legacy group windows, `UNNEST`) each handle one
//! `SELECT` and leave the walking here.

use datafusion::sql::sqlparser::ast::{Query, Select, SetExpr, Statement, TableFactor};
use weir_core::Result;

pub type EachSelect<'a> = dyn FnMut(&mut Select) -> Result<()> + 'a;

/// Call `f` with every `SELECT` of a query, an `INSERT`'s query or a view's.
pub fn each_select(statement: &mut Statement, f: &mut EachSelect) -> Result<()> {
    match statement {
        Statement::Query(q) => query(q, f),
        Statement::Insert(insert) => insert.source.as_deref_mut().map_or(Ok(()), |q| query(q, f)),
        Statement::CreateView(view) => query(&mut view.query, f),
        _ => Ok(()),
    }
}

fn query(q: &mut Query, f: &mut EachSelect) -> Result<()> {
    if let Some(with) = &mut q.with {
        for cte in &mut with.cte_tables {
            query(&mut cte.query, f)?;
        }
    }
    set_expr(&mut q.body, f)
}

fn set_expr(s: &mut SetExpr, f: &mut EachSelect) -> Result<()> {
    match s {
        SetExpr::Select(select) => {
            for from in &mut select.from {
                let relations =
                    std::iter::once(&mut from.relation).chain(from.joins.iter_mut().map(|j| &mut j.relation));
                for relation in relations {
                    if let TableFactor::Derived { subquery, .. } = relation {
                        query(subquery, f)?;
                    }
                }
            }
            f(select)
        }
        SetExpr::Query(q) => query(q, f),
        SetExpr::SetOperation { left, right, .. } => {
            set_expr(left, f)?;
            set_expr(right, f)
        }
        _ => Ok(()),
    }
}

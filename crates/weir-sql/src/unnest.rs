//! Flink's array expansion, `FROM t CROSS JOIN UNNEST(t.arr) [WITH ORDINALITY] AS u(x [, n])`
//! (or `FROM t, UNNEST(…)`), rewritten in the syntax tree into DataFusion's `unnest` in a
//! derived table, which plans to an `Unnest` node that Weir runs as a stateless operator:
//!
//! | Flink | becomes |
//! |---|---|
//! | `FROM t AS a CROSS JOIN UNNEST(e) AS u(x)` | `FROM (SELECT a.*, unnest(e) AS x FROM t AS a) AS a` |
//! | `… UNNEST(m) AS u(k, v)` (a map) | `… unnest(map_keys(m)) AS k, unnest(map_values(m)) AS v …` |
//! | `… UNNEST(e) WITH ORDINALITY AS u(x, n)` | `… unnest(e) AS x, unnest(range(1, cardinality(e) + 1)) AS n …` |
//!
//! References to `u.x` become `a.x`. Unnests in one projection are zipped, so a map's keys
//! and values (and an array and its ordinals) stay paired. As in Flink, a NULL or empty
//! array gives no rows; with `LEFT JOIN UNNEST(…) … ON TRUE` it gives one row of NULLs, by
//! unnesting `__weir_or_null_element(e)` (the array, or one NULL element when it has none).

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, Expr, Ident, JoinOperator, Select, SetExpr, Statement, TableAlias, TableFactor,
    TableWithJoins,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;
use weir_core::{Result, WeirError};

use crate::parser::parser_error;

/// Rewrite every `UNNEST` in the `FROM` of `statement`'s queries.
pub fn rewrite(statement: &mut Statement) -> Result<()> {
    crate::select_walk::each_select(statement, &mut select)
}

fn select(select: &mut Select) -> Result<()> {
    // `FROM t, UNNEST(…)`: the UNNEST as a join of the item before it.
    let mut i = 1;
    while i < select.from.len() {
        if matches!(select.from[i].relation, TableFactor::UNNEST { .. }) && select.from[i].joins.is_empty() {
            let item = select.from.remove(i);
            select.from[i - 1].joins.push(datafusion::sql::sqlparser::ast::Join {
                relation: item.relation,
                global: false,
                join_operator: JoinOperator::CrossJoin(datafusion::sql::sqlparser::ast::JoinConstraint::None),
            });
        } else {
            i += 1;
        }
    }
    let mut renames: Vec<(Ident, Ident)> = Vec::new();
    for from in &mut select.from {
        while let Some(at) = from.joins.iter().position(|j| matches!(j.relation, TableFactor::UNNEST { .. })) {
            if at > 0 {
                return Err(WeirError::not_supported(
                    "UNNEST after another join in the same FROM (put the join in a subquery, and UNNEST its rows)",
                ));
            }
            let join = from.joins.remove(0);
            let left = match &join.join_operator {
                JoinOperator::CrossJoin(_) => false,
                JoinOperator::Left(c) | JoinOperator::LeftOuter(c) if on_true(c) => true,
                _ => {
                    return Err(WeirError::not_supported(
                        "UNNEST in a join other than CROSS JOIN or LEFT JOIN … ON TRUE (Weir expands arrays with \
                         CROSS JOIN UNNEST, FROM t, UNNEST(…) or LEFT JOIN UNNEST(…) ON TRUE)",
                    ))
                }
            };
            renames.extend(expand(from, join.relation, left)?);
        }
        if matches!(from.relation, TableFactor::UNNEST { .. }) {
            return Err(WeirError::not_supported("UNNEST of a literal array in FROM (UNNEST a column of a table)"));
        }
    }
    if renames.is_empty() {
        return Ok(());
    }
    // `u.x` is now a column of the derived table.
    let _ = visit_expressions_mut(select, |e| {
        if let Expr::CompoundIdentifier(parts) = e {
            if parts.len() == 2 {
                if let Some((_, to)) = renames.iter().find(|(from, _)| from.value == parts[0].value) {
                    parts[0] = to.clone();
                }
            }
        }
        ControlFlow::<()>::Continue(())
    });
    Ok(())
}

/// `ON TRUE`, the only condition of a `LEFT JOIN UNNEST`.
fn on_true(constraint: &datafusion::sql::sqlparser::ast::JoinConstraint) -> bool {
    use datafusion::sql::sqlparser::ast::{JoinConstraint, Value};
    matches!(constraint, JoinConstraint::On(Expr::Value(v)) if v.value == Value::Boolean(true))
}

/// Replace `from`'s relation by the derived table that unnests `unnest` over it (`left`: a
/// row without elements keeps one row of NULLs); returns the qualifier rename (the UNNEST's
/// alias to the relation's).
fn expand(from: &mut TableWithJoins, unnest: TableFactor, left: bool) -> Result<Option<(Ident, Ident)>> {
    let TableFactor::UNNEST { alias, array_exprs, with_offset, with_ordinality, .. } = unnest else {
        return Ok(None);
    };
    if with_offset {
        return Err(WeirError::not_supported("UNNEST … WITH OFFSET (Flink writes WITH ORDINALITY)"));
    }
    let [array] = array_exprs.as_slice() else {
        return Err(WeirError::not_supported("UNNEST of several arrays at once (UNNEST each in its own join)"));
    };
    let Some(unnest_alias) = alias else {
        return Err(WeirError::user("UNNEST needs its columns named: UNNEST(…) AS t(x)"));
    };
    let mut names: Vec<Ident> = unnest_alias.columns.iter().map(|c| c.name.clone()).collect();
    let ordinal = if with_ordinality {
        if names.len() < 2 {
            return Err(WeirError::user("UNNEST … WITH ORDINALITY names its ordinal too: AS t(x, n)"));
        }
        names.pop()
    } else {
        None
    };
    let relation_alias = match &from.relation {
        TableFactor::Table { alias: Some(a), .. } | TableFactor::Derived { alias: Some(a), .. } => a.name.clone(),
        TableFactor::Table { name, alias: None, .. } => match name.0.last().and_then(|p| p.as_ident()) {
            Some(i) => i.clone(),
            None => return Err(WeirError::not_supported("UNNEST over this relation (give it an alias)")),
        },
        _ => return Err(WeirError::not_supported("UNNEST over this relation (give it an alias)")),
    };
    if left && ordinal.is_some() {
        return Err(WeirError::not_supported("LEFT JOIN UNNEST … WITH ORDINALITY (use CROSS JOIN UNNEST)"));
    }
    let q = |i: &Ident| i.to_string();
    let elements = |list: &str| if left { format!("__weir_or_null_element({list})") } else { list.to_string() };
    let mut items = match names.as_slice() {
        [x] => vec![format!("unnest({}) AS {}", elements("__weir_array"), q(x))],
        [k, v] => vec![
            format!("unnest({}) AS {}", elements("map_keys(__weir_array)"), q(k)),
            format!("unnest({}) AS {}", elements("map_values(__weir_array)"), q(v)),
        ],
        [] => return Err(WeirError::user("UNNEST needs its columns named: UNNEST(…) AS t(x)")),
        _ => {
            return Err(WeirError::not_supported(
                "UNNEST into more than two columns (an array of ROW: select its fields from one column)",
            ))
        }
    };
    if let Some(n) = &ordinal {
        items.push(format!("unnest(range(1, CAST(cardinality(__weir_array) AS BIGINT) + 1)) AS {}", q(n)));
    }
    let text = format!("SELECT {}.*, {} FROM __weir_relation", q(&relation_alias), items.join(", "));
    let mut derived =
        Parser::new(&GenericDialect {}).try_with_sql(&text).and_then(|mut p| p.parse_query()).map_err(parser_error)?;
    // The array expression and the relation, in place of the placeholders.
    let _ = visit_expressions_mut(&mut derived, |e| {
        if matches!(e, Expr::Identifier(i) if i.value == "__weir_array") {
            *e = array.clone();
        }
        ControlFlow::<()>::Continue(())
    });
    if let SetExpr::Select(s) = derived.body.as_mut() {
        if let Some(first) = s.from.first_mut() {
            let mut relation = from.relation.clone();
            if let TableFactor::Table { alias, .. } = &mut relation {
                alias.get_or_insert(TableAlias {
                    explicit: true,
                    name: relation_alias.clone(),
                    columns: Vec::new(),
                    at: None,
                });
            }
            first.relation = relation;
        }
    }
    from.relation = TableFactor::Derived {
        lateral: false,
        subquery: derived,
        alias: Some(TableAlias { explicit: true, name: relation_alias.clone(), columns: Vec::new(), at: None }),
        sample: None,
    };
    Ok(Some((unnest_alias.name, relation_alias)))
}

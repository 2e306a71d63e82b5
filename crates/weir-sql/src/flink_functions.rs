//! Flink SQL functions that DataFusion spells differently, rewritten in the SQL syntax tree
//! before planning, so Flink's query text runs as written and costs nothing at run time:
//!
//! | Flink | becomes |
//! |---|---|
//! | `MOD(a, b)` | `a % b` |
//! | `HOUR(ts)`, `MINUTE(ts)`, `SECOND(ts)` | `EXTRACT(HOUR FROM ts)`, … |
//! | `SPLIT_INDEX(s, sep, i)` (0-based; NULL past the end) | `NULLIF(split_part(s, sep, i + 1), '')` |
//! | `REGEXP_EXTRACT(s, re [, group])` | `regexp_match(s, re)[group]` (group 1 by default) |
//! | `DATE_FORMAT(ts, 'yyyy-MM-dd HH:mm')` (Java's pattern letters) | Weir's own, [`crate::date_format`] |
//! | `TIMESTAMPDIFF(DAY, a, b)`, `TIMESTAMPADD(MONTH, n, t)` | Weir's own, the unit as a string ([`crate::time_functions`]) |

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, VisitMut,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;
use weir_core::{Result, WeirError};

use crate::parser::parser_error;

/// The plain positional arguments of a call, if that is all it has.
pub(crate) fn plain_args(args: &FunctionArguments) -> Option<Vec<&Expr>> {
    let FunctionArguments::List(list) = args else { return None };
    if list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
        return None;
    }
    list.args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
            _ => None,
        })
        .collect()
}

fn replacement(name: &str, args: &[&Expr]) -> Option<String> {
    Some(match (name, args) {
        ("mod", [a, b]) => format!("(({a}) % ({b}))"),
        ("hour" | "minute" | "second", [ts]) => format!("EXTRACT({} FROM {ts})", name.to_uppercase()),
        ("split_index", [s, sep, i]) => format!("NULLIF(split_part({s}, {sep}, ({i}) + 1), '')"),
        ("regexp_extract", [s, re]) => format!("(regexp_match({s}, {re}))[1]"),
        ("regexp_extract", [s, re, group]) => format!("(regexp_match({s}, {re}))[{group}]"),
        ("date_format", [ts, pattern]) => format!("{}({ts}, {pattern})", crate::date_format::NAME),
        // The unit is a keyword, not a value: passed as a string.
        ("timestampdiff", [Expr::Identifier(unit), a, b]) => {
            format!("{}('{}', {a}, {b})", crate::time_functions::TIMESTAMPDIFF, unit.value)
        }
        ("timestampadd", [Expr::Identifier(unit), n, t]) => {
            format!("{}('{}', {n}, {t})", crate::time_functions::TIMESTAMPADD, unit.value)
        }
        _ => return None,
    })
}

/// Rewrite Flink-only function calls in `statement` (or an expression) into DataFusion
/// expressions.
pub fn rewrite<V: VisitMut>(statement: &mut V) -> Result<()> {
    let mut failed = None;
    let _ = visit_expressions_mut(statement, |expr| {
        if let Expr::Function(f) = expr {
            let name = f.name.to_string().to_ascii_lowercase();
            let text = plain_args(&f.args).and_then(|args| replacement(&name, &args));
            if let Some(text) = text {
                match Parser::new(&GenericDialect {}).try_with_sql(&text).and_then(|mut p| p.parse_expr()) {
                    Ok(new) => *expr = new,
                    Err(e) => {
                        failed = Some(parser_error(e).context(format!("rewriting {name}()")));
                        return ControlFlow::Break(());
                    }
                }
            }
        }
        ControlFlow::Continue(())
    });
    match failed {
        Some(e) => Err(WeirError::internal(e.message)),
        None => Ok(()),
    }
}

//! Flink's legacy group windows, rewritten in the SQL syntax tree onto the window table
//! functions (Nexmark q11):
//!
//! | Flink | becomes |
//! |---|---|
//! | `FROM t … GROUP BY k, TUMBLE(ts, size)` | `FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), size)) … GROUP BY k, window_start, window_end` |
//! | `GROUP BY k, HOP(ts, slide, size)` | the same over `HOP(…, slide, size)` |
//! | `GROUP BY k, SESSION(ts, gap)` | the same over `SESSION(TABLE t PARTITION BY k, …, gap)` |
//! | `TUMBLE_START(…)`, `_END`, `_ROWTIME` (and `HOP_…`, `SESSION_…`) | `window_start`, `window_end`, `window_time` |
//!
//! The windowed table must be a table or view named in `FROM` (as Flink's table functions
//! take); the grouping keys of a session window are its partition keys.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, Expr, GroupByExpr, Ident, Select, Statement, TableFactor,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;
use weir_core::{Result, WeirError};

use crate::flink_functions::plain_args;
use crate::parser::parser_error;

/// Rewrite every legacy group window of `statement`.
pub fn rewrite(statement: &mut Statement) -> Result<()> {
    crate::select_walk::each_select(statement, &mut group_window)
}

/// A group window call: its kind and arguments (time column first).
fn window_call(e: &Expr) -> Option<(&'static str, Vec<&Expr>)> {
    let Expr::Function(f) = e else { return None };
    let kind = match f.name.to_string().to_ascii_lowercase().as_str() {
        "tumble" => "tumble",
        "hop" => "hop",
        "session" => "session",
        _ => return None,
    };
    Some((kind, plain_args(&f.args)?))
}

/// The column an expression names (its last part: `B.dateTime` is `dateTime`).
fn column_name(e: &Expr) -> Option<&Ident> {
    match e {
        Expr::Identifier(i) => Some(i),
        Expr::CompoundIdentifier(parts) => parts.last(),
        _ => None,
    }
}

fn group_window(select: &mut Select) -> Result<()> {
    let GroupByExpr::Expressions(groups, _) = &mut select.group_by else { return Ok(()) };
    let Some(at) = groups.iter().position(|e| window_call(e).is_some()) else { return Ok(()) };
    let Some((kind, args)) = window_call(&groups[at]) else { return Ok(()) };
    let upper = kind.to_uppercase();
    let refuse = |what: &str| WeirError::user(format!("{upper}(…) in GROUP BY (a legacy group window): {what}"));
    let time = args
        .first()
        .and_then(|e| column_name(e))
        .ok_or_else(|| refuse("its first argument must be the time column"))?;
    let rest: Vec<String> = args[1..].iter().map(|e| e.to_string()).collect();
    let wanted = if kind == "hop" { 2 } else { 1 };
    if rest.len() != wanted {
        return Err(refuse(&format!("it takes the time column and {wanted} interval(s)")));
    }
    let [from] = select.from.as_slice() else {
        return Err(refuse("it windows one table: use a window table function (FROM TABLE(TUMBLE(…))) over joins"));
    };
    let TableFactor::Table { name, alias, args: None, .. } = &from.relation else {
        return Err(refuse("it windows a table or view named in FROM: use a window table function over a subquery"));
    };
    if !from.joins.is_empty() {
        return Err(refuse("it windows one table: use a window table function (FROM TABLE(TUMBLE(…))) over joins"));
    }
    let quote = |s: &str| format!("'{}'", s.replace('\'', "''"));
    let mut call = format!("__weir_{kind}({}, {}", quote(&name.to_string()), quote(&time.value));
    if kind == "session" {
        let keys: Vec<String> = groups
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != at)
            .map(|(_, e)| column_name(e).map(|i| i.value.clone()))
            .collect::<Option<_>>()
            .ok_or_else(|| refuse("the other GROUP BY keys of a session window must be columns"))?;
        call.push_str(&format!(", {}", quote(&keys.join(","))));
    }
    for r in &rest {
        call.push_str(&format!(", {r}"));
    }
    call.push(')');
    if let Some(alias) = alias {
        call.push_str(&format!(" {alias}"));
    }
    let relation = Parser::new(&GenericDialect {})
        .try_with_sql(&call)
        .and_then(|mut p| p.parse_table_factor())
        .map_err(|e| WeirError::internal(parser_error(e).context("rewriting a group window").message))?;
    select.from[0].relation = relation;
    // `window_time` too, so that `…_ROWTIME` may be selected.
    let columns = ["window_start", "window_end", "window_time"];
    groups.splice(at..=at, columns.map(|c| Expr::Identifier(Ident::new(c))));

    // The window's auxiliary functions name its columns.
    let auxiliary = |e: &mut Expr| {
        let Expr::Function(f) = e else { return ControlFlow::<()>::Continue(()) };
        let name = f.name.to_string().to_ascii_lowercase();
        let column = match name.strip_prefix(kind).and_then(|s| s.strip_prefix('_')) {
            Some("start") => "window_start",
            Some("end") => "window_end",
            Some("rowtime") => "window_time",
            _ => return ControlFlow::Continue(()),
        };
        *e = Expr::Identifier(Ident::new(column));
        ControlFlow::Continue(())
    };
    let _ = visit_expressions_mut(&mut select.projection, auxiliary);
    let _ = visit_expressions_mut(&mut select.having, auxiliary);
    Ok(())
}

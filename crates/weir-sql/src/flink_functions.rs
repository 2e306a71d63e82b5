//! Flink SQL functions that DataFusion spells differently, rewritten in the SQL syntax tree
//! before planning, so Flink's query text runs as written and costs nothing at run time:
//!
//! | Flink | becomes |
//! |---|---|
//! | `MOD(a, b)` | `a % b` |
//! | `HOUR(ts)`, `MINUTE(ts)`, `SECOND(ts)` | `EXTRACT(HOUR FROM ts)`, … |
//! | `SPLIT_INDEX(s, sep, i)` (0-based; NULL past the end) | `NULLIF(split_part(s, sep, i + 1), '')` |
//! | `REGEXP_EXTRACT(s, re [, group])` | Weir's own ([`crate::regexp_extract`]); a constant pattern checked here |
//! | `DATE_FORMAT(ts, 'yyyy-MM-dd HH:mm')` (Java's pattern letters) | Weir's own, [`crate::date_format`] |
//! | `TIMESTAMPDIFF(DAY, a, b)`, `TIMESTAMPADD(MONTH, n, t)` | Weir's own, the unit as a string ([`crate::time_functions`]) |
//! | `FROM_UNIXTIME(n [, pattern])` (text, not a timestamp) | `DATE_FORMAT(to_timestamp_seconds(n), pattern)` |
//! | `YEAR(d)`, `QUARTER`, `MONTH`, `WEEK`, `DAYOFYEAR`, `DAYOFMONTH`, `DAYOFWEEK` (Sunday = 1) | `CAST(date_part(…) AS BIGINT)` |
//! | `IF(c, a, b)` | `CASE WHEN c THEN a ELSE b END` |
//! | `IS_ALPHA`, `IS_DIGIT`, `IS_DECIMAL` (NULL is false) | `COALESCE(regexp_like(…), false)` |
//! | `CEILING`, `SIGN`, `E()`, `TRUNCATE`, `HEX` (integers, upper case), `LOCATE`, `REGEXP` | `ceil`, `signum`, `exp(1.0)`, `trunc`, `upper(to_hex)`, `strpos`, `regexp_like` |
//! | `TO_BASE64`, `FROM_BASE64` (padded) | `encode`/`decode` with `base64pad` |
//! | `SHA224`…`SHA512`, `SHA2(s, bits)` (hexadecimal text) | `encode(sha…(s), 'hex')` |
//! | `CURRENT_ROW_TIMESTAMP()`, `UNIX_TIMESTAMP()`, `CURRENT_DATABASE()` | `now()`, its epoch seconds, `'default_database'` |
//! | `VARIANCE`, `LISTAGG(x [, sep])` | `var_samp`, `string_agg` (a `FILTER` kept) |
//! | `FIRST_VALUE(x)`, `LAST_VALUE(x)` | the same `IGNORE NULLS`, as Flink skips NULLs |
//! | `FLOOR(t TO unit)`, `CEIL(t TO unit)` | `date_trunc('unit', t)` (plus one unit for `CEIL` off the unit) |
//! | `ENCODE(s, 'UTF-16BE')`, `DECODE(b, charset)` (Java's charset names) | Weir's own ([`crate::text_functions`]) |
//! | `x IS JSON`, `x BETWEEN SYMMETRIC a AND b`, `(a, b) OVERLAPS (c, d)` | see [`crate::predicates`] |

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
    if list.duplicate_treatment.is_some() {
        return None;
    }
    args_of(args)
}

/// The positional arguments of a call, `DISTINCT` or not, if it has no other clause.
fn args_of(args: &FunctionArguments) -> Option<Vec<&Expr>> {
    let FunctionArguments::List(list) = args else { return None };
    if !list.clauses.is_empty() {
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

/// The rewritten functions that are aggregates.
const AGGREGATES: &[&str] = &["listagg", "variance", "first_value", "last_value"];

fn replacement(name: &str, args: &[&Expr]) -> Option<String> {
    Some(match (name, args) {
        ("mod", [a, b]) => format!("(({a}) % ({b}))"),
        ("hour" | "minute" | "second", [ts]) => format!("EXTRACT({} FROM {ts})", name.to_uppercase()),
        ("split_index", [s, sep, i]) => format!("NULLIF(split_part({s}, {sep}, ({i}) + 1), '')"),
        ("date_format", [ts, pattern]) => format!("{}({ts}, {pattern})", crate::date_format::NAME),
        ("from_unixtime", [n]) => format!("{}(to_timestamp_seconds({n}), 'yyyy-MM-dd HH:mm:ss')", crate::date_format::NAME),
        ("from_unixtime", [n, pattern]) => format!("{}(to_timestamp_seconds({n}), {pattern})", crate::date_format::NAME),
        // Date parts as Flink's BIGINTs; Flink's weeks start on Sunday = 1.
        ("year" | "quarter" | "month" | "week", [d]) => format!("CAST(date_part('{name}', {d}) AS BIGINT)"),
        ("dayofyear", [d]) => format!("CAST(date_part('doy', {d}) AS BIGINT)"),
        ("dayofmonth", [d]) => format!("CAST(date_part('day', {d}) AS BIGINT)"),
        ("dayofweek", [d]) => format!("CAST(date_part('dow', {d}) + 1 AS BIGINT)"),
        ("current_row_timestamp", []) => "now()".to_string(),
        ("unix_timestamp", []) => "CAST(date_part('epoch', now()) AS BIGINT)".to_string(),
        ("current_database", []) => "'default_database'".to_string(),
        ("if", [c, a, b]) => format!("(CASE WHEN {c} THEN {a} ELSE {b} END)"),
        // Java's StringUtils: letters / digits of any script; NULL is false.
        ("is_alpha", [s]) => format!("COALESCE(regexp_like({s}, '^\\p{{L}}+$'), false)"),
        ("is_digit", [s]) => format!("COALESCE(regexp_like({s}, '^\\p{{Nd}}+$'), false)"),
        ("is_decimal", [s]) => {
            format!("COALESCE(regexp_like({s}, '^[+-]?([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][+-]?[0-9]+)?$'), false)")
        }
        ("map_from_arrays", [k, v]) => format!("map({k}, {v})"),
        ("ceiling", [x]) => format!("ceil({x})"),
        ("sign", [x]) => format!("signum({x})"),
        ("e", []) => "exp(1.0)".to_string(),
        ("truncate", [x]) => format!("trunc({x})"),
        ("truncate", [x, n]) => format!("trunc({x}, {n})"),
        ("hex", [n]) => format!("upper(to_hex({n}))"),
        ("to_base64", [s]) => format!("encode({s}, 'base64pad')"),
        ("from_base64", [s]) => format!("CAST(decode({s}, 'base64pad') AS VARCHAR)"),
        ("locate", [needle, s]) => format!("strpos({s}, {needle})"),
        ("locate", [needle, s, from]) => format!(
            "(CASE WHEN strpos(substr({s}, {from}), {needle}) = 0 THEN 0 ELSE strpos(substr({s}, {from}), {needle}) + ({from}) - 1 END)"
        ),
        ("regexp", [s, re]) => format!("regexp_like({s}, {re})"),
        // Java's charset names; DataFusion's `encode`/`decode` keep 'base64' and 'hex'.
        ("encode", [s, Expr::Value(v)]) if charset_literal(v) => format!("{}({s}, {v})", crate::text_functions::ENCODE),
        ("decode", [b, Expr::Value(v)]) if charset_literal(v) => format!("{}({b}, {v})", crate::text_functions::DECODE),
        // Flink's SHA-2 functions give hexadecimal text, DataFusion's bytes.
        ("sha224" | "sha256" | "sha384" | "sha512", [s]) => format!("encode({name}({s}), 'hex')"),
        ("sha2", [s, bits]) => format!(
            "(CASE {bits} WHEN 224 THEN encode(sha224({s}), 'hex') WHEN 256 THEN encode(sha256({s}), 'hex') \
             WHEN 384 THEN encode(sha384({s}), 'hex') WHEN 512 THEN encode(sha512({s}), 'hex') END)"
        ),
        ("variance", [x]) => format!("var_samp({x})"),
        ("listagg", [x]) => format!("string_agg({x}, ',')"),
        ("listagg", [x, sep]) => format!("string_agg({x}, {sep})"),
        // Flink's FIRST_VALUE and LAST_VALUE skip NULLs; DataFusion's keep them unless told.
        ("first_value" | "last_value", [x]) => format!("{name}({x} IGNORE NULLS)"),
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

/// A text literal that is not one of DataFusion's encodings (`base64`, `base64pad`, `hex`):
/// Flink's charset, checked by Weir's `ENCODE`/`DECODE`.
fn charset_literal(v: &datafusion::sql::sqlparser::ast::ValueWithSpan) -> bool {
    use datafusion::sql::sqlparser::ast::Value;
    matches!(&v.value, Value::SingleQuotedString(s) if !["base64", "base64pad", "hex"].contains(&s.to_ascii_lowercase().as_str()))
}

/// `FLOOR(t TO unit)` and `CEIL(t TO unit)` on times, which DataFusion refuses: `date_trunc`,
/// and for `CEIL` one unit more unless `t` is on the unit already.
fn floor_or_ceil(expr: &Expr) -> Option<String> {
    use datafusion::sql::sqlparser::ast::{CeilFloorKind, DateTimeField};
    let (ceil, inner, field) = match expr {
        Expr::Floor { expr, field: CeilFloorKind::DateTimeField(f) } => (false, expr, f),
        Expr::Ceil { expr, field: CeilFloorKind::DateTimeField(f) } => (true, expr, f),
        _ => return None,
    };
    let unit = match field {
        DateTimeField::Year => "year",
        DateTimeField::Quarter => "quarter",
        DateTimeField::Month => "month",
        DateTimeField::Day => "day",
        DateTimeField::Hour => "hour",
        DateTimeField::Minute => "minute",
        DateTimeField::Second => "second",
        _ => return None,
    };
    let floor = format!("date_trunc('{unit}', {inner})");
    // As Calcite: a month, quarter or year is ceiled from the day, the time of day ignored.
    let on_unit = match unit {
        "year" | "quarter" | "month" => format!("date_trunc('day', {inner})"),
        _ => inner.to_string(),
    };
    Some(if ceil {
        format!("(CASE WHEN {floor} = {on_unit} THEN {floor} ELSE {floor} + INTERVAL '1' {unit} END)")
    } else {
        floor
    })
}

/// `a IS [NOT] DISTINCT FROM b AND c`, which sqlparser reads as `a IS DISTINCT FROM (b AND c)`
/// (it parses the right side as a whole expression), put back as SQL's precedence has it:
/// `(a IS DISTINCT FROM b) AND c`. A right side the query parenthesized is a `Nested` and stays.
fn distinct_from_precedence(expr: &mut Expr) {
    use datafusion::sql::sqlparser::ast::BinaryOperator;
    let (left, right, not) = match expr {
        Expr::IsDistinctFrom(l, r) => (l, r, false),
        Expr::IsNotDistinctFrom(l, r) => (l, r, true),
        _ => return,
    };
    if !matches!(right.as_ref(), Expr::BinaryOp { op: BinaryOperator::And | BinaryOperator::Or, .. }) {
        return;
    }
    let (a, mut tree) = (left.clone(), right.as_ref().clone());
    // The leftmost operand of the AND/OR tree is the comparison's right side.
    let mut spot = &mut tree;
    while let Expr::BinaryOp { left, op: BinaryOperator::And | BinaryOperator::Or, .. } = spot {
        spot = left.as_mut();
    }
    let b = Box::new(spot.clone());
    *spot = if not { Expr::IsNotDistinctFrom(a, b) } else { Expr::IsDistinctFrom(a, b) };
    *expr = tree;
}

/// Rewrite Flink-only function calls in `statement` (or an expression) into DataFusion
/// expressions.
pub fn rewrite<V: VisitMut>(statement: &mut V) -> Result<()> {
    let mut failed = None;
    let _ = visit_expressions_mut(statement, |expr| {
        distinct_from_precedence(expr);
        if let Some(text) = floor_or_ceil(expr)
            .or_else(|| crate::predicates::replacement(expr))
            .or_else(|| crate::predicates::overlaps(expr))
        {
            match Parser::new(&GenericDialect {}).try_with_sql(&text).and_then(|mut p| p.parse_expr()) {
                Ok(new) => *expr = new,
                Err(e) => {
                    let e = parser_error(e).context("rewriting FLOOR/CEIL TO, IS JSON or BETWEEN SYMMETRIC");
                    failed = Some(WeirError::internal(e.message));
                    return ControlFlow::Break(());
                }
            }
            return ControlFlow::Continue(());
        }
        if let Expr::Function(f) = expr {
            let name = f.name.to_string().to_ascii_lowercase();
            if name == crate::regexp_extract::NAME {
                if let Some(e) = plain_args(&f.args).and_then(|args| bad_constant_pattern(&args)) {
                    failed = Some(e);
                    return ControlFlow::Break(());
                }
            }
            // Aggregates keep DISTINCT: `LISTAGG(DISTINCT x)`.
            let distinct = match &f.args {
                FunctionArguments::List(list) => list.duplicate_treatment,
                _ => None,
            };
            let args = if distinct.is_some() && AGGREGATES.contains(&name.as_str()) {
                args_of(&f.args)
            } else {
                plain_args(&f.args)
            };
            let text = args.and_then(|args| replacement(&name, &args));
            if let Some(text) = text {
                match Parser::new(&GenericDialect {}).try_with_sql(&text).and_then(|mut p| p.parse_expr()) {
                    Ok(mut new) => {
                        // An aggregate keeps its FILTER (and an OVER its window).
                        if let Expr::Function(g) = &mut new {
                            g.filter = f.filter.clone();
                            g.over = f.over.clone();
                            if let FunctionArguments::List(list) = &mut g.args {
                                list.duplicate_treatment = distinct;
                            }
                        }
                        *expr = new
                    }
                    Err(e) => {
                        failed =
                            Some(WeirError::internal(parser_error(e).context(format!("rewriting {name}()")).message));
                        return ControlFlow::Break(());
                    }
                }
            }
        }
        ControlFlow::Continue(())
    });
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// `REGEXP_EXTRACT`'s constant pattern, refused where it stands if the regex engine cannot
/// compile it (Flink would give NULL for every row; a Java pattern Rust's engine lacks, such
/// as a look-around, is caught here too).
fn bad_constant_pattern(args: &[&Expr]) -> Option<WeirError> {
    use datafusion::sql::sqlparser::ast::Value;
    let Some(Expr::Value(v)) = args.get(1) else { return None };
    let Value::SingleQuotedString(pattern) = &v.value else { return None };
    let reason = crate::regexp_extract::check_constant_pattern(pattern)?;
    Some(
        WeirError::user(format!(
            "REGEXP_EXTRACT: the pattern '{pattern}' is not a regular expression Weir runs: {reason}"
        ))
        .at(Some(crate::parser::location(v.span.start))),
    )
}

//! Two predicates of Flink's grammar that sqlparser does not read, rewritten so that
//! sqlparser's own precedence places them:
//!
//! - `x IS [NOT] JSON [VALUE | SCALAR | ARRAY | OBJECT]` becomes, token by token, the one
//!   postfix `IS` form sqlparser reads with a word of ours: `x IS [NOT] NFC NORMALIZED` (the
//!   four forms NFC, NFD, NFKC, NFKD standing for VALUE, SCALAR, ARRAY, OBJECT), which binds as
//!   `IS` binds; then, in the syntax tree, `[NOT] __weir_is_json(x, 'OBJECT')` ([`IsJson`]).
//!   (`IS … DISTINCT FROM` would not do: sqlparser reads everything after it, `AND`s included,
//!   as its right side.) SQL's own `IS NORMALIZED`, which neither Flink nor DataFusion has, is
//!   refused.
//! - `x [NOT] BETWEEN SYMMETRIC a AND b` becomes `x [NOT] BETWEEN __weir_symmetric(a) AND b`,
//!   and then `[NOT] (x BETWEEN a AND b OR x BETWEEN b AND a)`. `ASYMMETRIC`, the default, is
//!   dropped.
//! - `(a, b) OVERLAPS (c, d)`, which sqlparser reads but DataFusion does not plan, becomes
//!   `__weir_overlaps(a, b, c, d)` ([`Overlaps`]).

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, BooleanBuilder};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{plan_err, ScalarValue};
use datafusion::error::Result;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility};
use datafusion::sql::sqlparser::ast::Expr;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};
use serde_json::Value;
use weir_core::WeirError;

/// The normalization form that stands for each kind of JSON.
const KINDS: [(&str, &str); 4] = [("VALUE", "NFC"), ("SCALAR", "NFD"), ("ARRAY", "NFKC"), ("OBJECT", "NFKD")];
const SYMMETRIC: &str = "__weir_symmetric";
pub const IS_JSON: &str = "__weir_is_json";

fn word_is(t: &Token, name: &str) -> bool {
    matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(name))
}

fn next_meaningful(tokens: &[TokenWithSpan], from: usize) -> Option<usize> {
    (from..tokens.len()).find(|&j| !matches!(tokens[j].token, Token::Whitespace(_)))
}

/// Rewrite the tokens of `IS [NOT] JSON [kind]` and `BETWEEN [A]SYMMETRIC`.
pub fn rewrite(tokens: Vec<TokenWithSpan>) -> Result<Vec<TokenWithSpan>, WeirError> {
    if let Some(t) = tokens.iter().find(|t| word_is(&t.token, "NORMALIZED")) {
        return Err(WeirError::not_supported("IS NORMALIZED").at(Some(crate::parser::location(t.span.start))));
    }
    if !tokens
        .iter()
        .any(|t| word_is(&t.token, "JSON") || word_is(&t.token, "SYMMETRIC") || word_is(&t.token, "ASYMMETRIC"))
    {
        return Ok(tokens);
    }
    let mut out = Vec::with_capacity(tokens.len() + 8);
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        let span = t.span;
        let word = |w: &str| TokenWithSpan::new(Token::make_word(w, None), span);
        let punct = |p: Token| TokenWithSpan::new(p, span);
        let space =
            || TokenWithSpan::new(Token::Whitespace(datafusion::sql::sqlparser::tokenizer::Whitespace::Space), span);
        if word_is(&t.token, "IS") {
            let mut j = next_meaningful(&tokens, i + 1);
            let negated = j.is_some_and(|j| word_is(&tokens[j].token, "NOT"));
            if negated {
                j = j.and_then(|j| next_meaningful(&tokens, j + 1));
            }
            if let Some(json) = j.filter(|&j| word_is(&tokens[j].token, "JSON")) {
                let after = next_meaningful(&tokens, json + 1);
                let kind = after.and_then(|k| {
                    ["VALUE", "SCALAR", "ARRAY", "OBJECT"]
                        .into_iter()
                        .find(|w| word_is(&tokens[k].token, w))
                        .map(|w| (k, w))
                });
                let (last, kind) = match kind {
                    Some((k, w)) => (k, w),
                    None => (json, "VALUE"),
                };
                let form = KINDS.iter().find(|(k, _)| *k == kind).map_or("NFC", |(_, f)| *f);
                out.push(word("IS"));
                if negated {
                    out.extend([space(), word("NOT")]);
                }
                out.extend([space(), word(form), space(), word("NORMALIZED")]);
                i = last + 1;
                continue;
            }
        }
        if word_is(&t.token, "BETWEEN") {
            let j = next_meaningful(&tokens, i + 1);
            if let Some(j) = j.filter(|&j| word_is(&tokens[j].token, "ASYMMETRIC")) {
                out.push(t.clone());
                i = j + 1;
                continue;
            }
            if let Some(j) = j.filter(|&j| word_is(&tokens[j].token, "SYMMETRIC")) {
                // The lower bound runs to the first top-level AND.
                let mut depth = 0usize;
                let and = (j + 1..tokens.len()).find(|&k| {
                    match tokens[k].token {
                        Token::LParen | Token::LBracket => depth += 1,
                        Token::RParen | Token::RBracket => depth = depth.saturating_sub(1),
                        _ => {}
                    }
                    depth == 0 && word_is(&tokens[k].token, "AND")
                });
                if let Some(and) = and {
                    out.extend([t.clone(), space(), word(SYMMETRIC), punct(Token::LParen)]);
                    out.extend(tokens[j + 1..and].iter().cloned());
                    out.push(punct(Token::RParen));
                    out.push(space());
                    i = and;
                    continue;
                }
            }
        }
        out.push(t.clone());
        i += 1;
    }
    Ok(out)
}

fn marker_arg<'a>(expr: &'a Expr, name: &str) -> Option<&'a Expr> {
    let Expr::Function(f) = expr else { return None };
    if !f.name.to_string().eq_ignore_ascii_case(name) {
        return None;
    }
    match crate::flink_functions::plain_args(&f.args)?.as_slice() {
        [arg] => Some(*arg),
        _ => None,
    }
}

/// The syntax-tree half: the SQL text that replaces `expr`, if it is a rewritten predicate.
pub fn replacement(expr: &Expr) -> Option<String> {
    match expr {
        Expr::IsNormalized { expr: x, form, negated } => {
            let form = form.as_ref().map_or("NFC".to_string(), |f| f.to_string());
            let kind = KINDS.iter().find(|(_, f)| *f == form).map_or("VALUE", |(k, _)| *k);
            let call = format!("{IS_JSON}({x}, '{kind}')");
            Some(if *negated { format!("(NOT {call})") } else { call })
        }
        Expr::Between { expr: x, negated, low, high } => {
            let low = marker_arg(low, SYMMETRIC)?;
            let either = format!("(({x}) BETWEEN ({low}) AND ({high}) OR ({x}) BETWEEN ({high}) AND ({low}))");
            Some(if *negated { format!("(NOT {either})") } else { either })
        }
        _ => None,
    }
}

/// `IS JSON [kind]` on text: whether it parses as JSON of that kind (`VALUE`: any, `SCALAR`:
/// neither object nor array). NULL is not JSON (false), as in Flink.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct IsJson {
    signature: Signature,
}

impl Default for IsJson {
    fn default() -> Self {
        Self { signature: Signature::any(2, Volatility::Immutable) }
    }
}

impl ScalarUDFImpl for IsJson {
    fn name(&self) -> &str {
        IS_JSON
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match &args[0] {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => Ok(DataType::Boolean),
            t => plan_err!("IS JSON takes a string, not {t}"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let kind = match &args.args[1] {
            ColumnarValue::Scalar(ScalarValue::Utf8(Some(k))) => k.clone(),
            _ => return plan_err!("IS JSON: its kind must be VALUE, SCALAR, ARRAY or OBJECT"),
        };
        let input = args.args[0].to_array(rows)?;
        let text = datafusion::arrow::compute::cast(&input, &DataType::Utf8)?;
        let text = text.as_string::<i32>();
        let mut out = BooleanBuilder::with_capacity(rows);
        for i in 0..rows {
            let ok = !text.is_null(i)
                && match serde_json::from_str::<Value>(text.value(i)) {
                    Ok(Value::Object(_)) => kind == "VALUE" || kind == "OBJECT",
                    Ok(Value::Array(_)) => kind == "VALUE" || kind == "ARRAY",
                    Ok(_) => kind == "VALUE" || kind == "SCALAR",
                    Err(_) => false,
                };
            out.append_value(ok);
        }
        crate::time_functions::scalar_or_array(&args.args[..1], Arc::new(out.finish()))
    }
}

pub const OVERLAPS: &str = "__weir_overlaps";

/// `(a, b) OVERLAPS (c, d)`, which sqlparser reads as a binary operator over two rows:
/// `__weir_overlaps(a, b, c, d)` ([`Overlaps`]).
pub fn overlaps(expr: &Expr) -> Option<String> {
    use datafusion::sql::sqlparser::ast::BinaryOperator;
    let Expr::BinaryOp { left, op: BinaryOperator::Overlaps, right } = expr else { return None };
    let pair = |e: &Expr| match e {
        Expr::Tuple(items) if items.len() == 2 => Some((items[0].clone(), items[1].clone())),
        _ => None,
    };
    let ((a, b), (c, d)) = (pair(left)?, pair(right)?);
    Some(format!("{OVERLAPS}({a}, {b}, {c}, {d})"))
}

/// Whether two periods overlap, as Flink (Calcite) decides it: each period is a start and an
/// end, or a start and an interval; its ends are put in order; they overlap when each ends at
/// or after the other starts (periods that touch overlap). NULL if any end is NULL.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Overlaps {
    signature: Signature,
}

impl Default for Overlaps {
    fn default() -> Self {
        Self { signature: Signature::any(4, Volatility::Immutable) }
    }
}

impl ScalarUDFImpl for Overlaps {
    fn name(&self) -> &str {
        OVERLAPS
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        let time = |t: &DataType| {
            matches!(t, DataType::Timestamp(..) | DataType::Date32 | DataType::Time32(_) | DataType::Time64(_))
        };
        let end = |t: &DataType| time(t) || matches!(t, DataType::Interval(_) | DataType::Duration(_));
        match args {
            [a, b, c, d] if time(a) && time(c) && end(b) && end(d) => Ok(DataType::Boolean),
            _ => plan_err!(
                "OVERLAPS takes two periods of times: (start, end or interval) OVERLAPS (start, end or interval)"
            ),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        use datafusion::arrow::array::ArrayRef;
        use datafusion::arrow::compute::kernels::{boolean, cmp, numeric, zip::zip};
        let rows = args.number_rows;
        let arrays = args.args.iter().map(|a| a.to_array(rows)).collect::<Result<Vec<_>>>()?;
        use datafusion::arrow::datatypes::TimeUnit;
        // Times of day as instants of 1970-01-01, where Arrow adds intervals (a period past
        // midnight runs on, where Flink's TIME arithmetic would wrap).
        let as_instant = |a: &ArrayRef| -> Result<ArrayRef> {
            use datafusion::arrow::compute::cast;
            Ok(match a.data_type() {
                DataType::Time32(_) | DataType::Time64(_) => {
                    let nanos = cast(&cast(a, &DataType::Time64(TimeUnit::Nanosecond))?, &DataType::Int64)?;
                    cast(&nanos, &DataType::Timestamp(TimeUnit::Nanosecond, None))?
                }
                _ => a.clone(),
            })
        };
        let arrays = arrays.iter().map(as_instant).collect::<Result<Vec<_>>>()?;
        let common = arrays[0].data_type().clone();
        // A period's start and end, in order, in the first start's type.
        let period = |start: &ArrayRef, end: &ArrayRef| -> Result<(ArrayRef, ArrayRef)> {
            let start = datafusion::arrow::compute::cast(start, &common)?;
            let end = match end.data_type() {
                DataType::Interval(_) | DataType::Duration(_) => numeric::add(&start, end)?,
                _ => datafusion::arrow::compute::cast(end, &common)?,
            };
            let ordered = cmp::lt_eq(&start, &end)?;
            Ok((zip(&ordered, &start, &end)?, zip(&ordered, &end, &start)?))
        };
        let (s0, e0) = period(&arrays[0], &arrays[1])?;
        let (s1, e1) = period(&arrays[2], &arrays[3])?;
        let out = boolean::and(&cmp::gt_eq(&e0, &s1)?, &cmp::gt_eq(&e1, &s0)?)?;
        crate::time_functions::scalar_or_array(&args.args, Arc::new(out))
    }
}

//! Flink's JSON constructors, `JSON_OBJECT([KEY] k VALUE v, … [NULL | ABSENT ON NULL])` and
//! `JSON_ARRAY(v, … [NULL | ABSENT ON NULL])`, which sqlparser does not read. They are
//! rewritten token by token into calls of [`JsonObject`] and [`JsonArray`]:
//!
//! `__weir_json_object('NULL', 'rv', k1, v1, k2, v2)`
//!
//! The first argument is the `ON NULL` behaviour (Flink's defaults: `NULL ON NULL` for
//! objects, `ABSENT ON NULL` for arrays); the second says, value by value, whether the value is
//! another constructor's JSON (`r`, inserted as JSON) or a plain value (`v`, a string is
//! quoted), as Flink inserts a nested constructor's result directly and any other string as
//! text. Positions stay those of the original tokens.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{exec_err, plan_err};
use datafusion::error::Result;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility};
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};
use serde_json::Value;
use weir_core::{Result as WeirResult, WeirError};

use crate::udf::udf;

use crate::parser::location;

pub const OBJECT: &str = "__weir_json_object";
pub const ARRAY: &str = "__weir_json_array";

fn word_is(t: &Token, name: &str) -> bool {
    matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(name))
}

fn is_constructor(t: &Token) -> bool {
    word_is(t, "JSON_OBJECT") || word_is(t, "JSON_ARRAY")
}

/// `JSON_OBJECTAGG` or `JSON_ARRAYAGG` ([`crate::json_aggregates`]).
fn is_aggregate(t: &Token) -> bool {
    word_is(t, "JSON_OBJECTAGG") || word_is(t, "JSON_ARRAYAGG")
}

fn trim(tokens: &[TokenWithSpan]) -> &[TokenWithSpan] {
    let blank = |t: &TokenWithSpan| matches!(t.token, Token::Whitespace(_));
    let start = tokens.iter().position(|t| !blank(t)).unwrap_or(tokens.len());
    let end = tokens.iter().rposition(|t| !blank(t)).map_or(start, |e| e + 1);
    &tokens[start..end.max(start)]
}

/// The index of the `)` that closes the `(` at `open`.
fn closing(tokens: &[TokenWithSpan], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (j, t) in tokens.iter().enumerate().skip(open) {
        match t.token {
            Token::LParen | Token::LBracket | Token::LBrace => depth += 1,
            Token::RParen | Token::RBracket | Token::RBrace => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

/// Split `tokens` at top-level tokens for which `split` holds.
fn split_top(tokens: &[TokenWithSpan], split: impl Fn(&Token) -> bool) -> Vec<Vec<TokenWithSpan>> {
    let mut depth = 0usize;
    let mut parts = vec![Vec::new()];
    for t in tokens {
        match t.token {
            Token::LParen | Token::LBracket | Token::LBrace => depth += 1,
            Token::RParen | Token::RBracket | Token::RBrace => depth = depth.saturating_sub(1),
            _ if depth == 0 && split(&t.token) => {
                parts.push(Vec::new());
                continue;
            }
            _ => {}
        }
        if let Some(last) = parts.last_mut() {
            last.push(t.clone());
        }
    }
    parts
}

/// Whether `tokens` are exactly one constructor call (its JSON goes in as JSON).
fn is_nested_constructor(tokens: &[TokenWithSpan]) -> bool {
    let t = trim(tokens);
    let Some(open) = t.iter().skip(1).position(|x| !matches!(x.token, Token::Whitespace(_))).map(|p| p + 1) else {
        return false;
    };
    !t.is_empty()
        && is_constructor(&t[0].token)
        && t[open].token == Token::LParen
        && closing(t, open) == Some(t.len() - 1)
}

/// Rewrite every `JSON_OBJECT(…)` and `JSON_ARRAY(…)` of a statement's tokens.
pub fn rewrite(tokens: Vec<TokenWithSpan>) -> WeirResult<Vec<TokenWithSpan>> {
    if !tokens.iter().any(|t| is_constructor(&t.token) || is_aggregate(&t.token)) {
        return Ok(tokens);
    }
    let mut out = Vec::with_capacity(tokens.len() + 8);
    let mut i = 0;
    while i < tokens.len() {
        let next = (i + 1..tokens.len()).find(|&j| !matches!(tokens[j].token, Token::Whitespace(_)));
        let open = next.filter(|&j| tokens[j].token == Token::LParen);
        let aggregate = is_aggregate(&tokens[i].token);
        let (Some(open), true) = (open, is_constructor(&tokens[i].token) || aggregate) else {
            out.push(tokens[i].clone());
            i += 1;
            continue;
        };
        let object = word_is(&tokens[i].token, "JSON_OBJECT") || word_is(&tokens[i].token, "JSON_OBJECTAGG");
        let what = match (object, aggregate) {
            (true, false) => "JSON_OBJECT",
            (false, false) => "JSON_ARRAY",
            (true, true) => "JSON_OBJECTAGG",
            (false, true) => "JSON_ARRAYAGG",
        };
        let span = tokens[i].span;
        let at = || Some(location(span.start));
        let Some(end) = closing(&tokens, open) else {
            return Err(WeirError::user(format!("{what}( without its closing )")).at(at()));
        };
        let mut inner: Vec<TokenWithSpan> = trim(&tokens[open + 1..end]).to_vec();
        // A trailing `NULL ON NULL` or `ABSENT ON NULL`.
        let meaningful: Vec<usize> =
            (0..inner.len()).filter(|&k| !matches!(inner[k].token, Token::Whitespace(_))).collect();
        let mut on_null = if object { "NULL" } else { "ABSENT" };
        if let [.., a, b, c] = meaningful[..] {
            let (ta, tb, tc) = (&inner[a].token, &inner[b].token, &inner[c].token);
            if (word_is(ta, "NULL") || word_is(ta, "ABSENT")) && word_is(tb, "ON") && word_is(tc, "NULL") {
                on_null = if word_is(ta, "NULL") { "NULL" } else { "ABSENT" };
                inner.truncate(a);
            }
        }
        let args: Vec<Vec<TokenWithSpan>> =
            if trim(&inner).is_empty() { Vec::new() } else { split_top(&inner, |t| *t == Token::Comma) };
        if aggregate && args.len() != 1 {
            return Err(WeirError::user(format!(
                "{what} takes one {}",
                if object { "entry, KEY k VALUE v" } else { "value" }
            ))
            .at(at()));
        }
        let mut mask = String::new();
        let mut rewritten: Vec<Vec<TokenWithSpan>> = Vec::new();
        for arg in &args {
            let arg = trim(arg);
            if arg.is_empty() {
                return Err(WeirError::user(format!("{what}: an empty argument")).at(at()));
            }
            let value = if object {
                let arg = if word_is(&arg[0].token, "KEY") { trim(&arg[1..]) } else { arg };
                let parts = split_top(arg, |t| word_is(t, "VALUE") || *t == Token::Colon);
                let entry = || {
                    WeirError::user(format!("{what} takes entries of the form KEY 'name' VALUE expression"))
                        .at(Some(location(arg[0].span.start)))
                };
                let [key, value] = &parts[..] else { return Err(entry()) };
                if trim(key).is_empty() || trim(value).is_empty() {
                    return Err(entry());
                }
                rewritten.push(rewrite(trim(key).to_vec())?);
                value.clone()
            } else {
                arg.to_vec()
            };
            mask.push(if is_nested_constructor(&value) { 'r' } else { 'v' });
            rewritten.push(rewrite(trim(&value).to_vec())?);
        }
        let word = |w: &str| TokenWithSpan::new(Token::make_word(w, None), span);
        let punct = |t: Token| TokenWithSpan::new(t, span);
        let text = |s: &str| TokenWithSpan::new(Token::SingleQuotedString(s.to_string()), span);
        if aggregate {
            // `(key,) __weir_json_value('mask', value), 'ON NULL'`
            use crate::json_aggregates::{ARRAY_AGG, OBJECT_AGG, VALUE};
            let mut rewritten = rewritten.into_iter();
            out.push(word(if object { OBJECT_AGG } else { ARRAY_AGG }));
            out.push(punct(Token::LParen));
            if object {
                out.extend(rewritten.next().unwrap_or_default());
                out.push(punct(Token::Comma));
            }
            out.push(word(VALUE));
            out.push(punct(Token::LParen));
            out.push(text(&mask));
            out.push(punct(Token::Comma));
            out.extend(rewritten.next().unwrap_or_default());
            out.push(punct(Token::RParen));
            out.push(punct(Token::Comma));
            out.push(text(on_null));
            out.push(punct(Token::RParen));
            i = end + 1;
            continue;
        }
        out.push(word(if object { OBJECT } else { ARRAY }));
        out.push(punct(Token::LParen));
        out.push(text(on_null));
        out.push(punct(Token::Comma));
        out.push(text(&mask));
        for arg in rewritten {
            out.push(punct(Token::Comma));
            out.extend(arg);
        }
        out.push(punct(Token::RParen));
        i = end + 1;
    }
    Ok(out)
}

/// One value of `array` at `row` as JSON; `None` for NULL.
pub(crate) fn json_of(array: &ArrayRef, row: usize) -> Result<Option<Value>> {
    use datafusion::arrow::datatypes::DataType as T;
    if array.is_null(row) {
        return Ok(None);
    }
    let value = match array.data_type() {
        T::Boolean => Value::Bool(array.as_boolean().value(row)),
        // Read in place: no per-row slice and cast.
        T::Utf8 => Value::String(array.as_string::<i32>().value(row).to_string()),
        T::LargeUtf8 => Value::String(array.as_string::<i64>().value(row).to_string()),
        T::Utf8View => Value::String(array.as_string_view().value(row).to_string()),
        t if t.is_integer() || t.is_floating() || matches!(t, T::Decimal128(..) | T::Decimal256(..)) => {
            let text = datafusion::arrow::util::display::array_value_to_string(array, row)?;
            let text = text.as_str();
            // NaN and infinities are no JSON numbers: as text, as Jackson writes them.
            serde_json::from_str::<serde_json::Number>(text)
                .map(Value::Number)
                .unwrap_or_else(|_| Value::String(text.to_string()))
        }
        T::List(_) | T::LargeList(_) | T::FixedSizeList(..) => {
            let list = array.slice(row, 1);
            let values = match list.data_type() {
                T::List(_) => list.as_list::<i32>().value(0),
                T::LargeList(_) => list.as_list::<i64>().value(0),
                _ => list.as_fixed_size_list().value(0),
            };
            let items = (0..values.len()).map(|k| Ok(json_of(&values, k)?.unwrap_or(Value::Null)));
            Value::Array(items.collect::<Result<Vec<_>>>()?)
        }
        T::Struct(fields) => {
            let s = array.as_struct();
            let mut map = serde_json::Map::new();
            for (field, column) in fields.iter().zip(s.columns()) {
                map.insert(field.name().clone(), json_of(column, row)?.unwrap_or(Value::Null));
            }
            Value::Object(map)
        }
        T::Map(..) => {
            let entries = array.as_map().value(row);
            let (keys, values) = (entries.column(0), entries.column(1));
            let mut map = serde_json::Map::new();
            for k in 0..entries.len() {
                let key = match json_of(keys, k)? {
                    Some(Value::String(s)) => s,
                    Some(other) => other.to_string(),
                    None => continue,
                };
                map.insert(key, json_of(values, k)?.unwrap_or(Value::Null));
            }
            Value::Object(map)
        }
        // Times, dates, binary: their SQL text, as a JSON string.
        _ => {
            let text = crate::time_functions::flink_text(&array.slice(row, 1))?;
            Value::String(text)
        }
    };
    Ok(Some(value))
}

/// A value for the output: a nested constructor's JSON text is parsed back to be inserted as
/// JSON.
pub(crate) fn member(array: &ArrayRef, row: usize, raw: bool) -> Result<Option<Value>> {
    match json_of(array, row)? {
        Some(Value::String(text)) if raw => match serde_json::from_str(&text) {
            Ok(v) => Ok(Some(v)),
            Err(_) => exec_err!("JSON_OBJECT/JSON_ARRAY: a nested constructor gave text that is not JSON"),
        },
        other => Ok(other),
    }
}

/// The constant `ON NULL` behaviour and value mask of a rewritten call.
fn settings(args: &ScalarFunctionArgs, name: &str) -> Result<(bool, Vec<bool>)> {
    use datafusion::common::ScalarValue;
    let text = |i: usize| match args.args.get(i) {
        Some(ColumnarValue::Scalar(ScalarValue::Utf8(Some(s)))) => Ok(s.clone()),
        _ => plan_err!("{name}: internal arguments missing"),
    };
    Ok((text(0)? == "ABSENT", text(1)?.chars().map(|c| c == 'r').collect()))
}

/// Write a JSON object; its keys sorted, as Flink writes them (a repeated key takes the last value).
/// Sorted explicitly: serde_json's map keeps insertion order if any crate enables `preserve_order`.
fn write_object(entries: Vec<(String, Value)>) -> String {
    let sorted: std::collections::BTreeMap<String, Value> = entries.into_iter().collect();
    let members: Vec<String> = sorted.into_iter().map(|(k, v)| format!("{}:{v}", Value::String(k))).collect();
    format!("{{{}}}", members.join(","))
}

udf!(JsonObject, OBJECT, Signature::variadic_any(Volatility::Immutable), DataType::Utf8);
udf!(JsonArray, ARRAY, Signature::variadic_any(Volatility::Immutable), DataType::Utf8);

/// Each row's JSON text, by `row` over the value arguments (after the two settings).
fn json_rows(
    args: &ScalarFunctionArgs,
    rows: usize,
    name: &str,
    row: fn(&[ArrayRef], usize, bool, &[bool]) -> Result<String>,
) -> Result<ArrayRef> {
    let (absent, raw) = settings(args, name)?;
    let arrays = args.args[2..].iter().map(|a| a.to_array(rows)).collect::<Result<Vec<_>>>()?;
    let mut out = StringBuilder::with_capacity(rows, rows * 16);
    for i in 0..rows {
        out.append_value(row(&arrays, i, absent, &raw)?);
    }
    Ok(Arc::new(out.finish()))
}

impl JsonObject {
    fn run(args: &ScalarFunctionArgs, rows: usize) -> Result<ArrayRef> {
        json_rows(args, rows, "JSON_OBJECT", Self::row)
    }

    fn row(arrays: &[ArrayRef], row: usize, absent: bool, raw: &[bool]) -> Result<String> {
        let mut entries = Vec::with_capacity(arrays.len() / 2);
        for (pair, raw) in arrays.chunks(2).zip(raw) {
            let [key, value] = pair else { return plan_err!("JSON_OBJECT takes keys and values in pairs") };
            let key = match json_of(key, row)? {
                Some(Value::String(k)) => k,
                Some(other) => other.to_string(),
                None => return exec_err!("JSON_OBJECT: a key is NULL (keys must not be NULL)"),
            };
            match member(value, row, *raw)? {
                Some(v) => entries.push((key, v)),
                None if absent => {}
                None => entries.push((key, Value::Null)),
            }
        }
        Ok(write_object(entries))
    }
}

impl JsonArray {
    fn run(args: &ScalarFunctionArgs, rows: usize) -> Result<ArrayRef> {
        json_rows(args, rows, "JSON_ARRAY", Self::row)
    }

    fn row(arrays: &[ArrayRef], row: usize, absent: bool, raw: &[bool]) -> Result<String> {
        let mut items = Vec::with_capacity(arrays.len());
        for (value, raw) in arrays.iter().zip(raw) {
            match member(value, row, *raw)? {
                Some(v) => items.push(v),
                None if absent => {}
                None => items.push(Value::Null),
            }
        }
        Ok(Value::Array(items).to_string())
    }
}

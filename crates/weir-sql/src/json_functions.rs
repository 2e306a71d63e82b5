//! Flink's JSON query functions, which DataFusion lacks: `JSON_VALUE`, `JSON_QUERY`,
//! `JSON_EXISTS` over JSON text with SQL/JSON paths, and `JSON_STRING`.
//!
//! Paths are Flink's (Calcite's, over Jayway's JsonPath): an optional mode (`lax`, the
//! default, or `strict`), `$`, then `.name`, `."name"`, `['name']`, `[n]`, `[*]` and `.*`. A
//! path with a wildcard gives the array of what it matched. On an error (text that is not
//! JSON, a path that does not parse, a strict path that finds nothing) and on an empty result
//! each function gives Flink's default: `NULL` for `JSON_VALUE` and `JSON_QUERY`, `FALSE` for
//! `JSON_EXISTS`. The `RETURNING`, `ON EMPTY`, `ON ERROR` and wrapper clauses are not offered.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, BooleanBuilder, StringBuilder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{plan_err, ScalarValue};
use datafusion::error::Result;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility};
use serde_json::Value;

/// One step of a path.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Member(String),
    Index(usize),
    /// `[*]` or `.*`: every element or member.
    Any,
}

#[derive(Debug, Clone, PartialEq)]
struct Path {
    strict: bool,
    steps: Vec<Step>,
}

/// Parse a SQL/JSON path; `None` if it is not one.
fn parse_path(text: &str) -> Option<Path> {
    let text = text.trim();
    let (strict, rest) = if let Some(r) = text.strip_prefix("strict") {
        (true, r.trim_start())
    } else if let Some(r) = text.strip_prefix("lax") {
        (false, r.trim_start())
    } else {
        (false, text)
    };
    let mut chars = rest.strip_prefix('$')?.chars().peekable();
    let mut steps = Vec::new();
    let quoted = |chars: &mut std::iter::Peekable<std::str::Chars>, quote: char| -> Option<String> {
        let mut name = String::new();
        loop {
            match chars.next()? {
                c if c == quote => return Some(name),
                '\\' => name.push(chars.next()?),
                c => name.push(c),
            }
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '.' => match chars.peek() {
                Some('*') => {
                    chars.next();
                    steps.push(Step::Any);
                }
                Some(&q @ ('"' | '\'')) => {
                    chars.next();
                    steps.push(Step::Member(quoted(&mut chars, q)?));
                }
                // `$.['a b']`, as Flink's documentation writes it.
                Some('[') => {}
                _ => {
                    let mut name = String::new();
                    while let Some(&c) = chars.peek() {
                        if c == '.' || c == '[' {
                            break;
                        }
                        name.push(c);
                        chars.next();
                    }
                    if name.is_empty() {
                        return None;
                    }
                    steps.push(Step::Member(name));
                }
            },
            '[' => {
                match chars.peek()? {
                    '*' => {
                        chars.next();
                        steps.push(Step::Any);
                    }
                    &q @ ('"' | '\'') => {
                        chars.next();
                        steps.push(Step::Member(quoted(&mut chars, q)?));
                    }
                    _ => {
                        let mut digits = String::new();
                        while let Some(&c) = chars.peek().filter(|c| c.is_ascii_digit() || c.is_whitespace()) {
                            digits.push(c);
                            chars.next();
                        }
                        steps.push(Step::Index(digits.trim().parse().ok()?));
                    }
                }
                if chars.next()? != ']' {
                    return None;
                }
            }
            c if c.is_whitespace() => {}
            _ => return None,
        }
    }
    Some(Path { strict, steps })
}

/// What `path` finds in `doc`: `Err` on a strict path that finds nothing.
fn evaluate<'a>(doc: &'a Value, path: &Path) -> std::result::Result<Vec<&'a Value>, ()> {
    let mut current: Vec<&'a Value> = vec![doc];
    for step in &path.steps {
        let mut next = Vec::new();
        for v in current {
            match (step, v) {
                (Step::Member(name), Value::Object(map)) => match map.get(name) {
                    Some(found) => next.push(found),
                    None if path.strict => return Err(()),
                    None => {}
                },
                (Step::Index(i), Value::Array(items)) => match items.get(*i) {
                    Some(found) => next.push(found),
                    None if path.strict => return Err(()),
                    None => {}
                },
                (Step::Any, Value::Array(items)) => next.extend(items.iter()),
                (Step::Any, Value::Object(map)) => next.extend(map.values()),
                _ if path.strict => return Err(()),
                _ => {}
            }
        }
        current = next;
    }
    Ok(current)
}

/// The one value a path gives: what it matched, or with a wildcard the array of everything
/// it matched (empty included), as Flink's.
fn single(path: &Path, found: Vec<&Value>) -> Option<Value> {
    if path.steps.contains(&Step::Any) {
        return Some(Value::Array(found.into_iter().cloned().collect()));
    }
    match found.as_slice() {
        [one] => Some((*one).clone()),
        _ => None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Value,
    Query,
    Exists,
}

/// `JSON_VALUE`, `JSON_QUERY` and `JSON_EXISTS`: (JSON text, path).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct JsonPathFunction {
    kind: Kind,
    signature: Signature,
}

impl JsonPathFunction {
    fn new(kind: Kind) -> Self {
        Self { kind, signature: Signature::exact(vec![DataType::Utf8, DataType::Utf8], Volatility::Immutable) }
    }

    pub fn value() -> Self {
        Self::new(Kind::Value)
    }

    pub fn query() -> Self {
        Self::new(Kind::Query)
    }

    pub fn exists() -> Self {
        Self::new(Kind::Exists)
    }
}

impl ScalarUDFImpl for JsonPathFunction {
    fn name(&self) -> &str {
        match self.kind {
            Kind::Value => "json_value",
            Kind::Query => "json_query",
            Kind::Exists => "json_exists",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(if self.kind == Kind::Exists { DataType::Boolean } else { DataType::Utf8 })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let docs = args.args[0].to_array(rows)?;
        let paths = args.args[1].to_array(rows)?;
        let (docs, paths) = (docs.as_string::<i32>(), paths.as_string::<i32>());
        // A constant path is parsed once.
        let constant = match &args.args[1] {
            ColumnarValue::Scalar(ScalarValue::Utf8(Some(p))) => match parse_path(p) {
                Some(path) => Some(path),
                None => return plan_err!("{}: '{p}' is not a JSON path (like '$.a.b[0]')", self.name().to_uppercase()),
            },
            _ => None,
        };
        // Per row: `None` for a NULL argument, `Err` for an error, else what the path found.
        let found = |i: usize| -> Option<std::result::Result<(Path, Vec<Value>), ()>> {
            if docs.is_null(i) || paths.is_null(i) {
                return None;
            }
            let Ok(doc) = serde_json::from_str::<Value>(docs.value(i)) else { return Some(Err(())) };
            let path = match &constant {
                Some(p) => p.clone(),
                None => match parse_path(paths.value(i)) {
                    Some(p) => p,
                    None => return Some(Err(())),
                },
            };
            Some(evaluate(&doc, &path).map(|values| (path, values.into_iter().cloned().collect())))
        };
        let out: Arc<dyn Array> = match self.kind {
            Kind::Exists => {
                let mut b = BooleanBuilder::with_capacity(rows);
                for i in 0..rows {
                    match found(i) {
                        None => b.append_null(),
                        // A member whose value is null does not count, as in Flink.
                        Some(r) => b.append_value(r.is_ok_and(|(_, values)| values.iter().any(|v| !v.is_null()))),
                    }
                }
                Arc::new(b.finish())
            }
            Kind::Value | Kind::Query => {
                let mut b = StringBuilder::with_capacity(rows, rows * 8);
                for i in 0..rows {
                    let value = match found(i) {
                        Some(Ok((path, values))) => single(&path, values.iter().collect()),
                        _ => None,
                    };
                    let text = match (self.kind, value) {
                        (Kind::Value, Some(Value::String(s))) => Some(s),
                        (Kind::Value, Some(v @ (Value::Number(_) | Value::Bool(_)))) => Some(v.to_string()),
                        (Kind::Query, Some(v @ (Value::Object(_) | Value::Array(_)))) => Some(v.to_string()),
                        _ => None,
                    };
                    b.append_option(text);
                }
                Arc::new(b.finish())
            }
        };
        Ok(if args.args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_))) {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

/// `JSON_STRING(value)`: the value as JSON text (a string quoted and escaped, a number or a
/// boolean as written); NULL for NULL.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct JsonString {
    signature: Signature,
}

impl Default for JsonString {
    fn default() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

impl ScalarUDFImpl for JsonString {
    fn name(&self) -> &str {
        "json_string"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        match args {
            [t] if t.is_numeric() || t.is_null() || matches!(t, DataType::Boolean | DataType::Utf8) => {
                Ok(vec![t.clone()])
            }
            [DataType::LargeUtf8 | DataType::Utf8View] => Ok(vec![DataType::Utf8]),
            [t] => plan_err!("JSON_STRING takes a string, a number or a boolean, not {t}"),
            _ => plan_err!("JSON_STRING takes one value"),
        }
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let input = args.args[0].to_array(rows)?;
        let quoted = *input.data_type() == DataType::Utf8;
        let text = cast(&input, &DataType::Utf8)?;
        let text = text.as_string::<i32>();
        let mut b = StringBuilder::with_capacity(rows, rows * 8);
        for i in 0..rows {
            if text.is_null(i) {
                b.append_null();
            } else if quoted {
                b.append_value(Value::String(text.value(i).to_string()).to_string());
            } else {
                b.append_value(text.value(i));
            }
        }
        let out: Arc<dyn Array> = Arc::new(b.finish());
        Ok(match &args.args[0] {
            ColumnarValue::Scalar(_) => ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?),
            ColumnarValue::Array(_) => ColumnarValue::Array(out),
        })
    }
}

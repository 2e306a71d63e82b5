//! The expressions of `DEFINE` and `MEASURES`, evaluated one row at a time against a
//! (partial) match: a condition decides whether the row being classified can be mapped to
//! its variable, given the rows mapped so far.
//!
//! They are evaluated row by row, not over batches, because each partial match gives them
//! other rows (`A.price` is the last row mapped to `A` in *this* branch). Values are
//! DataFusion's `ScalarValue`s, normalised when read from a row: every integer as `Int64`,
//! every floating or decimal number as `Float64`, so that arithmetic and comparison never
//! meet two integer widths.

use std::cmp::Ordering;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, Volatility};
use weir_core::{Result, WeirError};

use super::nfa::{Event, Node};

/// Which row of the match a column is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    /// `LAST(v.x, n)` (and plain `v.x`, `n` = 0): the `n`-th row from the end mapped to `v`
    /// (`None`: to any variable), counting the row being classified when it is `v`'s.
    Last { var: Option<u16>, offset: usize },
    /// `FIRST(v.x, n)`: the `n`-th row from the start mapped to `v`.
    First { var: Option<u16>, offset: usize },
    /// Inside an aggregate's argument: the row being aggregated.
    Row,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchAgg {
    Count,
    Sum,
    Avg,
    Min,
    Max,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Plus,
    Minus,
    Multiply,
    Divide,
    Modulo,
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
    And,
    Or,
}

#[derive(Debug, Clone)]
pub enum MatchExpr {
    Literal(ScalarValue),
    /// Column `slot` of the spec's kept columns, of the row `nav` names.
    Column {
        nav: Nav,
        slot: usize,
    },
    /// An aggregate over the rows mapped to `var` (`None`: all), `arg` evaluated on each
    /// (`None`: `COUNT(*)`).
    Aggregate {
        agg: MatchAgg,
        var: Option<u16>,
        arg: Option<Box<MatchExpr>>,
    },
    Binary {
        op: BinOp,
        left: Box<MatchExpr>,
        right: Box<MatchExpr>,
    },
    Not(Box<MatchExpr>),
    Negate(Box<MatchExpr>),
    IsNull {
        expr: Box<MatchExpr>,
        negated: bool,
    },
    /// `CASE WHEN c THEN v … ELSE e END`.
    Case {
        branches: Vec<(MatchExpr, MatchExpr)>,
        otherwise: Option<Box<MatchExpr>>,
    },
    Cast {
        expr: Box<MatchExpr>,
        to: DataType,
    },
    /// `MATCH_ROWTIME()`: the time of the last row.
    MatchRowtime,
    /// `MATCH_PROCTIME()`: the wall clock when the match is emitted (not deterministic).
    MatchProctime,
    /// Any other scalar function (`ABS`, `LOWER`, the program's), run by its own
    /// implementation on one row's values, cast to the types it was planned for.
    Function(Box<Call>),
}

/// A scalar function call as planned: the function, its arguments, their types after
/// DataFusion's coercion, its result's type.
#[derive(Clone)]
pub struct Call {
    pub udf: Arc<ScalarUDF>,
    pub args: Vec<MatchExpr>,
    pub arg_fields: Vec<FieldRef>,
    pub return_field: FieldRef,
    pub config: Arc<ConfigOptions>,
}

/// By name and arguments: state shapes and `EXPLAIN` compare it, and the function's own
/// fields are not part of what it computes.
impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call").field("name", &self.udf.name()).field("args", &self.args).finish()
    }
}

impl Call {
    fn eval(&self, values: Vec<ScalarValue>) -> Result<ScalarValue> {
        let args = values
            .into_iter()
            .zip(&self.arg_fields)
            .map(|(v, f)| {
                let typed = if v.is_null() { ScalarValue::try_from(f.data_type())? } else { v.cast_to(f.data_type())? };
                Ok(ColumnarValue::Scalar(typed))
            })
            .collect::<Result<Vec<_>>>()?;
        let out = self.udf.invoke_with_args(ScalarFunctionArgs {
            args,
            arg_fields: self.arg_fields.clone(),
            number_rows: 1,
            return_field: self.return_field.clone(),
            config_options: self.config.clone(),
        })?;
        Ok(normalise(match out {
            ColumnarValue::Scalar(v) => v,
            ColumnarValue::Array(a) => ScalarValue::try_from_array(&a, 0)?,
        }))
    }
}

/// What an expression reads: the rows mapped so far (newest first along `prev`), and the
/// row being classified with its would-be variable.
pub struct Scope<'a> {
    pub path: Option<&'a Node>,
    pub current: Option<(&'a Event, u16)>,
}

impl Scope<'_> {
    /// The rows mapped to `var` (all when `None`), newest first.
    fn rows(&self, var: Option<u16>) -> impl Iterator<Item = (&Event, u16)> + '_ {
        let current = self.current.filter(|(_, v)| var.is_none_or(|w| w == *v));
        let mut node = self.path;
        let older = std::iter::from_fn(move || {
            let n = node?;
            node = n.prev.as_deref();
            Some((n.event.as_ref(), n.var))
        })
        .filter(move |(_, v)| var.is_none_or(|w| w == *v));
        current.into_iter().chain(older)
    }

    fn row<'s>(&'s self, nav: Nav, at: Option<&'s Event>) -> Option<&'s Event> {
        match nav {
            Nav::Row => at,
            Nav::Last { var, offset } => self.rows(var).nth(offset).map(|(e, _)| e),
            Nav::First { var, offset } => {
                let count = self.rows(var).count();
                let back = count.checked_sub(offset + 1)?;
                self.rows(var).nth(back).map(|(e, _)| e)
            }
        }
    }
}

impl MatchExpr {
    /// Whether its value depends on when it is evaluated (`MATCH_PROCTIME()`).
    pub fn reads_clock(&self) -> bool {
        match self {
            MatchExpr::MatchProctime => true,
            MatchExpr::Function(c) => {
                c.udf.signature().volatility == Volatility::Volatile || c.args.iter().any(|a| a.reads_clock())
            }
            MatchExpr::Literal(_)
            | MatchExpr::Column { .. }
            | MatchExpr::MatchRowtime
            | MatchExpr::Aggregate { arg: None, .. } => false,
            MatchExpr::Aggregate { arg: Some(e), .. }
            | MatchExpr::Not(e)
            | MatchExpr::Negate(e)
            | MatchExpr::IsNull { expr: e, .. }
            | MatchExpr::Cast { expr: e, .. } => e.reads_clock(),
            MatchExpr::Binary { left, right, .. } => left.reads_clock() || right.reads_clock(),
            MatchExpr::Case { branches, otherwise } => {
                branches.iter().any(|(w, t)| w.reads_clock() || t.reads_clock())
                    || otherwise.as_ref().is_some_and(|o| o.reads_clock())
            }
        }
    }

    pub fn eval(&self, scope: &Scope<'_>) -> Result<ScalarValue> {
        self.eval_at(scope, None)
    }

    /// A condition: true only when it evaluates to TRUE (NULL and FALSE do not map the row).
    pub fn holds(&self, scope: &Scope<'_>) -> Result<bool> {
        Ok(matches!(self.eval(scope)?, ScalarValue::Boolean(Some(true))))
    }

    fn eval_at<'s>(&self, scope: &'s Scope<'_>, at: Option<&'s Event>) -> Result<ScalarValue> {
        Ok(match self {
            MatchExpr::Literal(v) => v.clone(),
            MatchExpr::Column { nav, slot } => match scope.row(*nav, at) {
                Some(e) => e.values.get(*slot).cloned().ok_or_else(|| WeirError::internal("MATCH_RECOGNIZE slot"))?,
                None => ScalarValue::Null,
            },
            MatchExpr::Aggregate { agg, var, arg } => {
                let mut values = Vec::new();
                for (row, _) in scope.rows(*var) {
                    match arg {
                        Some(a) => values.push(a.eval_at(scope, Some(row))?),
                        None => values.push(ScalarValue::Boolean(Some(true))),
                    }
                }
                aggregate(*agg, values)?
            }
            MatchExpr::Binary { op, left, right } => {
                let l = left.eval_at(scope, at)?;
                // AND and OR short-circuit as SQL's three-valued logic allows.
                match (op, &l) {
                    (BinOp::And, ScalarValue::Boolean(Some(false))) => return Ok(l),
                    (BinOp::Or, ScalarValue::Boolean(Some(true))) => return Ok(l),
                    _ => {}
                }
                binary(*op, l, right.eval_at(scope, at)?)?
            }
            MatchExpr::Not(e) => match e.eval_at(scope, at)? {
                ScalarValue::Boolean(b) => ScalarValue::Boolean(b.map(|b| !b)),
                v if v.is_null() => ScalarValue::Boolean(None),
                v => return Err(WeirError::user(format!("NOT of a value that is not a boolean: {v}"))),
            },
            MatchExpr::Negate(e) => match e.eval_at(scope, at)? {
                ScalarValue::Int64(v) => ScalarValue::Int64(v.map(|v| v.wrapping_neg())),
                ScalarValue::Float64(v) => ScalarValue::Float64(v.map(|v| -v)),
                v if v.is_null() => v,
                v => return Err(WeirError::user(format!("minus of a value that is not a number: {v}"))),
            },
            MatchExpr::IsNull { expr, negated } => {
                ScalarValue::Boolean(Some(expr.eval_at(scope, at)?.is_null() != *negated))
            }
            MatchExpr::Case { branches, otherwise } => {
                for (when, then) in branches {
                    if matches!(when.eval_at(scope, at)?, ScalarValue::Boolean(Some(true))) {
                        return then.eval_at(scope, at);
                    }
                }
                match otherwise {
                    Some(e) => e.eval_at(scope, at)?,
                    None => ScalarValue::Null,
                }
            }
            MatchExpr::Cast { expr, to } => normalise(expr.eval_at(scope, at)?.cast_to(to)?),
            MatchExpr::MatchRowtime => {
                ScalarValue::TimestampMillisecond(scope.rows(None).next().map(|(e, _)| e.time), None)
            }
            MatchExpr::Function(c) => {
                let values = c.args.iter().map(|a| a.eval_at(scope, at)).collect::<Result<Vec<_>>>()?;
                c.eval(values)?
            }
            MatchExpr::MatchProctime => ScalarValue::TimestampMillisecond(
                Some(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_millis() as i64)
                        .unwrap_or_default(),
                ),
                None,
            ),
        })
    }
}

/// A value as expressions see it: integers as `Int64`, other numbers as `Float64`.
pub fn normalise(v: ScalarValue) -> ScalarValue {
    use ScalarValue as S;
    match v {
        S::Int8(x) => S::Int64(x.map(i64::from)),
        S::Int16(x) => S::Int64(x.map(i64::from)),
        S::Int32(x) => S::Int64(x.map(i64::from)),
        S::UInt8(x) => S::Int64(x.map(i64::from)),
        S::UInt16(x) => S::Int64(x.map(i64::from)),
        S::UInt32(x) => S::Int64(x.map(i64::from)),
        S::UInt64(x) => S::Int64(x.map(|x| x as i64)),
        S::Float32(x) => S::Float64(x.map(f64::from)),
        S::Decimal128(x, _, s) => S::Float64(x.map(|x| x as f64 / 10f64.powi(i32::from(s)))),
        S::Utf8View(x) | S::LargeUtf8(x) => S::Utf8(x),
        S::Null => S::Null,
        other => other,
    }
}

fn float(v: &ScalarValue) -> Option<f64> {
    match v {
        ScalarValue::Int64(x) => x.map(|x| x as f64),
        ScalarValue::Float64(x) => *x,
        _ => None,
    }
}

fn binary(op: BinOp, l: ScalarValue, r: ScalarValue) -> Result<ScalarValue> {
    use ScalarValue as S;
    if matches!(op, BinOp::And | BinOp::Or) {
        let (a, b) = (truth(&l)?, truth(&r)?);
        return Ok(S::Boolean(match op {
            BinOp::And => match (a, b) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            },
            _ => match (a, b) {
                (Some(true), _) | (_, Some(true)) => Some(true),
                (Some(false), Some(false)) => Some(false),
                _ => None,
            },
        }));
    }
    let compare = matches!(op, BinOp::Eq | BinOp::NotEq | BinOp::Lt | BinOp::LtEq | BinOp::Gt | BinOp::GtEq);
    if l.is_null() || r.is_null() {
        return Ok(if compare { S::Boolean(None) } else { S::Null });
    }
    if compare {
        let ordering = match (&l, &r) {
            (S::Int64(Some(a)), S::Int64(Some(b))) => Some(a.cmp(b)),
            (S::Int64(_) | S::Float64(_), S::Int64(_) | S::Float64(_)) => {
                float(&l).zip(float(&r)).and_then(|(a, b)| a.partial_cmp(&b))
            }
            _ => l.partial_cmp(&r),
        };
        let Some(o) = ordering else {
            return Err(WeirError::user(format!("cannot compare {} with {}", l.data_type(), r.data_type())));
        };
        return Ok(S::Boolean(Some(match op {
            BinOp::Eq => o == Ordering::Equal,
            BinOp::NotEq => o != Ordering::Equal,
            BinOp::Lt => o == Ordering::Less,
            BinOp::LtEq => o != Ordering::Greater,
            BinOp::Gt => o == Ordering::Greater,
            _ => o != Ordering::Less,
        })));
    }
    Ok(match (&l, &r) {
        (S::Int64(Some(a)), S::Int64(Some(b))) => {
            let (a, b) = (*a, *b);
            S::Int64(match op {
                BinOp::Plus => Some(a.wrapping_add(b)),
                BinOp::Minus => Some(a.wrapping_sub(b)),
                BinOp::Multiply => Some(a.wrapping_mul(b)),
                BinOp::Divide if b == 0 => return Err(WeirError::user("division by zero in MATCH_RECOGNIZE")),
                BinOp::Divide => Some(a.wrapping_div(b)),
                BinOp::Modulo if b == 0 => return Err(WeirError::user("division by zero in MATCH_RECOGNIZE")),
                _ => Some(a.wrapping_rem(b)),
            })
        }
        _ => {
            let (Some(a), Some(b)) = (float(&l), float(&r)) else {
                return Err(WeirError::user(format!("arithmetic on {} and {}", l.data_type(), r.data_type())));
            };
            S::Float64(Some(match op {
                BinOp::Plus => a + b,
                BinOp::Minus => a - b,
                BinOp::Multiply => a * b,
                BinOp::Divide => a / b,
                _ => a % b,
            }))
        }
    })
}

fn truth(v: &ScalarValue) -> Result<Option<bool>> {
    match v {
        ScalarValue::Boolean(b) => Ok(*b),
        v if v.is_null() => Ok(None),
        v => Err(WeirError::user(format!("a condition that is not a boolean: {v}"))),
    }
}

/// An aggregate of values (NULLs skipped, as SQL's; `COUNT(*)` passes TRUEs).
fn aggregate(agg: MatchAgg, values: Vec<ScalarValue>) -> Result<ScalarValue> {
    let present: Vec<ScalarValue> = values.into_iter().filter(|v| !v.is_null()).collect();
    Ok(match agg {
        MatchAgg::Count => ScalarValue::Int64(Some(present.len() as i64)),
        MatchAgg::Sum | MatchAgg::Avg => {
            let n = present.len();
            let mut sum: Option<ScalarValue> = None;
            for v in present {
                sum = Some(match sum {
                    None => v,
                    Some(s) => binary(BinOp::Plus, s, v)?,
                });
            }
            match (agg, sum) {
                (_, None) => ScalarValue::Null,
                (MatchAgg::Sum, Some(s)) => s,
                (_, Some(s)) => match s {
                    // Flink's AVG of integers is an integer (rounded toward zero).
                    ScalarValue::Int64(Some(x)) => ScalarValue::Int64(Some(x / n as i64)),
                    s => binary(BinOp::Divide, s, ScalarValue::Float64(Some(n as f64)))?,
                },
            }
        }
        MatchAgg::Min | MatchAgg::Max => {
            let mut best: Option<ScalarValue> = None;
            for v in present {
                let better = match &best {
                    None => true,
                    Some(b) => {
                        let less = matches!(binary(BinOp::Lt, v.clone(), b.clone())?, ScalarValue::Boolean(Some(true)));
                        if agg == MatchAgg::Min {
                            less
                        } else {
                            !less && v != *b
                        }
                    }
                };
                if better {
                    best = Some(v);
                }
            }
            best.unwrap_or(ScalarValue::Null)
        }
    })
}

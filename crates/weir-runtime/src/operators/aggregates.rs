//! Aggregates that can take rows back: the accumulators of the group aggregate, their stored
//! form, and their results as Arrow columns.
//!
//! DataFusion's accumulators only add rows, so the group aggregate keeps its own, small set:
//! `COUNT`, `SUM` and `AVG` keep a signed count and sum (a retraction subtracts); `MIN` and
//! `MAX` keep the current extreme, and over an updating input a count per value beside it
//! (the operator's `extremes` table) to find the next extreme when the current one is taken
//! back. A `DISTINCT` aggregate counts each value per group (the `distinct` table) and
//! accumulates a value when its count becomes positive, takes it back when it falls to zero.
//! Values are summed in one of three lanes (i64, f64, i128 for decimals); MIN and MAX compare
//! values in Arrow's row format, so they work on every type that format has.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Decimal128Array, Float64Array, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::row::{RowConverter, SortField};
use weir_core::{Result, WeirError};

use super::moments::{squared, Moment};

/// Which aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggKind {
    Count,
    Sum,
    Avg,
    Min,
    Max,
    /// A deviation or variance ([`Moment`]).
    Moment(Moment),
    /// An aggregate of the values themselves, in arrival order ([`BagKind`]).
    Bag(BagKind),
}

/// Aggregates whose result is made of the values in the order they came: over an updating
/// input each group keeps its values (the `bag` table), and a retraction takes out the first
/// equal one, as Flink's `…WithRetract` functions do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BagKind {
    FirstValue,
    LastValue,
    /// `LISTAGG(x [, separator])`, the separator in [`AggregateDef::separator`].
    ListAgg,
    /// `JSON_ARRAYAGG(x [NULL | ABSENT ON NULL])`: the argument is the value's JSON text.
    JsonArray {
        absent_on_null: bool,
    },
    /// `JSON_OBJECTAGG(KEY k VALUE v …)`: the argument is the key, [`AggregateDef::second`]
    /// the value's JSON text.
    JsonObject {
        absent_on_null: bool,
    },
}

impl AggKind {
    /// The aggregate a function name (lower case) is, for those of one plain argument:
    /// `COUNT`, `SUM`, `AVG`, `MIN`, `MAX`, the deviations and variances, `FIRST_VALUE` and
    /// `LAST_VALUE`.
    pub fn of_name(name: &str) -> Option<AggKind> {
        Some(match name {
            "count" => AggKind::Count,
            "sum" => AggKind::Sum,
            "avg" | "mean" => AggKind::Avg,
            "min" => AggKind::Min,
            "max" => AggKind::Max,
            "first_value" => AggKind::Bag(BagKind::FirstValue),
            "last_value" => AggKind::Bag(BagKind::LastValue),
            other => AggKind::Moment(Moment::of_name(other)?),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            AggKind::Count => "count",
            AggKind::Sum => "sum",
            AggKind::Avg => "avg",
            AggKind::Min => "min",
            AggKind::Max => "max",
            AggKind::Moment(m) => m.name(),
            AggKind::Bag(BagKind::FirstValue) => "first_value",
            AggKind::Bag(BagKind::LastValue) => "last_value",
            AggKind::Bag(BagKind::ListAgg) => "listagg",
            AggKind::Bag(BagKind::JsonArray { .. }) => "json_arrayagg",
            AggKind::Bag(BagKind::JsonObject { .. }) => "json_objectagg",
        }
    }
}

/// One aggregate of a group aggregate, over the columns its input stage computed.
#[derive(Debug, Clone)]
pub struct AggregateDef {
    pub kind: AggKind,
    /// The input column holding the argument (`None`: `COUNT(*)`).
    pub arg: Option<usize>,
    /// The argument's type (for `COUNT(*)`, none is read).
    pub arg_type: DataType,
    /// The input column holding the `FILTER (WHERE …)` condition.
    pub filter: Option<usize>,
    pub distinct: bool,
    /// The result's type, as planned.
    pub output: DataType,
    /// A second argument column (`JSON_OBJECTAGG`'s value).
    pub second: Option<usize>,
    /// `LISTAGG`'s separator.
    pub separator: String,
}

impl AggregateDef {
    /// An aggregate of one argument (or none), without filter, distinctness or extras.
    pub fn new(kind: AggKind, arg: Option<usize>, arg_type: DataType, output: DataType) -> Self {
        Self { kind, arg, arg_type, filter: None, distinct: false, output, second: None, separator: ",".into() }
    }
}

/// How values of an argument are summed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Lane {
    Int,
    Float,
    /// Decimals with this scale, summed as i128.
    Decimal(i8),
}

impl Lane {
    pub fn of(data_type: &DataType) -> Option<Lane> {
        Some(match data_type {
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64 => Lane::Int,
            DataType::Float16 | DataType::Float32 | DataType::Float64 => Lane::Float,
            DataType::Decimal128(_, s) => Lane::Decimal(*s),
            _ => return None,
        })
    }
}

/// A number in its lane.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    I(i64),
    F(f64),
    D(i128),
}

impl Num {
    pub(super) fn zero(lane: Lane) -> Num {
        match lane {
            Lane::Int => Num::I(0),
            Lane::Float => Num::F(0.0),
            Lane::Decimal(_) => Num::D(0),
        }
    }

    pub(super) fn add(&mut self, other: Num, sign: i64) {
        match (self, other) {
            (Num::I(a), Num::I(b)) => *a = a.wrapping_add(b.wrapping_mul(sign)),
            (Num::F(a), Num::F(b)) => *a += b * sign as f64,
            (Num::D(a), Num::D(b)) => *a = a.wrapping_add(b.wrapping_mul(sign as i128)),
            _ => {}
        }
    }
}

/// One aggregate's accumulator for one group.
#[derive(Debug, Clone, PartialEq)]
pub enum Acc {
    Count(i64),
    /// Values counted (signed) and their sum: `SUM` and `AVG`.
    Sum(i64, Num),
    /// The current minimum or maximum, in row format.
    Extreme(Option<Vec<u8>>),
    /// Values counted (signed), their sum and their sum of squares: the deviations and
    /// variances.
    Moments(i64, Num, Num),
    /// A [`BagKind`]'s result: the value in row format (FIRST_VALUE, LAST_VALUE) or the text.
    Bag(Option<Vec<u8>>),
}

/// A group's state: rows in the group (signed; the group is gone at zero), the watermark
/// when it was last updated (for state TTL; `i64::MIN` before the first watermark), and one
/// accumulator per aggregate.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupState {
    pub rows: i64,
    pub updated: i64,
    pub accs: Vec<Acc>,
}

/// An argument column read in its lane.
pub enum Values {
    I(Int64Array),
    F(Float64Array),
    D(Decimal128Array),
}

impl Values {
    pub fn read(column: &ArrayRef, lane: Lane) -> Result<Values> {
        Ok(match lane {
            Lane::Int => Values::I(downcast::<Int64Array>(&cast(column, &DataType::Int64)?)?),
            Lane::Float => Values::F(downcast::<Float64Array>(&cast(column, &DataType::Float64)?)?),
            Lane::Decimal(_) => Values::D(downcast::<Decimal128Array>(column)?),
        })
    }

    pub fn valid(&self, i: usize) -> bool {
        match self {
            Values::I(a) => a.is_valid(i),
            Values::F(a) => a.is_valid(i),
            Values::D(a) => a.is_valid(i),
        }
    }

    pub fn get(&self, i: usize) -> Num {
        match self {
            Values::I(a) => Num::I(a.value(i)),
            Values::F(a) => Num::F(a.value(i)),
            Values::D(a) => Num::D(a.value(i)),
        }
    }
}

fn downcast<T: Clone + 'static>(array: &ArrayRef) -> Result<T> {
    array
        .as_any()
        .downcast_ref::<T>()
        .cloned()
        .ok_or_else(|| WeirError::internal("aggregate argument of the wrong type"))
}

/// What the group aggregate knows of one aggregate besides its definition.
pub struct Prepared {
    pub def: AggregateDef,
    pub lane: Option<Lane>,
    /// Row format of the argument (MIN, MAX and DISTINCT compare and store values in it).
    pub rows: Option<RowConverter>,
}

impl Prepared {
    pub fn new(def: AggregateDef) -> Result<Self> {
        let lane = match def.kind {
            AggKind::Moment(_) => Moment::lane(&def.arg_type),
            _ => Lane::of(&def.arg_type),
        };
        if matches!(def.kind, AggKind::Sum | AggKind::Avg | AggKind::Moment(_)) && lane.is_none() {
            return Err(WeirError::not_supported(format!("{}() of {}", def.kind.name(), def.arg_type)));
        }
        let rows = match (def.arg, def.kind, def.distinct) {
            (Some(_), AggKind::Min | AggKind::Max | AggKind::Bag(BagKind::FirstValue | BagKind::LastValue), _)
            | (Some(_), _, true) => Some(RowConverter::new(vec![SortField::new(def.arg_type.clone())])?),
            _ => None,
        };
        Ok(Self { def, lane, rows })
    }

    pub fn empty(&self) -> Acc {
        match (self.def.kind, self.lane) {
            (AggKind::Count, _) => Acc::Count(0),
            (AggKind::Sum | AggKind::Avg, Some(lane)) => Acc::Sum(0, Num::zero(lane)),
            (AggKind::Moment(_), Some(lane)) => Acc::Moments(0, Num::zero(lane), Num::zero(lane)),
            (AggKind::Bag(_), _) => Acc::Bag(None),
            _ => Acc::Extreme(None),
        }
    }

    /// Add `value` (of row `i` of `values`) `sign` times (+1 or -1).
    pub fn add(&self, acc: &mut Acc, values: Option<&Values>, i: usize, sign: i64) {
        match acc {
            Acc::Count(n) => *n += sign,
            Acc::Sum(n, sum) => {
                *n += sign;
                if let Some(v) = values {
                    sum.add(v.get(i), sign);
                }
            }
            Acc::Moments(n, sum, squares) => {
                *n += sign;
                if let Some(v) = values {
                    sum.add(v.get(i), sign);
                    squares.add(squared(v.get(i)), sign);
                }
            }
            Acc::Extreme(_) | Acc::Bag(_) => {}
        }
    }

    /// Keep `candidate` if it beats the current extreme.
    pub fn offer(&self, acc: &mut Acc, candidate: &[u8]) {
        if let Acc::Extreme(current) = acc {
            let better = match current {
                None => true,
                Some(c) => match self.def.kind {
                    AggKind::Min => candidate < c.as_slice(),
                    _ => candidate > c.as_slice(),
                },
            };
            if better {
                *current = Some(candidate.to_vec());
            }
        }
    }

    /// The result column for the accumulators given.
    pub fn results(&self, accs: &[&Acc]) -> Result<ArrayRef> {
        let column: ArrayRef = match (self.def.kind, self.lane) {
            (AggKind::Count, _) => {
                Arc::new(accs.iter().map(|a| Some(if let Acc::Count(n) = a { *n } else { 0 })).collect::<Int64Array>())
            }
            (AggKind::Sum, Some(lane)) => sums(accs, lane)?,
            (AggKind::Avg, Some(lane)) => {
                let out_scale = match &self.def.output {
                    DataType::Decimal128(_, s) => *s,
                    _ => 0,
                };
                averages(accs, lane, out_scale)?
            }
            (AggKind::Moment(m), Some(_)) => {
                let values = accs.iter().map(|a| match a {
                    Acc::Moments(n, sum, squares) => m.value(*n, *sum, *squares),
                    _ => None,
                });
                match self.lane {
                    Some(Lane::Int) => Arc::new(
                        values.map(|v| v.map(|v| if let Num::I(v) = v { v } else { 0 })).collect::<Int64Array>(),
                    ),
                    _ => Arc::new(
                        values.map(|v| v.map(|v| if let Num::F(v) = v { v } else { 0.0 })).collect::<Float64Array>(),
                    ),
                }
            }
            (AggKind::Bag(kind @ (BagKind::ListAgg | BagKind::JsonArray { .. } | BagKind::JsonObject { .. })), _) => {
                let empty = match kind {
                    BagKind::JsonArray { .. } => Some("[]"),
                    BagKind::JsonObject { .. } => Some("{}"),
                    _ => None,
                };
                Arc::new(
                    accs.iter()
                        .map(|a| match a {
                            Acc::Bag(Some(text)) => std::str::from_utf8(text).ok(),
                            _ => empty,
                        })
                        .collect::<datafusion::arrow::array::StringArray>(),
                )
            }
            _ => {
                let converter = self.rows.as_ref().ok_or_else(|| WeirError::internal("MIN/MAX without row format"))?;
                let null =
                    converter.convert_columns(&[datafusion::arrow::array::new_null_array(&self.def.arg_type, 1)])?;
                let null = null.row(0);
                let parser = converter.parser();
                let rows = accs.iter().map(|a| match a {
                    Acc::Extreme(Some(v)) | Acc::Bag(Some(v)) => parser.parse(v),
                    _ => null,
                });
                converter.convert_rows(rows)?.remove(0)
            }
        };
        Ok(if column.data_type() == &self.def.output { column } else { cast(&column, &self.def.output)? })
    }
}

/// SUM: NULL for a group with no values counted.
fn sums(accs: &[&Acc], lane: Lane) -> Result<ArrayRef> {
    let value = |a: &&Acc| match a {
        Acc::Sum(n, sum) if *n > 0 => Some(*sum),
        _ => None,
    };
    Ok(match lane {
        Lane::Int => Arc::new(
            accs.iter().map(|a| value(a).map(|v| if let Num::I(v) = v { v } else { 0 })).collect::<Int64Array>(),
        ),
        Lane::Float => Arc::new(
            accs.iter().map(|a| value(a).map(|v| if let Num::F(v) = v { v } else { 0.0 })).collect::<Float64Array>(),
        ),
        Lane::Decimal(scale) => Arc::new(
            accs.iter()
                .map(|a| value(a).map(|v| if let Num::D(v) = v { v } else { 0 }))
                .collect::<Decimal128Array>()
                .with_precision_and_scale(38, scale)?,
        ),
    })
}

/// AVG: the sum over the count (a decimal's scale raised to the output's first, as
/// DataFusion does); NULL for a group with no values counted.
fn averages(accs: &[&Acc], lane: Lane, out_scale: i8) -> Result<ArrayRef> {
    Ok(match lane {
        Lane::Decimal(scale) => {
            let factor = 10i128.pow(out_scale.saturating_sub(scale).max(0) as u32);
            Arc::new(
                accs.iter()
                    .map(|a| match a {
                        Acc::Sum(n, Num::D(s)) if *n > 0 => Some(s.wrapping_mul(factor) / *n as i128),
                        _ => None,
                    })
                    .collect::<Decimal128Array>()
                    .with_precision_and_scale(38, out_scale)?,
            )
        }
        _ => Arc::new(
            accs.iter()
                .map(|a| match a {
                    Acc::Sum(n, Num::I(s)) if *n > 0 => Some(*s as f64 / *n as f64),
                    Acc::Sum(n, Num::F(s)) if *n > 0 => Some(*s / *n as f64),
                    _ => None,
                })
                .collect::<Float64Array>(),
        ),
    })
}

/// A group's state as stored: the row count, then each accumulator.
pub fn encode(state: &GroupState, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&state.rows.to_le_bytes());
    out.extend_from_slice(&state.updated.to_le_bytes());
    for acc in &state.accs {
        match acc {
            Acc::Count(n) => out.extend_from_slice(&n.to_le_bytes()),
            Acc::Sum(n, sum) => {
                out.extend_from_slice(&n.to_le_bytes());
                match sum {
                    Num::I(v) => out.extend_from_slice(&v.to_le_bytes()),
                    Num::F(v) => out.extend_from_slice(&v.to_le_bytes()),
                    Num::D(v) => out.extend_from_slice(&v.to_le_bytes()),
                }
            }
            Acc::Moments(n, sum, squares) => {
                out.extend_from_slice(&n.to_le_bytes());
                for v in [sum, squares] {
                    match v {
                        Num::I(v) => out.extend_from_slice(&v.to_le_bytes()),
                        Num::F(v) => out.extend_from_slice(&v.to_le_bytes()),
                        Num::D(v) => out.extend_from_slice(&v.to_le_bytes()),
                    }
                }
            }
            Acc::Extreme(None) | Acc::Bag(None) => out.extend_from_slice(&u32::MAX.to_le_bytes()),
            Acc::Extreme(Some(v)) | Acc::Bag(Some(v)) => {
                out.extend_from_slice(&(v.len() as u32).to_le_bytes());
                out.extend_from_slice(v);
            }
        }
    }
}

/// [`encode`] undone, the accumulators shaped like `empty`'s.
pub fn decode(bytes: &[u8], empty: &[Acc]) -> Result<GroupState> {
    let damaged = || WeirError::internal("group aggregate state in a checkpoint is damaged");
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8]> {
        let piece = bytes.get(at..at + n).ok_or_else(damaged)?;
        at += n;
        Ok(piece)
    };
    let i64_of = |b: &[u8]| -> Result<i64> { Ok(i64::from_le_bytes(b.try_into().map_err(|_| damaged())?)) };
    let rows = i64_of(take(8)?)?;
    let updated = i64_of(take(8)?)?;
    let mut accs = Vec::with_capacity(empty.len());
    for shape in empty {
        accs.push(match shape {
            Acc::Count(_) => Acc::Count(i64_of(take(8)?)?),
            Acc::Sum(_, zero) => {
                let n = i64_of(take(8)?)?;
                let sum = match zero {
                    Num::I(_) => Num::I(i64_of(take(8)?)?),
                    Num::F(_) => Num::F(f64::from_le_bytes(take(8)?.try_into().map_err(|_| damaged())?)),
                    Num::D(_) => Num::D(i128::from_le_bytes(take(16)?.try_into().map_err(|_| damaged())?)),
                };
                Acc::Sum(n, sum)
            }
            Acc::Moments(_, zero, _) => {
                let n = i64_of(take(8)?)?;
                let mut num = || -> Result<Num> {
                    Ok(match zero {
                        Num::I(_) => Num::I(i64_of(take(8)?)?),
                        Num::F(_) => Num::F(f64::from_le_bytes(take(8)?.try_into().map_err(|_| damaged())?)),
                        Num::D(_) => Num::D(i128::from_le_bytes(take(16)?.try_into().map_err(|_| damaged())?)),
                    })
                };
                let sum = num()?;
                Acc::Moments(n, sum, num()?)
            }
            Acc::Extreme(_) | Acc::Bag(_) => {
                let len = u32::from_le_bytes(take(4)?.try_into().map_err(|_| damaged())?);
                let value = if len == u32::MAX { None } else { Some(take(len as usize)?.to_vec()) };
                match shape {
                    Acc::Bag(_) => Acc::Bag(value),
                    _ => Acc::Extreme(value),
                }
            }
        });
    }
    Ok(GroupState { rows, updated, accs })
}

//! Flink's time functions that DataFusion lacks, with Flink's argument rules and result types:
//!
//! - `TO_TIMESTAMP_LTZ(epoch, precision)`: an epoch number in seconds (precision 0) or
//!   milliseconds (precision 3) as a `TIMESTAMP_LTZ(3)`; the usual way Flink's Kafka DDL turns
//!   an `event_ms` field into its event time (`ts AS TO_TIMESTAMP_LTZ(event_ms, 3)`).
//! - `TIMESTAMPDIFF(unit, t1, t2)` and `TIMESTAMPADD(unit, n, t)`, months by the calendar as
//!   Calcite counts them (the parser's rewrite passes the unit keyword as a string).
//! - `CONVERT_TZ(text, from, to)`: a `yyyy-MM-dd HH:mm:ss` text moved between time zones.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Int64Array, TimestampMillisecondArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type, TimeUnit};
use datafusion::common::{plan_err, ScalarValue};
use datafusion::error::Result;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility};

/// `TIMESTAMP_LTZ(3)` as Weir stores it: milliseconds since the epoch, in UTC.
fn timestamp_ltz_3() -> DataType {
    DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))
}

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ToTimestampLtz {
    signature: Signature,
}

impl Default for ToTimestampLtz {
    fn default() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

impl ScalarUDFImpl for ToTimestampLtz {
    fn name(&self) -> &str {
        "to_timestamp_ltz"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        let numeric = |t: &DataType| t.is_numeric() || t.is_null();
        match args {
            [epoch] | [epoch, _] if !numeric(epoch) => {
                plan_err!("TO_TIMESTAMP_LTZ takes an epoch number (seconds or milliseconds), not {epoch}")
            }
            [_] => Ok(vec![DataType::Int64]),
            [_, precision] if precision.is_integer() || precision.is_null() => {
                Ok(vec![DataType::Int64, DataType::Int64])
            }
            [_, precision] => plan_err!("TO_TIMESTAMP_LTZ's precision is 0 or 3, not a {precision}"),
            _ => plan_err!("TO_TIMESTAMP_LTZ takes (epoch) or (epoch, precision), not {} arguments", args.len()),
        }
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(timestamp_ltz_3())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        // Flink's default precision is 3 (milliseconds).
        let precision = match args.args.get(1) {
            None => Some(3),
            Some(ColumnarValue::Scalar(ScalarValue::Int64(p))) => *p,
            Some(_) => return plan_err!("TO_TIMESTAMP_LTZ's precision must be a constant, 0 or 3"),
        };
        let scale = match precision {
            None => None,
            Some(0) => Some(1000),
            Some(3) => Some(1),
            Some(p) => return plan_err!("TO_TIMESTAMP_LTZ's precision is 0 (seconds) or 3 (milliseconds), not {p}"),
        };
        let rows = args.number_rows;
        let epoch = args.args[0].to_array(rows)?;
        let millis: ArrayRef = match scale {
            None => Arc::new(TimestampMillisecondArray::new_null(rows)),
            Some(1) => epoch,
            Some(scale) => {
                let Some(epoch) = epoch.as_any().downcast_ref::<Int64Array>() else {
                    return plan_err!("TO_TIMESTAMP_LTZ: the epoch was not coerced to BIGINT");
                };
                // An overflow is a NULL, not a wrapped instant.
                Arc::new(epoch.unary_opt::<_, Int64Type>(|v| v.checked_mul(scale)))
            }
        };
        let out = cast(&cast(&millis, &DataType::Timestamp(TimeUnit::Millisecond, None))?, &timestamp_ltz_3())?;
        scalar_or_array(&args.args, out)
    }
}

/// The units of `TIMESTAMPDIFF` and `TIMESTAMPADD`, as Flink (Calcite) reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    /// A fixed number of milliseconds.
    Millis(i64),
    /// A number of months.
    Months(i64),
}

fn unit(name: &str) -> Option<Unit> {
    let name = name.to_ascii_uppercase();
    let name = name.strip_prefix("SQL_TSI_").unwrap_or(&name);
    Some(match name {
        "MICROSECOND" | "FRAC_SECOND" => return None,
        "SECOND" => Unit::Millis(1_000),
        "MINUTE" => Unit::Millis(60_000),
        "HOUR" => Unit::Millis(3_600_000),
        "DAY" => Unit::Millis(86_400_000),
        "WEEK" => Unit::Millis(7 * 86_400_000),
        "MONTH" => Unit::Months(1),
        "QUARTER" => Unit::Months(3),
        "YEAR" => Unit::Months(12),
        _ => return None,
    })
}

const UNITS: &str = "SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, QUARTER or YEAR";

/// The unit argument: a constant string (the rewrite of `TIMESTAMPDIFF(DAY, …)` passes `'DAY'`).
fn unit_arg(function: &str, arg: &ColumnarValue) -> Result<Unit> {
    match arg {
        ColumnarValue::Scalar(ScalarValue::Utf8(Some(name))) => match unit(name) {
            Some(u) => Ok(u),
            None => plan_err!("{function}: the unit is {UNITS}, not {name}"),
        },
        _ => plan_err!("{function}: the unit is a keyword ({UNITS})"),
    }
}

fn millis_column(arg: &ColumnarValue, rows: usize) -> Result<TimestampMillisecondArray> {
    let array = cast(&arg.to_array(rows)?, &DataType::Timestamp(TimeUnit::Millisecond, None))?;
    Ok(array
        .as_any()
        .downcast_ref::<TimestampMillisecondArray>()
        .cloned()
        .unwrap_or_else(|| TimestampMillisecondArray::new_null(rows)))
}

/// A timestamp type (or a date, read as its midnight) as milliseconds, for coercion.
fn coerce_temporal(function: &str, t: &DataType) -> Result<DataType> {
    match t {
        DataType::Timestamp(..) | DataType::Date32 | DataType::Date64 | DataType::Null => {
            Ok(DataType::Timestamp(TimeUnit::Millisecond, None))
        }
        other => plan_err!("{function} takes timestamps or dates, not {other}"),
    }
}

/// Days since the epoch as a civil date, and back, in the proleptic Gregorian calendar.
fn date_of(days: i64) -> Option<chrono::NaiveDate> {
    chrono::NaiveDate::from_ymd_opt(1970, 1, 1)?.checked_add_signed(chrono::TimeDelta::try_days(days)?)
}

fn days_of(date: chrono::NaiveDate) -> Option<i64> {
    Some(date.signed_duration_since(chrono::NaiveDate::from_ymd_opt(1970, 1, 1)?).num_days())
}

/// `date` plus `months`, the day clamped to the month's last (Jan 31 + 1 month = Feb 28).
fn add_months(days: i64, months: i64) -> Option<i64> {
    let date = date_of(days)?;
    let shifted = if months >= 0 {
        date.checked_add_months(chrono::Months::new(u32::try_from(months).ok()?))?
    } else {
        date.checked_sub_months(chrono::Months::new(u32::try_from(-months).ok()?))?
    };
    days_of(shifted)
}

/// Whole months from day `d1` to day `d0`, as Calcite's `subtractMonths(int, int)`.
fn months_between_days(d0: i64, d1: i64) -> Option<i64> {
    if d0 < d1 {
        return months_between_days(d1, d0).map(|m| -m);
    }
    // No month has more than 31 days: the estimate is never above the answer.
    let mut m = (d0 - d1) / 31;
    loop {
        if add_months(d1, m)? >= d0 || add_months(d1, m + 1)? > d0 {
            return Some(m);
        }
        m += 1;
    }
}

/// Whole months from `t1` to `t0` (milliseconds), as Calcite's `subtractMonths(long, long)`:
/// the days' difference, one less when the time of day has not come round yet.
fn months_between(t0: i64, t1: i64) -> Option<i64> {
    const DAY: i64 = 86_400_000;
    let (d0, ms0) = (t0.div_euclid(DAY), t0.rem_euclid(DAY));
    let (d1, ms1) = (t1.div_euclid(DAY), t1.rem_euclid(DAY));
    let mut x = months_between_days(d0, d1)?;
    if add_months(d1, x)? == d0 && ms0 < ms1 {
        x -= 1;
    }
    Some(x)
}

/// `TIMESTAMPDIFF(unit, t1, t2)`: the signed number of whole units from `t1` to `t2`, as an
/// `INT`, as Flink computes it (truncated toward zero; months by the calendar).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TimestampDiff {
    signature: Signature,
}

impl Default for TimestampDiff {
    fn default() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

/// The name the rewrite of `TIMESTAMPDIFF(UNIT, a, b)` calls, with the unit as a string.
pub const TIMESTAMPDIFF: &str = "__weir_timestampdiff";

impl ScalarUDFImpl for TimestampDiff {
    fn name(&self) -> &str {
        TIMESTAMPDIFF
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        match args {
            [_, a, b] => {
                Ok(vec![DataType::Utf8, coerce_temporal("TIMESTAMPDIFF", a)?, coerce_temporal("TIMESTAMPDIFF", b)?])
            }
            _ => plan_err!("TIMESTAMPDIFF takes (unit, timestamp1, timestamp2)"),
        }
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int32)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let unit = unit_arg("TIMESTAMPDIFF", &args.args[0])?;
        let rows = args.number_rows;
        let (a, b) = (millis_column(&args.args[1], rows)?, millis_column(&args.args[2], rows)?);
        let diff = |t1: i64, t2: i64| -> Option<i32> {
            let n = match unit {
                Unit::Millis(ms) => t2.checked_sub(t1)? / ms,
                Unit::Months(months) => months_between(t2, t1)? / months,
            };
            i32::try_from(n).ok()
        };
        let out: datafusion::arrow::array::Int32Array = a
            .iter()
            .zip(b.iter())
            .map(|(t1, t2)| match (t1, t2) {
                (Some(t1), Some(t2)) => diff(t1, t2),
                _ => None,
            })
            .collect();
        scalar_or_array(&args.args, Arc::new(out))
    }
}

/// `TIMESTAMPADD(unit, n, t)`: `t` plus `n` units, months by the calendar (the day clamped
/// to the month's last), of `t`'s type.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TimestampAdd {
    signature: Signature,
}

impl Default for TimestampAdd {
    fn default() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

/// The name the rewrite of `TIMESTAMPADD(UNIT, n, t)` calls, with the unit as a string.
pub const TIMESTAMPADD: &str = "__weir_timestampadd";

impl ScalarUDFImpl for TimestampAdd {
    fn name(&self) -> &str {
        TIMESTAMPADD
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        match args {
            [_, n, t] if n.is_integer() || n.is_null() => {
                Ok(vec![DataType::Utf8, DataType::Int64, coerce_temporal("TIMESTAMPADD", t)?])
            }
            [_, n, _] => plan_err!("TIMESTAMPADD adds a whole number of units, not a {n}"),
            _ => plan_err!("TIMESTAMPADD takes (unit, count, timestamp)"),
        }
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Timestamp(TimeUnit::Millisecond, None))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let unit = unit_arg("TIMESTAMPADD", &args.args[0])?;
        let rows = args.number_rows;
        let counts = args.args[1].to_array(rows)?;
        let Some(counts) = counts.as_any().downcast_ref::<Int64Array>() else {
            return plan_err!("TIMESTAMPADD: the count was not coerced to BIGINT");
        };
        let times = millis_column(&args.args[2], rows)?;
        const DAY: i64 = 86_400_000;
        let add = |n: i64, t: i64| -> Option<i64> {
            match unit {
                Unit::Millis(ms) => t.checked_add(n.checked_mul(ms)?),
                Unit::Months(months) => {
                    let (d, ms) = (t.div_euclid(DAY), t.rem_euclid(DAY));
                    add_months(d, n.checked_mul(months)?)?.checked_mul(DAY)?.checked_add(ms)
                }
            }
        };
        let out: TimestampMillisecondArray = counts
            .iter()
            .zip(times.iter())
            .map(|(n, t)| match (n, t) {
                (Some(n), Some(t)) => add(n, t),
                _ => None,
            })
            .collect();
        scalar_or_array(&args.args, Arc::new(out))
    }
}

/// A scalar when every argument was one (a constant folds to a constant), else the array.
pub(crate) fn scalar_or_array(args: &[ColumnarValue], out: ArrayRef) -> Result<ColumnarValue> {
    Ok(if args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_))) {
        ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
    } else {
        ColumnarValue::Array(out)
    })
}

/// A zone as Java's `ZoneId` names them: a region (`Europe/Berlin`), `UTC`/`GMT`/`Z`, or a
/// fixed offset (`GMT+01:00`, `UTC-5`, `+08:00`).
fn zone(name: &str) -> Option<Zone> {
    if let Ok(tz) = name.parse::<chrono_tz::Tz>() {
        return Some(Zone::Named(tz));
    }
    let offset = name.strip_prefix("GMT").or_else(|| name.strip_prefix("UTC")).or_else(|| name.strip_prefix("UT"));
    let offset = offset.unwrap_or(name);
    if offset.is_empty() || offset == "Z" {
        return chrono::FixedOffset::east_opt(0).map(Zone::Fixed);
    }
    let (sign, rest) = match offset.as_bytes().first()? {
        b'+' => (1, &offset[1..]),
        b'-' => (-1, &offset[1..]),
        _ => return None,
    };
    let (hours, minutes) = match rest.split_once(':') {
        Some((h, m)) => (h.parse::<i32>().ok()?, m.parse::<i32>().ok()?),
        None if rest.len() <= 2 => (rest.parse::<i32>().ok()?, 0),
        None if rest.len() == 4 => (rest[..2].parse::<i32>().ok()?, rest[2..].parse::<i32>().ok()?),
        None => return None,
    };
    if hours > 18 || minutes > 59 {
        return None;
    }
    chrono::FixedOffset::east_opt(sign * (hours * 3600 + minutes * 60)).map(Zone::Fixed)
}

enum Zone {
    Named(chrono_tz::Tz),
    Fixed(chrono::FixedOffset),
}

impl Zone {
    /// The instant of a wall-clock time here. An hour that happens twice (autumn) is read in
    /// standard time, the later instant; one skipped (spring) with the offset from before
    /// the jump, as Java's lenient calendar does.
    fn instant(&self, local: chrono::NaiveDateTime) -> Option<chrono::NaiveDateTime> {
        use chrono::{LocalResult, Offset, TimeZone};
        let offset = |tz: &chrono_tz::Tz| match tz.offset_from_local_datetime(&local) {
            LocalResult::Single(o) => Some(o.fix()),
            LocalResult::Ambiguous(a, b) => {
                let (a, b) = (a.fix(), b.fix());
                Some(if a.local_minus_utc() < b.local_minus_utc() { a } else { b })
            }
            LocalResult::None => {
                tz.offset_from_local_datetime(&(local - chrono::TimeDelta::hours(3))).earliest().map(|o| o.fix())
            }
        };
        let offset = match self {
            Zone::Named(tz) => offset(tz)?,
            Zone::Fixed(o) => *o,
        };
        Some(local - chrono::TimeDelta::seconds(offset.local_minus_utc().into()))
    }

    fn local(&self, utc: chrono::NaiveDateTime) -> chrono::NaiveDateTime {
        use chrono::{Offset, TimeZone};
        let offset = match self {
            Zone::Named(tz) => tz.offset_from_utc_datetime(&utc).fix(),
            Zone::Fixed(o) => *o,
        };
        utc + chrono::TimeDelta::seconds(offset.local_minus_utc().into())
    }
}

/// `CONVERT_TZ(text, from, to)`: a `yyyy-MM-dd HH:mm:ss` wall-clock time in zone `from` as
/// the wall-clock time in zone `to`, in the same format. A text that is not such a time is
/// NULL; an unknown zone is an error that names it.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ConvertTz {
    signature: Signature,
}

impl Default for ConvertTz {
    fn default() -> Self {
        Self { signature: Signature::exact(vec![DataType::Utf8; 3], Volatility::Immutable) }
    }
}

impl ScalarUDFImpl for ConvertTz {
    fn name(&self) -> &str {
        "convert_tz"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        use datafusion::arrow::array::{AsArray, StringBuilder};
        const FORMAT: &str = "%Y-%m-%d %H:%M:%S";
        let rows = args.number_rows;
        let arrays = args.args.iter().map(|a| a.to_array(rows)).collect::<Result<Vec<_>>>()?;
        let [text, from, to] = [0, 1, 2].map(|i| arrays[i].as_string::<i32>());
        // Zones are nearly always constants: parsed once per distinct name in the batch.
        let mut zones: std::collections::HashMap<&str, Zone> = std::collections::HashMap::new();
        let mut out = StringBuilder::with_capacity(rows, rows * 19);
        for i in 0..rows {
            if text.is_null(i) || from.is_null(i) || to.is_null(i) {
                out.append_null();
                continue;
            }
            for name in [from.value(i), to.value(i)] {
                if !zones.contains_key(name) {
                    let Some(z) = zone(name) else {
                        return plan_err!("CONVERT_TZ: unknown time zone '{name}' (a region like 'Europe/Berlin', 'UTC', or an offset like 'GMT+01:00')");
                    };
                    zones.insert(name, z);
                }
            }
            let converted = chrono::NaiveDateTime::parse_from_str(text.value(i).trim(), FORMAT)
                .ok()
                .and_then(|local| zones.get(from.value(i))?.instant(local))
                .zip(zones.get(to.value(i)))
                .map(|(utc, to)| to.local(utc));
            match converted {
                Some(t) => out.append_value(t.format(FORMAT).to_string()),
                None => out.append_null(),
            }
        }
        scalar_or_array(&args.args, Arc::new(out.finish()))
    }
}

/// `CAST(ts AS STRING)` as Flink writes it: `yyyy-MM-dd HH:mm:ss` with as many fractional
/// digits as the type's precision (`2023-01-01 10:00:00.000` for `TIMESTAMP(3)`), not Arrow's
/// ISO text (`2023-01-01T10:00:00Z`). A `TIMESTAMP_LTZ` is written in the session's zone, UTC.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TimestampText {
    signature: Signature,
}

impl Default for TimestampText {
    fn default() -> Self {
        Self { signature: Signature::any(1, Volatility::Immutable) }
    }
}

pub const TIMESTAMP_TEXT: &str = "__weir_timestamp_text";

impl ScalarUDFImpl for TimestampText {
    fn name(&self) -> &str {
        TIMESTAMP_TEXT
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let input = args.args[0].to_array(rows)?;
        scalar_or_array(&args.args, timestamp_texts(&input)?)
    }
}

/// Timestamps as Flink's SQL text (see [`TimestampText`]).
fn timestamp_texts(input: &ArrayRef) -> Result<ArrayRef> {
    use datafusion::arrow::array::{AsArray, StringBuilder};
    use datafusion::arrow::datatypes::{
        TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType,
    };
    let DataType::Timestamp(unit, _) = input.data_type() else {
        return plan_err!("{TIMESTAMP_TEXT} takes a timestamp, not {}", input.data_type());
    };
    // Seconds and the fraction's digits by the unit; the instant as UTC wall-clock time.
    let (values, per_second, format): (Vec<Option<i64>>, i64, &str) = match unit {
        TimeUnit::Second => (input.as_primitive::<TimestampSecondType>().iter().collect(), 1, "%Y-%m-%d %H:%M:%S"),
        TimeUnit::Millisecond => {
            (input.as_primitive::<TimestampMillisecondType>().iter().collect(), 1_000, "%Y-%m-%d %H:%M:%S%.3f")
        }
        TimeUnit::Microsecond => {
            (input.as_primitive::<TimestampMicrosecondType>().iter().collect(), 1_000_000, "%Y-%m-%d %H:%M:%S%.6f")
        }
        TimeUnit::Nanosecond => {
            (input.as_primitive::<TimestampNanosecondType>().iter().collect(), 1_000_000_000, "%Y-%m-%d %H:%M:%S%.9f")
        }
    };
    let mut out = StringBuilder::with_capacity(input.len(), input.len() * 23);
    for v in values {
        let time = v.and_then(|v| {
            let nanos = (v.rem_euclid(per_second) * (1_000_000_000 / per_second)) as u32;
            chrono::DateTime::from_timestamp(v.div_euclid(per_second), nanos)
        });
        match time {
            Some(t) => out.append_value(t.naive_utc().format(format).to_string()),
            None => out.append_null(),
        }
    }
    Ok(Arc::new(out.finish()))
}

/// One value as Flink's SQL text: timestamps as [`TimestampText`], anything else as Arrow casts it.
pub(crate) fn flink_text(value: &ArrayRef) -> Result<String> {
    use datafusion::arrow::array::AsArray;
    let text = match value.data_type() {
        DataType::Timestamp(..) => timestamp_texts(value)?,
        _ => datafusion::arrow::compute::cast(value, &DataType::Utf8)?,
    };
    Ok(text.as_string::<i32>().value(0).to_string())
}

/// Casts that Flink writes otherwise than Arrow, in `expr` over `schema`: a timestamp cast to
/// text becomes [`TimestampText`], a boolean `TRUE` or `FALSE`.
pub fn flink_casts(
    expr: datafusion::logical_expr::Expr,
    schema: &datafusion::common::DFSchema,
    text: &Arc<datafusion::logical_expr::ScalarUDF>,
) -> Result<datafusion::logical_expr::Expr> {
    use datafusion::common::tree_node::{Transformed, TreeNode};
    use datafusion::logical_expr::{Expr, ExprSchemable};
    let to_text = |t: &DataType| matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View);
    Ok(expr
        .transform_up(|e| {
            let (inner, target) = match &e {
                Expr::Cast(c) => (&c.expr, c.field.data_type()),
                Expr::TryCast(c) => (&c.expr, c.field.data_type()),
                _ => return Ok(Transformed::no(e)),
            };
            if !to_text(target) {
                return Ok(Transformed::no(e));
            }
            let call = match inner.get_type(schema) {
                Ok(DataType::Timestamp(..)) => text.call(vec![inner.as_ref().clone()]),
                // Flink writes booleans in capitals.
                Ok(DataType::Boolean) => {
                    datafusion::logical_expr::when(inner.as_ref().clone(), datafusion::prelude::lit("TRUE"))
                        .when(datafusion::prelude::not(inner.as_ref().clone()), datafusion::prelude::lit("FALSE"))
                        .end()?
                }
                _ => return Ok(Transformed::no(e)),
            };
            let call = if *target == DataType::Utf8 { call } else { call.cast_to(target, schema)? };
            Ok(Transformed::yes(call))
        })?
        .data)
}

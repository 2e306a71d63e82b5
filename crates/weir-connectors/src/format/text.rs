//! Text fields to typed columns, a whole column at a time.
//!
//! Text formats are first split into string columns, then each column is cast to its declared
//! type with one vectorized cast. A value that does not convert becomes null in the cast's
//! output while it was present in the input: comparing the two validity masks finds every bad
//! value without a per-value parse loop of our own.

use std::sync::Arc;

use datafusion::arrow::array::Scalar;
use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, StringArray, TimestampMicrosecondArray, TimestampMillisecondArray,
    TimestampNanosecondArray, TimestampSecondArray,
};
use datafusion::arrow::compute::kernels::cmp::eq;
use datafusion::arrow::compute::{and_not, cast_with_options, is_null, nullif, or, CastOptions};
use datafusion::arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use weir_core::Result;

/// A value that did not convert: its row in the batch, its column, the text, the type.
pub struct BadValue {
    pub row: usize,
    pub column: String,
    pub text: String,
    pub data_type: DataType,
}

/// Typed columns for `schema` from string columns, plus a mask of the rows with a bad value
/// (`None` when every value converted) and the first bad value for error messages.
pub fn to_typed_columns(
    strings: Vec<StringArray>,
    schema: &SchemaRef,
) -> Result<(Vec<ArrayRef>, Option<BooleanArray>, Option<BadValue>)> {
    let options = CastOptions { safe: true, ..Default::default() };
    let empty = Scalar::new(StringArray::from(vec![""]));
    let mut columns = Vec::with_capacity(strings.len());
    let mut bad_rows: Option<BooleanArray> = None;
    let mut first_bad: Option<BadValue> = None;
    for (text, field) in strings.into_iter().zip(schema.fields()) {
        // An empty field is NULL, whatever the column's type (as arrow-csv reads it).
        let is_empty = eq(&text, &empty)?;
        let input = nullif(&text, &is_empty)?;
        if field.data_type() == &DataType::Utf8 {
            columns.push(input);
            continue;
        }
        let typed = cast_text(&input, field.data_type(), &options)?;
        if typed.null_count() != input.null_count() {
            let bad = and_not(&is_null(&typed)?, &is_null(&input)?)?;
            if first_bad.is_none() {
                if let Some(row) = bad.iter().position(|b| b == Some(true)) {
                    first_bad = Some(BadValue {
                        row,
                        column: field.name().clone(),
                        text: text.value(row).to_string(),
                        data_type: field.data_type().clone(),
                    });
                }
            }
            bad_rows = Some(match bad_rows {
                None => bad,
                Some(prev) => or(&prev, &bad)?,
            });
        }
        columns.push(typed);
    }
    Ok((columns, bad_rows, first_bad))
}

/// Strings to `to`, as arrow's cast converts them (`options.safe`: a bad value becomes null,
/// else an error). Timestamps without a time zone in the usual `YYYY-MM-DD HH:MM:SS[.fff]`
/// form are read digit by digit, several times faster than the general parser; a column with
/// any other form goes to the cast whole, so both read every value alike.
pub fn cast_text(input: &ArrayRef, to: &DataType, options: &CastOptions) -> Result<ArrayRef> {
    if let (DataType::Timestamp(unit, None), Some(text)) = (to, input.as_any().downcast_ref::<StringArray>()) {
        if let Some(parsed) = fast_timestamps(text, *unit) {
            return Ok(parsed);
        }
    }
    Ok(cast_with_options(input, to, options)?)
}

fn fast_timestamps(text: &StringArray, unit: TimeUnit) -> Option<ArrayRef> {
    let mut values = Vec::with_capacity(text.len());
    for i in 0..text.len() {
        values.push(if text.is_valid(i) { parse_timestamp(text.value(i).as_bytes(), unit)? } else { 0 });
    }
    let nulls = text.nulls().cloned();
    Some(match unit {
        TimeUnit::Second => Arc::new(TimestampSecondArray::new(values.into(), nulls)),
        TimeUnit::Millisecond => Arc::new(TimestampMillisecondArray::new(values.into(), nulls)),
        TimeUnit::Microsecond => Arc::new(TimestampMicrosecondArray::new(values.into(), nulls)),
        TimeUnit::Nanosecond => Arc::new(TimestampNanosecondArray::new(values.into(), nulls)),
    })
}

/// `YYYY-MM-DD HH:MM:SS` (or with a `T`), then up to the unit's digits of a fraction, in
/// `unit`s since the epoch; `None` for anything else (left to the general parser).
fn parse_timestamp(s: &[u8], unit: TimeUnit) -> Option<i64> {
    let digits = |at: usize, n: usize| -> Option<i64> {
        let mut v = 0i64;
        for b in s.get(at..at + n)? {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                return None;
            }
            v = v * 10 + i64::from(d);
        }
        Some(v)
    };
    let at = |i: usize, c: u8| s.get(i) == Some(&c);
    if s.len() < 19 || !at(4, b'-') || !at(7, b'-') || !(at(10, b' ') || at(10, b'T')) || !at(13, b':') || !at(16, b':')
    {
        return None;
    }
    let (year, month, day) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (hour, minute, second) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if !(1..=12).contains(&month)
        || day < 1
        || day > month_days[(month - 1) as usize]
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let precision = match unit {
        TimeUnit::Second => 0,
        TimeUnit::Millisecond => 3,
        TimeUnit::Microsecond => 6,
        TimeUnit::Nanosecond => 9,
    };
    let mut fraction = 0i64;
    if s.len() > 19 {
        let n = s.len() - 20;
        if !at(19, b'.') || n == 0 || n > precision {
            return None;
        }
        fraction = digits(20, n)? * 10i64.pow((precision - n) as u32);
    }
    // Days since 1970-01-01 of the civil date (H. Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second;
    seconds.checked_mul(10i64.pow(precision as u32))?.checked_add(fraction)
}

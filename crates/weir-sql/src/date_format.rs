//! Flink's `DATE_FORMAT(ts, pattern)`: a timestamp as text by a Java `DateTimeFormatter`
//! pattern (`yyyy-MM-dd HH:mm:ss.SSS`). Numeric fields are written digit by digit, with the
//! date worked out once per day of the batch (q15–q17 group by one per row); a pattern with
//! other letters (month names, weekdays, AM/PM) goes through chrono.

use std::fmt::Write;
use std::sync::Arc;

use datafusion::arrow::array::{Array, Int64Array, StringBuilder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::{exec_err, plan_err, ScalarValue};
use datafusion::error::Result;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility};
use datafusion::prelude::Expr;
use weir_core::civil::{push_padded, Days};

/// The name the rewrite of `DATE_FORMAT` calls (DataFusion's own `date_format` is `to_char`,
/// with chrono's letters).
pub const NAME: &str = "__weir_date_format";

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct DateFormat {
    signature: Signature,
}

impl Default for DateFormat {
    fn default() -> Self {
        Self { signature: Signature::any(2, Volatility::Immutable) }
    }
}

/// A piece of a pattern.
#[derive(Debug, Clone, PartialEq)]
enum Item {
    Text(String),
    /// A number, zero-padded to `width` digits.
    Year(usize),
    Month(usize),
    Day(usize),
    Hour(usize),
    Minute(usize),
    Second(usize),
    Millis,
}

/// A pattern's pieces: quoted text, or a run of one character (`yyyy`, `-`).
enum Piece {
    Quoted(String),
    Run(char, usize),
}

fn pieces(pattern: &str) -> Vec<Piece> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' {
            // Quoted text up to the closing quote; `''` is a quote.
            if chars.get(i + 1) == Some(&'\'') {
                out.push(Piece::Quoted("'".into()));
                i += 2;
                continue;
            }
            let text: String = chars[i + 1..].iter().take_while(|c| **c != '\'').collect();
            i += text.chars().count() + 2;
            out.push(Piece::Quoted(text));
            continue;
        }
        let run = chars[i..].iter().take_while(|x| **x == c).count();
        out.push(Piece::Run(c, run));
        i += run;
    }
    out
}

/// The pattern as items, or `None` if it has letters only chrono can write.
fn items(pattern: &str) -> Option<Vec<Item>> {
    pieces(pattern)
        .into_iter()
        .map(|piece| {
            Some(match piece {
                Piece::Quoted(text) => Item::Text(text),
                Piece::Run('y' | 'u', 2) => return None,
                Piece::Run('y' | 'u', n) => Item::Year(n.max(4)),
                Piece::Run('M', n @ (1 | 2)) => Item::Month(n),
                Piece::Run('d', n @ (1 | 2)) => Item::Day(n),
                Piece::Run('H', n @ (1 | 2)) => Item::Hour(n),
                Piece::Run('m', n @ (1 | 2)) => Item::Minute(n),
                Piece::Run('s', n @ (1 | 2)) => Item::Second(n),
                Piece::Run('S', 3) => Item::Millis,
                Piece::Run(c, _) if c.is_ascii_alphabetic() => return None,
                Piece::Run(c, n) => Item::Text(std::iter::repeat_n(c, n).collect()),
            })
        })
        .collect()
}

/// The pattern as a chrono format, for what [`items`] does not write.
fn chrono_format(pattern: &str) -> String {
    let mut out = String::new();
    for piece in pieces(pattern) {
        let field = match piece {
            Piece::Quoted(text) => {
                out.push_str(&text.replace('%', "%%"));
                continue;
            }
            Piece::Run('y' | 'u', 2) => "%y",
            Piece::Run('y' | 'u', _) => "%Y",
            Piece::Run('M', 1) => "%-m",
            Piece::Run('M', 2) => "%m",
            Piece::Run('M', 3) => "%b",
            Piece::Run('M', _) => "%B",
            Piece::Run('d', 1) => "%-d",
            Piece::Run('d', _) => "%d",
            Piece::Run('D', _) => "%j",
            Piece::Run('H', 1) => "%-H",
            Piece::Run('H', _) => "%H",
            Piece::Run('h', 1) => "%-I",
            Piece::Run('h', _) => "%I",
            Piece::Run('m', 1) => "%-M",
            Piece::Run('m', _) => "%M",
            Piece::Run('s', 1) => "%-S",
            Piece::Run('s', _) => "%S",
            Piece::Run('S', 3) => "%3f",
            Piece::Run('S', 6) => "%6f",
            Piece::Run('S', 9) => "%9f",
            Piece::Run('a', _) => "%p",
            Piece::Run('E', 4) => "%A",
            Piece::Run('E', _) => "%a",
            Piece::Run('%', n) => {
                out.push_str(&"%%".repeat(n));
                continue;
            }
            Piece::Run(c, n) => {
                out.extend(std::iter::repeat_n(c, n));
                continue;
            }
        };
        out.push_str(field);
    }
    out
}

fn format_fast(millis: &Int64Array, items: &[Item]) -> StringBuilder {
    let mut builder = StringBuilder::with_capacity(millis.len(), millis.len() * 16);
    let mut text = String::new();
    let mut days_seen = Days::default();
    for i in 0..millis.len() {
        if millis.is_null(i) {
            builder.append_null();
            continue;
        }
        let ms = millis.value(i);
        let (days, of_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
        let (y, m, d) = days_seen.civil(days);
        text.clear();
        for item in items {
            match item {
                Item::Text(t) => text.push_str(t),
                Item::Year(w) => push_padded(&mut text, y, *w),
                Item::Month(w) => push_padded(&mut text, i64::from(m), *w),
                Item::Day(w) => push_padded(&mut text, i64::from(d), *w),
                Item::Hour(w) => push_padded(&mut text, of_day / 3_600_000, *w),
                Item::Minute(w) => push_padded(&mut text, of_day / 60_000 % 60, *w),
                Item::Second(w) => push_padded(&mut text, of_day / 1000 % 60, *w),
                Item::Millis => push_padded(&mut text, of_day % 1000, 3),
            }
        }
        builder.append_value(&text);
    }
    builder
}

fn format_chrono(millis: &Int64Array, pattern: &str) -> StringBuilder {
    let format = chrono_format(pattern);
    let mut builder = StringBuilder::with_capacity(millis.len(), millis.len() * 16);
    let mut text = String::new();
    for i in 0..millis.len() {
        match chrono::DateTime::from_timestamp_millis(millis.value(i)).filter(|_| millis.is_valid(i)) {
            None => builder.append_null(),
            Some(t) => {
                text.clear();
                let _ = write!(text, "{}", t.naive_utc().format(&format));
                builder.append_value(&text);
            }
        }
    }
    builder
}

impl ScalarUDFImpl for DateFormat {
    fn name(&self) -> &str {
        NAME
    }

    fn display_name(&self, args: &[Expr]) -> Result<String> {
        self.schema_name(args)
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        let args: Vec<String> = args.iter().map(|a| a.schema_name().to_string()).collect();
        Ok(format!("DATE_FORMAT({})", args.join(", ")))
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args {
            [DataType::Timestamp(..) | DataType::Date32 | DataType::Date64, DataType::Utf8 | DataType::Utf8View] => {
                Ok(DataType::Utf8)
            }
            [other, _] => plan_err!("DATE_FORMAT formats a TIMESTAMP or DATE, not {other}"),
            _ => plan_err!("DATE_FORMAT takes a timestamp and a pattern"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [value, pattern] = args.args.as_slice() else { return exec_err!("DATE_FORMAT takes two arguments") };
        let pattern = match pattern {
            ColumnarValue::Scalar(ScalarValue::Utf8(Some(p)) | ScalarValue::Utf8View(Some(p))) => p.clone(),
            _ => return exec_err!("DATE_FORMAT's pattern must be a text literal"),
        };
        let values = value.to_array(args.number_rows)?;
        let millis = cast(&cast(&values, &DataType::Timestamp(TimeUnit::Millisecond, None))?, &DataType::Int64)?;
        let Some(millis) = millis.as_any().downcast_ref::<Int64Array>() else {
            return exec_err!("DATE_FORMAT: timestamps did not convert to milliseconds");
        };
        let mut builder = match items(&pattern) {
            Some(items) => format_fast(millis, &items),
            None => format_chrono(millis, &pattern),
        };
        Ok(ColumnarValue::Array(Arc::new(builder.finish())))
    }
}

/// `UNIX_TIMESTAMP(text [, pattern])`: a wall-clock time written by a Java pattern
/// (`yyyy-MM-dd HH:mm:ss` by default) as epoch seconds, in the session's zone (UTC). Text the
/// pattern does not read gives Flink's `Long.MIN_VALUE`, not NULL; text after what the pattern
/// reads is ignored, as Java's `SimpleDateFormat` does. (`UNIX_TIMESTAMP()` without arguments
/// is the wall clock, rewritten elsewhere.)
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct UnixTimestamp {
    signature: Signature,
}

impl Default for UnixTimestamp {
    fn default() -> Self {
        use datafusion::logical_expr::TypeSignature;
        Self {
            signature: Signature::one_of(
                vec![TypeSignature::Exact(vec![DataType::Utf8]), TypeSignature::Exact(vec![DataType::Utf8; 2])],
                Volatility::Immutable,
            ),
        }
    }
}

/// Epoch seconds of `text` read by the chrono `format`; `None` if it does not read.
fn parse_seconds(text: &str, format: &str) -> Option<i64> {
    if let Ok((t, _)) = chrono::NaiveDateTime::parse_and_remainder(text, format) {
        return Some(t.and_utc().timestamp());
    }
    let (d, _) = chrono::NaiveDate::parse_and_remainder(text, format).ok()?;
    Some(d.and_hms_opt(0, 0, 0)?.and_utc().timestamp())
}

impl ScalarUDFImpl for UnixTimestamp {
    fn name(&self) -> &str {
        "unix_timestamp"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        use datafusion::arrow::array::{AsArray, Int64Builder};
        let rows = args.number_rows;
        let arrays = args.args.iter().map(|a| a.to_array(rows)).collect::<Result<Vec<_>>>()?;
        let text = arrays[0].as_string::<i32>();
        let patterns = arrays.get(1).map(|p| p.as_string::<i32>());
        let mut formats: std::collections::HashMap<&str, String> = std::collections::HashMap::new();
        let mut out = Int64Builder::with_capacity(rows);
        for i in 0..rows {
            let pattern = match patterns {
                Some(p) if p.is_null(i) => None,
                Some(p) => Some(p.value(i)),
                None => Some("yyyy-MM-dd HH:mm:ss"),
            };
            let (Some(pattern), false) = (pattern, text.is_null(i)) else {
                out.append_null();
                continue;
            };
            let format = formats.entry(pattern).or_insert_with(|| chrono_format(pattern));
            out.append_value(parse_seconds(text.value(i).trim(), format).unwrap_or(i64::MIN));
        }
        crate::time_functions::scalar_or_array(&args.args, Arc::new(out.finish()))
    }
}

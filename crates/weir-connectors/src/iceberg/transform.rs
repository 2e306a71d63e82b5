//! Iceberg partition transforms over whole columns: identity, year, month, day, hour,
//! bucket[N] (Murmur3, as the spec defines it) and truncate[W]; and a partition spec parsed
//! from `'partition-by'`, from `PARTITIONED BY`, or from an existing table's metadata.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BooleanArray, Int32Array, Int64Array, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Date32Type, Int32Type, Int64Type, TimestampMicrosecondType};
use serde_json::{json, Value as Json};
use weir_core::{Location, Result, WeirError};

use super::avro::Value;
use super::schema::TableSchema;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transform {
    Identity,
    Year,
    Month,
    Day,
    Hour,
    Bucket(u32),
    Truncate(u32),
}

pub const SUPPORTED: &str = "identity, year, month, day, hour, bucket[N] and truncate[W]";

impl Transform {
    /// As table metadata writes it: `day`, `bucket[16]`.
    pub fn name(&self) -> String {
        match self {
            Transform::Identity => "identity".into(),
            Transform::Year => "year".into(),
            Transform::Month => "month".into(),
            Transform::Day => "day".into(),
            Transform::Hour => "hour".into(),
            Transform::Bucket(n) => format!("bucket[{n}]"),
            Transform::Truncate(w) => format!("truncate[{w}]"),
        }
    }

    fn parse_metadata(text: &str) -> Option<Self> {
        let bracket = |prefix: &str| {
            text.strip_prefix(prefix)?.strip_prefix('[')?.strip_suffix(']')?.parse::<u32>().ok().filter(|n| *n > 0)
        };
        Some(match text {
            "identity" => Transform::Identity,
            "year" => Transform::Year,
            "month" => Transform::Month,
            "day" => Transform::Day,
            "hour" => Transform::Hour,
            _ => match (bracket("bucket"), bracket("truncate")) {
                (Some(n), _) => Transform::Bucket(n),
                (_, Some(w)) => Transform::Truncate(w),
                _ => return None,
            },
        })
    }

    fn suffix(&self) -> &'static str {
        match self {
            Transform::Identity => "",
            Transform::Year => "_year",
            Transform::Month => "_month",
            Transform::Day => "_day",
            Transform::Hour => "_hour",
            Transform::Bucket(_) => "_bucket",
            Transform::Truncate(_) => "_trunc",
        }
    }

    /// The Iceberg type of the partition value for a source column of type `source`.
    fn result_type(&self, source: &str) -> Option<&'static str> {
        let temporal = matches!(source, "date" | "timestamp" | "timestamptz");
        Some(match self {
            Transform::Year | Transform::Month | Transform::Hour
                if temporal && !(source == "date" && *self == Transform::Hour) =>
            {
                "int"
            }
            Transform::Day if temporal => "date",
            Transform::Bucket(_)
                if matches!(source, "int" | "long" | "string" | "binary" | "date" | "timestamp" | "timestamptz") =>
            {
                "int"
            }
            Transform::Truncate(_) if matches!(source, "int" | "long" | "string" | "binary") => as_static(source)?,
            Transform::Identity
                if matches!(source, "int" | "long" | "string" | "boolean" | "date" | "timestamp" | "timestamptz") =>
            {
                as_static(source)?
            }
            _ => return None,
        })
    }
}

fn as_static(t: &str) -> Option<&'static str> {
    ["int", "long", "string", "binary", "boolean", "date", "timestamp", "timestamptz"].into_iter().find(|s| *s == t)
}

/// One field of a partition spec.
#[derive(Debug, Clone)]
pub struct PartitionField {
    pub name: String,
    pub transform: Transform,
    /// The source column's index among the sink's columns, and its field id.
    pub column: usize,
    pub source_id: i32,
    pub field_id: i32,
    /// The Iceberg type of the value.
    pub result: &'static str,
}

#[derive(Debug, Clone, Default)]
pub struct PartitionSpec {
    pub spec_id: i64,
    pub fields: Vec<PartitionField>,
}

impl PartitionSpec {
    /// `'partition-by' = 'day(ts), bucket(16, id), region'` (Spark's spelling: `days(ts)` is
    /// accepted too), or the `PARTITIONED BY` columns (identity).
    pub fn parse(table: &str, text: &str, at: Option<Location>, schema: &TableSchema) -> Result<Self> {
        let bad = |why: String| WeirError::user(format!("table '{table}': 'partition-by': {why}")).at(at);
        let mut fields = Vec::new();
        for item in split_top(text) {
            let item = item.trim();
            if item.is_empty() {
                return Err(bad("an empty item".into()));
            }
            let (transform, column) = match item.split_once('(') {
                None => (Transform::Identity, item),
                Some((name, args)) => {
                    let args = args.strip_suffix(')').ok_or_else(|| bad(format!("'{item}' lacks its ')'")))?;
                    let args: Vec<&str> = args.split(',').map(str::trim).collect();
                    let number = |s: &str| {
                        s.parse::<u32>()
                            .ok()
                            .filter(|n| *n > 0)
                            .ok_or_else(|| bad(format!("'{item}': '{s}' is not a positive whole number")))
                    };
                    match (name.trim().to_ascii_lowercase().as_str(), &args[..]) {
                        ("identity", [c]) => (Transform::Identity, *c),
                        ("year" | "years", [c]) => (Transform::Year, *c),
                        ("month" | "months", [c]) => (Transform::Month, *c),
                        ("day" | "days", [c]) => (Transform::Day, *c),
                        ("hour" | "hours", [c]) => (Transform::Hour, *c),
                        ("bucket", [n, c]) => (Transform::Bucket(number(n)?), *c),
                        ("truncate", [w, c]) => (Transform::Truncate(number(w)?), *c),
                        (other, _) => {
                            return Err(bad(format!(
                                "'{item}': unsupported partition transform '{other}' (Iceberg's transforms here: \
                                 {SUPPORTED}, written identity(col), year(col), month(col), day(col), hour(col), \
                                 bucket(N, col), truncate(W, col))"
                            )))
                        }
                    }
                }
            };
            let column = column.trim().trim_matches('`');
            let index = schema
                .columns
                .iter()
                .position(|c| c.name == column)
                .ok_or_else(|| bad(format!("'{item}': no column '{column}'")))?;
            fields.push(field(&schema.columns[index], index, transform, 1000 + fields.len() as i32).map_err(bad)?);
        }
        Ok(PartitionSpec { spec_id: 0, fields })
    }

    /// An existing table's default spec.
    pub fn existing(table: &str, metadata: &Json, schema: &TableSchema) -> Result<Self> {
        let spec_id = metadata.get("default-spec-id").and_then(Json::as_i64).unwrap_or(0);
        let spec = metadata
            .get("partition-specs")
            .and_then(Json::as_array)
            .and_then(|s| s.iter().find(|s| s.get("spec-id").and_then(Json::as_i64) == Some(spec_id)));
        let mut fields = Vec::new();
        for f in spec.and_then(|s| s.get("fields")).and_then(Json::as_array).into_iter().flatten() {
            let transform_text = f.get("transform").and_then(Json::as_str).unwrap_or("");
            let transform = Transform::parse_metadata(transform_text).ok_or_else(|| {
                WeirError::not_supported(format!(
                    "table '{table}': the Iceberg table is partitioned by the transform '{transform_text}', which \
                     Weir does not write (it writes {SUPPORTED})"
                ))
            })?;
            let source_id = f.get("source-id").and_then(Json::as_i64).unwrap_or(-1) as i32;
            let Some(index) = schema.columns.iter().position(|c| c.id == source_id) else {
                return Err(WeirError::not_supported(format!(
                    "table '{table}': the Iceberg table is partitioned by field {source_id}, which is not a column \
                     of the sink"
                )));
            };
            let field_id = f.get("field-id").and_then(Json::as_i64).unwrap_or(1000) as i32;
            let mut pf = field(&schema.columns[index], index, transform, field_id)
                .map_err(|why| WeirError::not_supported(format!("table '{table}': {why}")))?;
            if let Some(name) = f.get("name").and_then(Json::as_str) {
                pf.name = name.to_string();
            }
            fields.push(pf);
        }
        Ok(PartitionSpec { spec_id, fields })
    }

    pub fn to_json(&self) -> Json {
        json!({
            "spec-id": self.spec_id,
            "fields": self.fields.iter().map(|f| json!({
                "name": f.name, "transform": f.transform.name(), "source-id": f.source_id, "field-id": f.field_id,
            })).collect::<Vec<_>>(),
        })
    }

    pub fn last_partition_id(&self) -> i32 {
        self.fields.iter().map(|f| f.field_id).max().unwrap_or(999)
    }

    /// The partition values of each row of `batch` (the files' types), one array per field.
    pub fn values(&self, batch: &[ArrayRef]) -> Result<Vec<ArrayRef>> {
        self.fields.iter().map(|f| apply(f.transform, &batch[f.column])).collect()
    }
}

fn field(
    column: &super::schema::Column,
    index: usize,
    transform: Transform,
    field_id: i32,
) -> std::result::Result<PartitionField, String> {
    let result = transform.result_type(&column.iceberg).ok_or_else(|| {
        format!(
            "the partition transform {} does not apply to column '{}' of type {}",
            transform.name(),
            column.name,
            column.iceberg
        )
    })?;
    Ok(PartitionField {
        name: format!("{}{}", column.name, transform.suffix()),
        transform,
        column: index,
        source_id: column.id,
        field_id,
        result,
    })
}

/// Split at top-level commas (not those inside parentheses).
fn split_top(text: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0i32, 0usize, Vec::new());
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

const MICROS_PER_HOUR: i64 = 3_600_000_000;
const MICROS_PER_DAY: i64 = 24 * MICROS_PER_HOUR;

/// Days since 1970-01-01 -> (year, month 1-12), proleptic Gregorian (Hinnant's algorithm).
fn year_month(days: i64) -> (i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month)
}

/// Days since the epoch of each value of a date or timestamp (microseconds) column.
fn days(a: &ArrayRef) -> Option<Int64Array> {
    match a.data_type() {
        DataType::Date32 => Some(a.as_primitive::<Date32Type>().unary(i64::from)),
        DataType::Timestamp(_, _) => {
            Some(a.as_primitive::<TimestampMicrosecondType>().unary(|v| v.div_euclid(MICROS_PER_DAY)))
        }
        _ => None,
    }
}

fn apply(transform: Transform, a: &ArrayRef) -> Result<ArrayRef> {
    let unsupported =
        || WeirError::internal(format!("partition transform {} over {}", transform.name(), a.data_type()));
    Ok(match transform {
        Transform::Identity => a.clone(),
        Transform::Day => Arc::new(days(a).ok_or_else(unsupported)?.unary::<_, Int32Type>(|d| d as i32)),
        Transform::Hour => match a.data_type() {
            DataType::Timestamp(_, _) => Arc::new(
                a.as_primitive::<TimestampMicrosecondType>()
                    .unary::<_, Int32Type>(|v| v.div_euclid(MICROS_PER_HOUR) as i32),
            ),
            _ => return Err(unsupported()),
        },
        Transform::Month => Arc::new(days(a).ok_or_else(unsupported)?.unary::<_, Int32Type>(|d| {
            let (y, m) = year_month(d);
            ((y - 1970) * 12 + m - 1) as i32
        })),
        Transform::Year => {
            Arc::new(days(a).ok_or_else(unsupported)?.unary::<_, Int32Type>(|d| (year_month(d).0 - 1970) as i32))
        }
        Transform::Bucket(n) => {
            let bucket = |h: i32| (h & i32::MAX) % n as i32;
            let longs = |a: &ArrayRef| -> Option<Int64Array> {
                Some(match a.data_type() {
                    DataType::Int32 => a.as_primitive::<Int32Type>().unary(i64::from),
                    DataType::Date32 => a.as_primitive::<Date32Type>().unary(i64::from),
                    DataType::Int64 => a.as_primitive::<Int64Type>().clone(),
                    DataType::Timestamp(_, _) => a.as_primitive::<TimestampMicrosecondType>().unary(|v| v),
                    _ => return None,
                })
            };
            match a.data_type() {
                DataType::Utf8 => Arc::new(
                    a.as_string::<i32>()
                        .iter()
                        .map(|v| v.map(|s| bucket(murmur3(s.as_bytes()))))
                        .collect::<Int32Array>(),
                ),
                DataType::Binary => {
                    Arc::new(a.as_binary::<i32>().iter().map(|v| v.map(|b| bucket(murmur3(b)))).collect::<Int32Array>())
                }
                _ => Arc::new(
                    longs(a).ok_or_else(unsupported)?.unary::<_, Int32Type>(|v| bucket(murmur3(&v.to_le_bytes()))),
                ),
            }
        }
        Transform::Truncate(w) => match a.data_type() {
            DataType::Int32 => {
                let w = w as i32;
                Arc::new(a.as_primitive::<Int32Type>().unary::<_, Int32Type>(|v| v - v.rem_euclid(w)))
            }
            DataType::Int64 => {
                let w = i64::from(w);
                Arc::new(a.as_primitive::<Int64Type>().unary::<_, Int64Type>(|v| v - v.rem_euclid(w)))
            }
            DataType::Utf8 => Arc::new(
                a.as_string::<i32>()
                    .iter()
                    .map(|v| v.map(|s| s.char_indices().nth(w as usize).map_or(s, |(i, _)| &s[..i])))
                    .collect::<StringArray>(),
            ),
            DataType::Binary => Arc::new(
                a.as_binary::<i32>().iter().map(|v| v.map(|b| &b[..b.len().min(w as usize)])).collect::<BinaryArray>(),
            ),
            _ => return Err(unsupported()),
        },
    })
}

/// A partition value of row `row` as the manifest stores it (`["null", T]`).
pub fn avro_value(a: &ArrayRef, row: usize) -> Value {
    if a.is_null(row) {
        return Value::none();
    }
    Value::some(match a.data_type() {
        DataType::Boolean => Value::Boolean(a.as_any().downcast_ref::<BooleanArray>().is_some_and(|b| b.value(row))),
        DataType::Int32 => Value::Int(a.as_primitive::<Int32Type>().value(row)),
        DataType::Date32 => Value::Int(a.as_primitive::<Date32Type>().value(row)),
        DataType::Int64 => Value::Long(a.as_primitive::<Int64Type>().value(row)),
        DataType::Timestamp(_, _) => Value::Long(a.as_primitive::<TimestampMicrosecondType>().value(row)),
        DataType::Utf8 => Value::String(a.as_string::<i32>().value(row).to_string()),
        DataType::Binary => Value::Bytes(a.as_binary::<i32>().value(row).to_vec()),
        _ => Value::Null,
    })
}

/// A partition value of row `row` as a path segment names it (`2024-01-05`, `2024-01-05-13`).
pub fn path_value(transform: Transform, a: &ArrayRef, row: usize) -> String {
    if a.is_null(row) {
        return "null".into();
    }
    let civil = |days: i64| {
        let (y, m) = year_month(days);
        let first = days_from_civil(y, m);
        format!("{y:04}-{m:02}-{:02}", days - first + 1)
    };
    let text = match (transform, a.data_type()) {
        (Transform::Day, _) => civil(i64::from(a.as_primitive::<Int32Type>().value(row))),
        (Transform::Identity, DataType::Date32) => civil(i64::from(a.as_primitive::<Date32Type>().value(row))),
        (Transform::Hour, _) => {
            let h = i64::from(a.as_primitive::<Int32Type>().value(row));
            format!("{}-{:02}", civil(h.div_euclid(24)), h.rem_euclid(24))
        }
        (Transform::Month, _) => {
            let m = i64::from(a.as_primitive::<Int32Type>().value(row));
            format!("{:04}-{:02}", 1970 + m.div_euclid(12), m.rem_euclid(12) + 1)
        }
        (Transform::Year, _) => format!("{}", 1970 + a.as_primitive::<Int32Type>().value(row)),
        _ => match avro_value(a, row) {
            Value::Union(_, v) => match *v {
                Value::Boolean(b) => b.to_string(),
                Value::Int(i) => i.to_string(),
                Value::Long(l) => l.to_string(),
                Value::String(s) => s,
                Value::Bytes(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
                _ => String::new(),
            },
            _ => String::new(),
        },
    };
    // Percent-encode what a path segment cannot hold as is.
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn days_from_civil(y: i64, m: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Murmur3 x86 32-bit, seed 0: the hash Iceberg's bucket transform is defined by.
pub fn murmur3(data: &[u8]) -> i32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut h: u32 = 0;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut k: u32 = 0;
        for (i, b) in tail.iter().enumerate() {
            k |= u32::from(*b) << (8 * i);
        }
        h ^= k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
    }
    h ^= data.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spec's own examples ("Appendix B: 32-bit Hash Requirements").
    #[test]
    fn bucket_hashes_are_the_specs() {
        assert_eq!(murmur3(&34i64.to_le_bytes()), 2_017_239_379);
        assert_eq!(murmur3("iceberg".as_bytes()), 1_210_000_089);
        assert_eq!(murmur3(&17_486i64.to_le_bytes()), -653_330_422); // date 2017-11-16
        assert_eq!(murmur3(&1_510_871_468_000_000i64.to_le_bytes()), -2_047_944_441); // 2017-11-16T22:31:08
        assert_eq!(murmur3(&[0, 1, 2, 3]), -188_683_207);
    }

    #[test]
    fn calendar_transforms() {
        let ts: ArrayRef = Arc::new(datafusion::arrow::array::TimestampMicrosecondArray::from(vec![
            Some(1_510_871_468_123_456),
            Some(-1),
            None,
        ]));
        let get = |t| apply(t, &ts).map(|a| a.as_primitive::<Int32Type>().iter().collect::<Vec<_>>()).ok();
        assert_eq!(get(Transform::Day), Some(vec![Some(17_486), Some(-1), None]));
        assert_eq!(get(Transform::Hour), Some(vec![Some(419_686), Some(-1), None]));
        assert_eq!(get(Transform::Month), Some(vec![Some(47 * 12 + 10), Some(-1), None]));
        assert_eq!(get(Transform::Year), Some(vec![Some(47), Some(-1), None]));
        let day = apply(Transform::Day, &ts).ok();
        assert_eq!(day.map(|d| path_value(Transform::Day, &d, 0)), Some("2017-11-16".to_string()));
        let v: ArrayRef = Arc::new(Int64Array::from(vec![-1i64, 10, 11]));
        let t = apply(Transform::Truncate(10), &v).ok();
        assert_eq!(t.map(|a| a.as_primitive::<Int64Type>().values().to_vec()), Some(vec![-10, 10, 10]));
        let s: ArrayRef = Arc::new(StringArray::from(vec!["iceberg", "ice"]));
        let t = apply(Transform::Truncate(3), &s).ok();
        assert_eq!(
            t.map(|a| a.as_string::<i32>().iter().flatten().map(String::from).collect::<Vec<_>>()),
            Some(vec!["ice".to_string(), "ice".into()])
        );
    }
}

//! Flink SQL types to Arrow types, and back for `DESCRIBE`.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, TimeUnit};
use datafusion::sql::sqlparser::ast::{DataType as SqlType, ExactNumberInfo, TimezoneInfo};
use weir_core::{Result, WeirError};

fn unit_for_precision(precision: Option<u64>, default: TimeUnit) -> Result<TimeUnit> {
    Ok(match precision {
        None => default,
        Some(0) => TimeUnit::Second,
        Some(1..=3) => TimeUnit::Millisecond,
        Some(4..=6) => TimeUnit::Microsecond,
        Some(7..=9) => TimeUnit::Nanosecond,
        Some(p) => return Err(WeirError::user(format!("timestamp precision {p} is out of range 0..=9"))),
    })
}

fn decimal(info: &ExactNumberInfo) -> Result<DataType> {
    let (precision, scale) = match *info {
        ExactNumberInfo::None => (10, 0),
        ExactNumberInfo::Precision(p) => (p, 0),
        ExactNumberInfo::PrecisionAndScale(p, s) => (p, s),
    };
    if !(1..=38).contains(&precision) || scale < 0 || scale as u64 > precision {
        return Err(WeirError::user(format!("DECIMAL({precision}, {scale}) is out of range")));
    }
    Ok(DataType::Decimal128(precision as u8, scale as i8))
}

/// The Arrow type of a column declared with SQL type `t` (Flink's types and common aliases).
pub fn arrow_type(t: &SqlType) -> Result<DataType> {
    use SqlType as S;
    Ok(match t {
        S::Boolean | S::Bool => DataType::Boolean,
        S::TinyInt(_) => DataType::Int8,
        S::SmallInt(_) | S::Int2(_) => DataType::Int16,
        S::Int(_) | S::Integer(_) | S::Int4(_) => DataType::Int32,
        S::BigInt(_) | S::Int8(_) => DataType::Int64,
        S::Float(ExactNumberInfo::None) | S::Real | S::Float4 => DataType::Float32,
        S::Double(_) | S::DoublePrecision | S::Float8 | S::Float64 => DataType::Float64,
        S::Float(ExactNumberInfo::Precision(p)) if *p <= 24 => DataType::Float32,
        S::Float(_) => DataType::Float64,
        S::Decimal(info) | S::Numeric(info) | S::Dec(info) => decimal(info)?,
        S::String(_)
        | S::Varchar(_)
        | S::Char(_)
        | S::Character(_)
        | S::CharVarying(_)
        | S::CharacterVarying(_)
        | S::Text
        | S::Nvarchar(_) => DataType::Utf8,
        S::Bytes(_) | S::Binary(_) | S::Varbinary(_) | S::Bytea | S::Blob(_) => DataType::Binary,
        S::Date => DataType::Date32,
        S::Time(p, TimezoneInfo::None) => match unit_for_precision(*p, TimeUnit::Second)? {
            TimeUnit::Second => DataType::Time32(TimeUnit::Second),
            TimeUnit::Millisecond => DataType::Time32(TimeUnit::Millisecond),
            u => DataType::Time64(u),
        },
        // Flink's default TIMESTAMP precision is 6.
        S::Timestamp(p, TimezoneInfo::None | TimezoneInfo::WithoutTimeZone) => {
            DataType::Timestamp(unit_for_precision(*p, TimeUnit::Microsecond)?, None)
        }
        S::Timestamp(p, TimezoneInfo::WithTimeZone | TimezoneInfo::Tz) => {
            DataType::Timestamp(unit_for_precision(*p, TimeUnit::Microsecond)?, Some("UTC".into()))
        }
        S::Custom(name, args) if name.to_string().eq_ignore_ascii_case("TIMESTAMP_LTZ") => {
            let p = match args.first() {
                None => None,
                Some(a) => Some(
                    a.parse::<u64>()
                        .map_err(|_| WeirError::user(format!("TIMESTAMP_LTZ precision '{a}' is not a number")))?,
                ),
            };
            DataType::Timestamp(unit_for_precision(p, TimeUnit::Microsecond)?, Some("UTC".into()))
        }
        // Flink's collection and structured types; element and field names as DataFusion
        // names them (`item`; `entries`, `key`, `value`), so that values built in SQL
        // (`ARRAY[…]`, `MAP[…]`) have the same types.
        S::Array(datafusion::sql::sqlparser::ast::ArrayElemTypeDef::AngleBracket(element)) => {
            DataType::List(Arc::new(Field::new("item", arrow_type(element)?, true)))
        }
        S::Map(key, value) => {
            let entries = Field::new(
                "entries",
                DataType::Struct(
                    vec![Field::new("key", arrow_type(key)?, false), Field::new("value", arrow_type(value)?, true)]
                        .into(),
                ),
                false,
            );
            DataType::Map(Arc::new(entries), false)
        }
        S::Struct(fields, _) => {
            let mut out = Vec::with_capacity(fields.len());
            for (i, f) in fields.iter().enumerate() {
                let name = f.field_name.as_ref().map_or_else(|| format!("f{i}"), |n| n.value.clone());
                out.push(Field::new(name, arrow_type(&f.field_type)?, true));
            }
            DataType::Struct(out.into())
        }
        other => return Err(WeirError::not_supported(format!("the column type {other}"))),
    })
}

pub use weir_core::sql_type_name;

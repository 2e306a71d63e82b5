//! Weir's column types as PostgreSQL's, and Arrow columns as PostgreSQL array parameters
//! (a whole column in one binary value, so one statement writes a whole batch).

use std::error::Error;

use bytes::{BufMut, BytesMut};
use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, TimeUnit,
    TimestampMicrosecondType, UInt16Type, UInt32Type, UInt8Type,
};
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};
use weir_core::{Result, WeirError};

/// The PostgreSQL type a column is written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgType {
    Bool,
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    Numeric,
    Text,
    Bytea,
    Date,
    Timestamp,
    Timestamptz,
}

impl PgType {
    pub fn of(t: &DataType) -> Option<PgType> {
        Some(match t {
            DataType::Boolean => PgType::Bool,
            DataType::Int8 | DataType::Int16 | DataType::UInt8 => PgType::Int2,
            DataType::Int32 | DataType::UInt16 => PgType::Int4,
            DataType::Int64 | DataType::UInt32 => PgType::Int8,
            DataType::Float32 => PgType::Float4,
            DataType::Float64 => PgType::Float8,
            DataType::Decimal128(..) | DataType::Decimal256(..) => PgType::Numeric,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => PgType::Text,
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView => PgType::Bytea,
            DataType::Date32 => PgType::Date,
            DataType::Timestamp(_, None) => PgType::Timestamp,
            DataType::Timestamp(_, Some(_)) => PgType::Timestamptz,
            _ => return None,
        })
    }

    /// The name in a cast (`$1::int8[]`).
    pub fn name(self) -> &'static str {
        match self {
            PgType::Bool => "bool",
            PgType::Int2 => "int2",
            PgType::Int4 => "int4",
            PgType::Int8 => "int8",
            PgType::Float4 => "float4",
            PgType::Float8 => "float8",
            PgType::Numeric => "numeric",
            PgType::Text => "text",
            PgType::Bytea => "bytea",
            PgType::Date => "date",
            PgType::Timestamp => "timestamp",
            PgType::Timestamptz => "timestamptz",
        }
    }

    /// The array parameter's type: numerics travel as text (exact), the rest natively.
    pub fn param_name(self) -> &'static str {
        match self {
            PgType::Numeric => "text",
            other => other.name(),
        }
    }

    /// Whether a PostgreSQL column of type `typname` (`pg_type.typname`) holds this type's
    /// values as they are: the same family, any length or precision modifier.
    pub fn matches(self, typname: &str) -> bool {
        let same: &[&str] = match self {
            PgType::Bool => &["bool"],
            PgType::Int2 => &["int2"],
            PgType::Int4 => &["int4"],
            PgType::Int8 => &["int8"],
            PgType::Float4 => &["float4"],
            PgType::Float8 => &["float8"],
            PgType::Numeric => &["numeric"],
            PgType::Text => &["text", "varchar", "bpchar", "citext"],
            PgType::Bytea => &["bytea"],
            PgType::Date => &["date"],
            PgType::Timestamp => &["timestamp"],
            PgType::Timestamptz => &["timestamptz"],
        };
        same.contains(&typname)
    }

    /// What a user declares for a PostgreSQL column of this type, for the suggested DDL.
    pub fn ddl(self) -> &'static str {
        match self {
            PgType::Bool => "boolean",
            PgType::Int2 => "smallint",
            PgType::Int4 => "integer",
            PgType::Int8 => "bigint",
            PgType::Float4 => "real",
            PgType::Float8 => "double precision",
            PgType::Numeric => "numeric",
            PgType::Text => "text",
            PgType::Bytea => "bytea",
            PgType::Date => "date",
            PgType::Timestamp => "timestamp",
            PgType::Timestamptz => "timestamptz",
        }
    }
}

pub use weir_core::sql_type_name as sql_name;

/// Microseconds from 1970 to PostgreSQL's epoch, 2000-01-01.
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
const PG_EPOCH_DAYS: i32 = 10_957;

/// A timestamp in PostgreSQL's binary form: microseconds since 2000-01-01.
#[derive(Debug, Clone, Copy)]
struct PgTimestamp(i64);

impl ToSql for PgTimestamp {
    fn to_sql(&self, _: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        out.put_i64(self.0);
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        matches!(*ty, Type::TIMESTAMP | Type::TIMESTAMPTZ)
    }

    to_sql_checked!();
}

/// A date in PostgreSQL's binary form: days since 2000-01-01.
#[derive(Debug, Clone, Copy)]
struct PgDate(i32);

impl ToSql for PgDate {
    fn to_sql(&self, _: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        out.put_i32(self.0);
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::DATE
    }

    to_sql_checked!();
}

pub type Param<'a> = Box<dyn ToSql + Sync + Send + 'a>;

fn values<T: Copy, U>(a: &dyn Array, get: impl Fn(usize) -> T, to: impl Fn(T) -> U) -> Vec<Option<U>> {
    (0..a.len()).map(|i| a.is_valid(i).then(|| to(get(i)))).collect()
}

/// A primitive column's values, each converted by `$to`.
macro_rules! primitive {
    ($a:expr, $t:ty, $to:expr) => {{
        let v = $a.as_primitive::<$t>();
        Box::new(values(v, |i| v.value(i), $to))
    }};
}

/// A string or binary column's values, borrowed.
macro_rules! borrowed {
    ($s:expr) => {{
        let s = $s;
        Box::new((0..s.len()).map(|i| s.is_valid(i).then(|| s.value(i))).collect::<Vec<_>>())
    }};
}

/// Column `a` as one array parameter of type `t`'s [`PgType::param_name`]. Text and bytes
/// are borrowed from the Arrow buffers.
pub fn param(a: &ArrayRef, t: PgType) -> Result<Param<'_>> {
    let wrong = || WeirError::internal(format!("a {} column written as PostgreSQL {}", a.data_type(), t.name()));
    Ok(match (t, a.data_type()) {
        (PgType::Bool, DataType::Boolean) => {
            let b = a.as_boolean();
            Box::new(values(b, |i| b.value(i), |v| v))
        }
        (PgType::Int2, DataType::Int8) => primitive!(a, Int8Type, i16::from),
        (PgType::Int2, DataType::UInt8) => primitive!(a, UInt8Type, i16::from),
        (PgType::Int2, DataType::Int16) => primitive!(a, Int16Type, |x| x),
        (PgType::Int4, DataType::Int32) => primitive!(a, Int32Type, |x| x),
        (PgType::Int4, DataType::UInt16) => primitive!(a, UInt16Type, i32::from),
        (PgType::Int8, DataType::Int64) => primitive!(a, Int64Type, |x| x),
        (PgType::Int8, DataType::UInt32) => primitive!(a, UInt32Type, i64::from),
        (PgType::Float4, DataType::Float32) => primitive!(a, Float32Type, |x| x),
        (PgType::Float8, DataType::Float64) => primitive!(a, Float64Type, |x| x),
        (PgType::Numeric, _) => {
            // Decimal text is exact; PostgreSQL parses it into the column's numeric.
            let text = cast(a, &DataType::Utf8)?;
            let s = text.as_string::<i32>();
            Box::new((0..s.len()).map(|i| s.is_valid(i).then(|| s.value(i).to_string())).collect::<Vec<_>>())
        }
        (PgType::Text, DataType::Utf8) => borrowed!(a.as_string::<i32>()),
        (PgType::Text, DataType::LargeUtf8) => borrowed!(a.as_string::<i64>()),
        (PgType::Text, DataType::Utf8View) => borrowed!(a.as_string_view()),
        (PgType::Bytea, DataType::Binary) => borrowed!(a.as_binary::<i32>()),
        (PgType::Bytea, DataType::LargeBinary) => borrowed!(a.as_binary::<i64>()),
        (PgType::Bytea, DataType::BinaryView) => borrowed!(a.as_binary_view()),
        (PgType::Date, DataType::Date32) => {
            let v = a.as_primitive::<Date32Type>();
            Box::new(values(v, |i| v.value(i), |d| PgDate(d - PG_EPOCH_DAYS)))
        }
        (PgType::Timestamp | PgType::Timestamptz, DataType::Timestamp(unit, tz)) => {
            // PostgreSQL keeps microseconds: nanoseconds are cut (towards the past).
            let micros = match unit {
                TimeUnit::Microsecond => a.clone(),
                _ => cast(a, &DataType::Timestamp(TimeUnit::Microsecond, tz.clone()))?,
            };
            let v = micros.as_primitive::<TimestampMicrosecondType>();
            Box::new(values(v, |i| v.value(i), |us| PgTimestamp(us - PG_EPOCH_MICROS)))
        }
        _ => return Err(wrong()),
    })
}

//! Arrow types by the names Flink SQL gives them, for `DESCRIBE` and messages.

use datafusion::arrow::datatypes::{DataType, TimeUnit};

/// The Flink SQL name of an Arrow type, as `DESCRIBE` shows it.
pub fn sql_type_name(t: &DataType) -> String {
    let precision = |u: &TimeUnit| match u {
        TimeUnit::Second => 0,
        TimeUnit::Millisecond => 3,
        TimeUnit::Microsecond => 6,
        TimeUnit::Nanosecond => 9,
    };
    match t {
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Int8 => "TINYINT".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int32 => "INT".into(),
        DataType::Int64 => "BIGINT".into(),
        DataType::Float32 => "FLOAT".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Decimal128(p, s) => format!("DECIMAL({p}, {s})"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "STRING".into(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "BYTES".into(),
        DataType::Date32 => "DATE".into(),
        DataType::Time32(u) | DataType::Time64(u) => format!("TIME({})", precision(u)),
        DataType::Timestamp(u, None) => format!("TIMESTAMP({})", precision(u)),
        DataType::Timestamp(u, Some(_)) => format!("TIMESTAMP_LTZ({})", precision(u)),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            format!("ARRAY<{}>", sql_type_name(f.data_type()))
        }
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => {
                format!("MAP<{}, {}>", sql_type_name(kv[0].data_type()), sql_type_name(kv[1].data_type()))
            }
            other => other.to_string(),
        },
        DataType::Struct(fields) => {
            let fields: Vec<String> = fields
                .iter()
                .map(|f| format!("`{}` {}", f.name().replace('`', "``"), sql_type_name(f.data_type())))
                .collect();
            format!("ROW<{}>", fields.join(", "))
        }
        other => other.to_string(),
    }
}

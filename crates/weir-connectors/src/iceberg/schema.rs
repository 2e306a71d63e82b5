//! A sink table's columns as an Iceberg schema: types, field ids, and the Arrow schema its
//! Parquet data files are written with (each column carrying its field id, as Iceberg's
//! readers match columns by id, not by name).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use serde_json::{json, Value as Json};
use weir_core::{sql_type_name, Result, WeirError};

/// Iceberg's primitive type for an Arrow type, and the Arrow type its files store.
pub fn iceberg_type(t: &DataType) -> Option<(String, DataType)> {
    Some(match t {
        DataType::Boolean => ("boolean".into(), DataType::Boolean),
        DataType::Int8 | DataType::Int16 | DataType::Int32 => ("int".into(), DataType::Int32),
        DataType::Int64 => ("long".into(), DataType::Int64),
        DataType::Float32 => ("float".into(), DataType::Float32),
        DataType::Float64 => ("double".into(), DataType::Float64),
        DataType::Decimal128(p, s) if *s >= 0 => (format!("decimal({p}, {s})"), t.clone()),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => ("string".into(), DataType::Utf8),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => ("binary".into(), DataType::Binary),
        DataType::Date32 => ("date".into(), DataType::Date32),
        // Iceberg keeps microseconds; milliseconds convert exactly.
        DataType::Timestamp(u, None) if *u != TimeUnit::Nanosecond => {
            ("timestamp".into(), DataType::Timestamp(TimeUnit::Microsecond, None))
        }
        DataType::Timestamp(u, Some(_)) if *u != TimeUnit::Nanosecond => {
            ("timestamptz".into(), DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())))
        }
        _ => return None,
    })
}

/// One column of the Iceberg table.
#[derive(Debug, Clone)]
pub struct Column {
    pub id: i32,
    pub name: String,
    pub iceberg: String,
    pub required: bool,
}

/// The table's columns in the sink's order, with their ids; and the Arrow schema of its files.
#[derive(Debug, Clone)]
pub struct TableSchema {
    pub schema_id: i64,
    pub columns: Vec<Column>,
    /// The key of an upsert table (Iceberg's identifier fields).
    pub identifier_ids: Vec<i32>,
    pub file_schema: SchemaRef,
}

impl TableSchema {
    /// The schema of a new table made from the sink's columns: ids 1, 2, … in order.
    pub fn create(table: &str, schema: &Schema, key: &[String]) -> Result<Self> {
        let mut columns = Vec::new();
        for (i, f) in schema.fields().iter().enumerate() {
            let (iceberg, _) = supported(table, f)?;
            let required = !f.is_nullable() || key.contains(f.name());
            columns.push(Column { id: i as i32 + 1, name: f.name().clone(), iceberg, required });
        }
        let mut created = Self::with_columns(schema, columns, 0)?;
        created.identifier_ids = created.columns.iter().filter(|c| key.contains(&c.name)).map(|c| c.id).collect();
        Ok(created)
    }

    /// An existing table's current schema, checked against the sink's columns: each sink
    /// column must be one of the table's by name with the same type; a table column the sink
    /// lacks must be optional (its files hold nulls there).
    pub fn existing(table: &str, schema: &Schema, metadata: &Json) -> Result<Self> {
        let current = metadata.get("current-schema-id").and_then(Json::as_i64).unwrap_or(0);
        let found = metadata
            .get("schemas")
            .and_then(Json::as_array)
            .and_then(|s| s.iter().find(|s| s.get("schema-id").and_then(Json::as_i64) == Some(current)))
            .or_else(|| metadata.get("schema"))
            .ok_or_else(|| damaged(table, "its metadata has no current schema"))?;
        let mut by_name: HashMap<String, Column> = HashMap::new();
        for f in found.get("fields").and_then(Json::as_array).into_iter().flatten() {
            let (Some(id), Some(name)) = (f.get("id").and_then(Json::as_i64), f.get("name").and_then(Json::as_str))
            else {
                return Err(damaged(table, "a field of its schema has no id or name"));
            };
            let iceberg = match f.get("type") {
                Some(Json::String(t)) => t.clone(),
                _ => "nested".to_string(),
            };
            let required = f.get("required").and_then(Json::as_bool).unwrap_or(false);
            by_name.insert(name.to_string(), Column { id: id as i32, name: name.to_string(), iceberg, required });
        }
        let mut columns = Vec::new();
        for f in schema.fields() {
            let (want, _) = supported(table, f)?;
            let Some(have) = by_name.remove(f.name()) else {
                return Err(WeirError::user(format!(
                    "table '{table}': column '{}' is not a column of the Iceberg table (its columns: {})",
                    f.name(),
                    field_names(found)
                )));
            };
            if normalize(&have.iceberg) != normalize(&want) {
                return Err(WeirError::user(format!(
                    "table '{table}': column '{}' is {} here but {} in the Iceberg table",
                    f.name(),
                    sql_type_name(f.data_type()),
                    have.iceberg
                )));
            }
            columns.push(have);
        }
        if let Some(c) = by_name.values().filter(|c| c.required).min_by_key(|c| c.id) {
            return Err(WeirError::user(format!(
                "table '{table}': the Iceberg table's column '{}' is required, and the sink has no column of that name",
                c.name
            )));
        }
        Self::with_columns(schema, columns, current)
    }

    fn with_columns(schema: &Schema, columns: Vec<Column>, schema_id: i64) -> Result<Self> {
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .zip(&columns)
            .map(|(f, c)| {
                let stored = iceberg_type(f.data_type()).map_or_else(|| f.data_type().clone(), |(_, t)| t);
                Field::new(f.name(), stored, !c.required)
                    .with_metadata([(parquet::arrow::PARQUET_FIELD_ID_META_KEY.to_string(), c.id.to_string())].into())
            })
            .collect();
        Ok(Self { schema_id, columns, identifier_ids: Vec::new(), file_schema: Arc::new(Schema::new(fields)) })
    }

    /// The schema as table metadata holds it.
    pub fn to_json(&self) -> Json {
        let mut j = json!({
            "type": "struct",
            "schema-id": self.schema_id,
            "fields": self.columns.iter().map(|c| json!({
                "id": c.id, "name": c.name, "required": c.required, "type": c.iceberg,
            })).collect::<Vec<_>>(),
        });
        if !self.identifier_ids.is_empty() {
            j["identifier-field-ids"] = json!(self.identifier_ids);
        }
        j
    }

    pub fn last_column_id(&self) -> i32 {
        self.columns.iter().map(|c| c.id).max().unwrap_or(0)
    }

    /// A sink batch in the files' types (Iceberg's widths and units).
    pub fn to_file_batch(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let columns: Vec<ArrayRef> = batch
            .columns()
            .iter()
            .zip(self.file_schema.fields())
            .map(|(a, f)| if a.data_type() == f.data_type() { Ok(a.clone()) } else { cast(a, f.data_type()) })
            .collect::<std::result::Result<_, _>>()?;
        Ok(RecordBatch::try_new(self.file_schema.clone(), columns)?)
    }
}

fn supported(table: &str, f: &Field) -> Result<(String, DataType)> {
    iceberg_type(f.data_type()).ok_or_else(|| {
        WeirError::not_supported(format!(
            "table '{table}', column '{}': Weir's Iceberg sink does not write {} columns (it writes BOOLEAN, \
             INT, BIGINT, FLOAT, DOUBLE, DECIMAL, STRING, BYTES, DATE, TIMESTAMP and TIMESTAMP_LTZ)",
            f.name(),
            sql_type_name(f.data_type())
        ))
    })
}

fn normalize(t: &str) -> String {
    t.chars().filter(|c| !c.is_whitespace()).collect()
}

fn field_names(schema: &Json) -> String {
    schema
        .get("fields")
        .and_then(Json::as_array)
        .map(|f| f.iter().filter_map(|f| f.get("name").and_then(Json::as_str)).collect::<Vec<_>>().join(", "))
        .unwrap_or_default()
}

pub fn damaged(table: &str, why: &str) -> WeirError {
    WeirError::external(format!("table '{table}': the Iceberg table cannot be read: {why}"))
}

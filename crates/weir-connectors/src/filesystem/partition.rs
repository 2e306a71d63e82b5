//! Hive-style partition directories (`col=value/`), as Spark, DuckDB, pyarrow and DataFusion
//! read them: values escaped like Spark does, NULL as `__HIVE_DEFAULT_PARTITION__`; partition
//! columns are not stored in the files, readers take them from the path.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use weir_core::{Result, WeirError};

pub const NULL_PARTITION: &str = "__HIVE_DEFAULT_PARTITION__";

fn needs_escape(c: char) -> bool {
    c.is_control() || "\"#%'*/:=?\\\u{7f}{[]^".contains(c)
}

pub fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if needs_escape(c) {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

pub fn unescape(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&value[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The partition directory of each row of the key columns: `a=1/b=x`.
pub fn directories(columns: &[(&str, &ArrayRef)]) -> Result<Vec<String>> {
    let rows = columns.first().map_or(0, |(_, c)| c.len());
    let mut dirs = vec![String::new(); rows];
    for (name, column) in columns {
        // Timestamps as Spark writes them: a space, not a 'T'.
        let text = match column.data_type() {
            DataType::Timestamp(_, None) => {
                let ms = cast(column, &DataType::Timestamp(TimeUnit::Millisecond, None))?;
                let s = cast(&ms, &DataType::Utf8)?;
                let s = s.as_any().downcast_ref::<StringArray>().cloned().ok_or_else(|| WeirError::internal("utf8"))?;
                Arc::new(StringArray::from_iter(s.iter().map(|v| v.map(|v| v.replacen('T', " ", 1))))) as ArrayRef
            }
            _ => cast(column, &DataType::Utf8)?,
        };
        let text = text.as_any().downcast_ref::<StringArray>().ok_or_else(|| WeirError::internal("utf8"))?;
        for (i, dir) in dirs.iter_mut().enumerate() {
            if !dir.is_empty() {
                dir.push('/');
            }
            dir.push_str(name);
            dir.push('=');
            match text.is_valid(i) {
                true => dir.push_str(&escape(text.value(i))),
                false => dir.push_str(NULL_PARTITION),
            }
        }
    }
    Ok(dirs)
}

/// The values of `keys` in a file's path relative to the table directory (`a=1/b=x/f`).
pub fn values_of(relative: &std::path::Path, keys: &[String]) -> Vec<Option<String>> {
    let mut found: Vec<Option<String>> = vec![None; keys.len()];
    for part in relative.iter() {
        let part = part.to_string_lossy();
        if let Some((k, v)) = part.split_once('=') {
            if let Some(i) = keys.iter().position(|key| key == k) {
                found[i] = (v != NULL_PARTITION).then(|| unescape(v));
            }
        }
    }
    found
}

/// A constant column of `rows` values parsed from a path as `data_type`.
pub fn constant(value: Option<&str>, data_type: &DataType, rows: usize, column: &str) -> Result<ArrayRef> {
    let text: ArrayRef = Arc::new(StringArray::from(vec![value; rows]));
    let options = datafusion::arrow::compute::CastOptions { safe: false, ..Default::default() };
    datafusion::arrow::compute::cast_with_options(&text, data_type, &options).map_err(|e| {
        WeirError::user(format!(
            "partition directory value '{}' of column '{column}' is not a {data_type}: {e}",
            value.unwrap_or("")
        ))
    })
}

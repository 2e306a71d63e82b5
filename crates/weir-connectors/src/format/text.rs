//! Text fields to typed columns, a whole column at a time.
//!
//! Text formats are first split into string columns, then each column is cast to its declared
//! type with one vectorized cast. A value that does not convert becomes null in the cast's
//! output while it was present in the input: comparing the two validity masks finds every bad
//! value without a per-value parse loop of our own.

use datafusion::arrow::array::Scalar;
use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, StringArray};
use datafusion::arrow::compute::kernels::cmp::eq;
use datafusion::arrow::compute::{and_not, cast_with_options, is_null, nullif, or, CastOptions};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
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
        let typed = cast_with_options(&input, field.data_type(), &options)?;
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

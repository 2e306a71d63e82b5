//! Timestamp columns as the text the CSV writer would give them (`%Y-%m-%d %H:%M:%S%.f`: the
//! fraction only when there is one, in 3, 6 or 9 digits), formatted here before the batch
//! reaches arrow's writer. The writer formats each value through chrono, which parses its
//! pattern again for every value: for a stream of timestamps that was a fifth of a whole
//! query's CPU (Nexmark q10).
//!
//! Only the years 0 to 9999 take this path (four digits, no sign); a column with any other
//! value is left to the writer.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use datafusion::arrow::datatypes::{
    DataType, Field, Schema, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType,
};
use datafusion::arrow::record_batch::RecordBatch;
use weir_core::civil::{push_padded, Days};
use weir_core::Result;

/// `batch` with each zone-less timestamp column replaced by its text, or `None` when it has
/// none to replace.
pub fn timestamps_as_text(batch: &RecordBatch) -> Result<Option<RecordBatch>> {
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    let mut fields: Vec<Field> = batch.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
    let mut replaced = false;
    for (i, column) in batch.columns().iter().enumerate() {
        let DataType::Timestamp(unit, None) = column.data_type() else { continue };
        let per_second: i64 = match unit {
            TimeUnit::Second => 1,
            TimeUnit::Millisecond => 1_000,
            TimeUnit::Microsecond => 1_000_000,
            TimeUnit::Nanosecond => 1_000_000_000,
        };
        let values = match unit {
            TimeUnit::Second => column.as_primitive::<TimestampSecondType>().values(),
            TimeUnit::Millisecond => column.as_primitive::<TimestampMillisecondType>().values(),
            TimeUnit::Microsecond => column.as_primitive::<TimestampMicrosecondType>().values(),
            TimeUnit::Nanosecond => column.as_primitive::<TimestampNanosecondType>().values(),
        };
        if let Some(text) = as_text(column.as_ref(), values, per_second) {
            columns[i] = Arc::new(text);
            fields[i] = Field::new(fields[i].name(), DataType::Utf8, fields[i].is_nullable());
            replaced = true;
        }
    }
    if !replaced {
        return Ok(None);
    }
    Ok(Some(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?))
}

/// The column's text, or `None` if a value's year is outside 0 to 9999.
fn as_text(column: &dyn Array, values: &[i64], per_second: i64) -> Option<datafusion::arrow::array::StringArray> {
    let mut out = StringBuilder::with_capacity(values.len(), values.len() * 23);
    let mut text = String::with_capacity(32);
    let mut days_seen = Days::default();
    for (i, &v) in values.iter().enumerate() {
        if column.is_null(i) {
            out.append_null();
            continue;
        }
        let (seconds, fraction) = (v.div_euclid(per_second), v.rem_euclid(per_second));
        let nanos = fraction * (1_000_000_000 / per_second);
        let (days, of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
        let (y, m, d) = days_seen.civil(days);
        if !(0..=9999).contains(&y) {
            return None;
        }
        text.clear();
        push_padded(&mut text, y, 4);
        text.push('-');
        push_padded(&mut text, i64::from(m), 2);
        text.push('-');
        push_padded(&mut text, i64::from(d), 2);
        text.push(' ');
        push_padded(&mut text, of_day / 3600, 2);
        text.push(':');
        push_padded(&mut text, of_day / 60 % 60, 2);
        text.push(':');
        push_padded(&mut text, of_day % 60, 2);
        if nanos != 0 {
            text.push('.');
            match (nanos % 1_000_000, nanos % 1_000) {
                (0, _) => push_padded(&mut text, nanos / 1_000_000, 3),
                (_, 0) => push_padded(&mut text, nanos / 1_000, 6),
                _ => push_padded(&mut text, nanos, 9),
            }
        }
        out.append_value(&text);
    }
    Some(out.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{
        Int64Array, TimestampMicrosecondArray, TimestampMillisecondArray, TimestampNanosecondArray,
        TimestampSecondArray,
    };

    /// What arrow's CSV writer gives with the sink's options, the text this must equal.
    fn written(batch: &RecordBatch) -> String {
        let mut out = Vec::new();
        {
            let mut w = datafusion::arrow::csv::WriterBuilder::new()
                .with_header(false)
                .with_timestamp_format("%Y-%m-%d %H:%M:%S%.f".to_string())
                .with_null(String::new())
                .build(&mut out);
            w.write(batch).expect("write");
        }
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn the_same_text_as_the_writer_for_every_unit() {
        // Before 1970, on a day's edge, leap days, no fraction, and fractions of each length.
        let nanos: Vec<Option<i64>> = vec![
            Some(0),
            Some(-1),
            Some(1_672_531_200_004_000_000),
            Some(951_782_400_000_000_000),
            Some(-2_208_988_800_000_000_000),
            Some(1_500_000_000_123_456_789),
            Some(1_500_000_000_123_456_000),
            Some(1_500_000_000_100_000_000),
            Some(86_399_999_999_999),
            None,
        ];
        let ids = Arc::new(Int64Array::from((0..nanos.len() as i64).collect::<Vec<_>>())) as ArrayRef;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(TimestampNanosecondArray::from(nanos.clone())),
            Arc::new(TimestampMicrosecondArray::from(
                nanos.iter().map(|v| v.map(|v| v.div_euclid(1_000))).collect::<Vec<_>>(),
            )),
            Arc::new(TimestampMillisecondArray::from(
                nanos.iter().map(|v| v.map(|v| v.div_euclid(1_000_000))).collect::<Vec<_>>(),
            )),
            Arc::new(TimestampSecondArray::from(
                nanos.iter().map(|v| v.map(|v| v.div_euclid(1_000_000_000))).collect::<Vec<_>>(),
            )),
        ];
        for column in columns {
            let batch = RecordBatch::try_from_iter([("id", ids.clone()), ("t", column)]).expect("batch");
            let text = timestamps_as_text(&batch).expect("converts").expect("has a timestamp");
            assert_eq!(text.schema().field(1).data_type(), &DataType::Utf8);
            assert_eq!(written(&text), written(&batch), "{:?}", batch.column(1).data_type());
        }
    }

    #[test]
    fn a_year_past_9999_is_left_to_the_writer() {
        let far = Arc::new(TimestampSecondArray::from(vec![0, 253_402_300_800])) as ArrayRef;
        let batch = RecordBatch::try_from_iter([("t", far)]).expect("batch");
        assert!(timestamps_as_text(&batch).expect("converts").is_none());
    }
}

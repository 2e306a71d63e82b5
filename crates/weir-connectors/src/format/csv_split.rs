//! The quickest CSV path, for records without quotes (what machines write): one memchr
//! (SIMD) pass finds delimiters, line breaks and quotes together, only the fields of the
//! projected columns are copied, and each column is typed at once (integers digit by digit,
//! text without a per-value allocation, other types by the same vectorized cast as the
//! careful path). Fields the query does not read are never looked at beyond their delimiters.
//!
//! Anything unusual makes it step aside. A line it cannot split (a quote, a field count that
//! is not the file's) ends its batch before that line, and the next batch starts with it; a
//! value that does not convert fails the batch. Either way arrow-csv's decoder takes that
//! batch, and if that fails too, the careful path finds and reports the bad record.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use datafusion::arrow::compute::CastOptions;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

pub struct Splitter {
    delimiter: u8,
    quote: u8,
    /// For each file column up to the last projected one: its place in the output.
    slots: Vec<Option<usize>>,
    /// Fields in a record of the file.
    file_columns: usize,
    /// The projected columns, in output order.
    schema: SchemaRef,
}

/// One projected column's fields: where each starts and ends in the buffer.
type Spans = Vec<(u32, u32)>;

impl Splitter {
    /// `None` if the projection reads no column (a count of rows: arrow-csv does that well).
    pub fn new(delimiter: u8, quote: u8, file_columns: usize, projection: &[usize], schema: SchemaRef) -> Option<Self> {
        if [delimiter, quote].iter().any(|b| matches!(b, b'\n' | b'\r')) || delimiter == quote {
            return None;
        }
        let last = *projection.iter().max()?;
        let mut slots = vec![None; last + 1];
        for (out, &column) in projection.iter().enumerate() {
            slots[column] = Some(out);
        }
        Some(Self { delimiter, quote, slots, file_columns, schema })
    }

    /// Up to `max_rows` records from the complete lines at the start of `buf` (and, at the
    /// end of the input, its last line without a line break): the batch and the bytes it
    /// took. A line this path cannot split (a quote, a field count that is not the file's)
    /// ends the batch before it; `None` if it is the first, or a value does not convert.
    pub fn decode(&self, buf: &[u8], max_rows: usize, at_end: bool) -> Option<(RecordBatch, usize)> {
        // Buffers are at most a few MiB: offsets fit in u32.
        if buf.len() > u32::MAX as usize {
            return None;
        }
        // Built one by one: `vec![v; n]` clones, and a clone keeps no spare capacity.
        let mut spans: Vec<Spans> = (0..self.schema.fields().len()).map(|_| Vec::with_capacity(max_rows)).collect();
        let (used, rows) = self.split(buf, max_rows, at_end, &mut spans);
        if rows == 0 {
            return None;
        }
        let strict = CastOptions { safe: false, ..Default::default() };
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(spans.len());
        for (field, spans) in self.schema.fields().iter().zip(&spans) {
            columns.push(match field.data_type() {
                DataType::Int64 => Arc::new(integers(buf, spans)?),
                DataType::Utf8 => Arc::new(strings(buf, spans)?),
                other => {
                    let text: ArrayRef = Arc::new(strings(buf, spans)?);
                    super::text::cast_text(&text, other, &strict).ok()?
                }
            });
        }
        let batch = RecordBatch::try_new(self.schema.clone(), columns).ok()?;
        Some((batch, used))
    }

    /// The projected fields' spans of up to `max_rows` whole lines: the bytes and lines taken.
    /// One SIMD pass finds delimiters, line breaks and quotes together (rather than a pass
    /// per line for its end, its quotes and its fields).
    fn split(&self, buf: &[u8], max_rows: usize, at_end: bool, spans: &mut [Spans]) -> (usize, usize) {
        let (mut line_start, mut rows) = (0usize, 0usize);
        let (mut field, mut field_start) = (0usize, 0usize);
        let close = |spans: &mut [Spans], field: usize, start: usize, end: usize| {
            if let Some(Some(out)) = self.slots.get(field) {
                spans[*out].push((start as u32, end as u32));
            }
        };
        // Undo the spans of a line that turned out not to be splittable.
        let drop_line = |spans: &mut [Spans], rows: usize| spans.iter_mut().for_each(|s| s.truncate(rows));
        for at in memchr::memchr3_iter(self.delimiter, b'\n', self.quote, buf) {
            let byte = buf[at];
            if byte == self.delimiter {
                close(spans, field, field_start, at);
                field += 1;
                field_start = at + 1;
                if field >= self.file_columns {
                    drop_line(spans, rows);
                    return (line_start, rows);
                }
            } else if byte == b'\n' {
                let end = if at > field_start && buf[at - 1] == b'\r' { at - 1 } else { at };
                close(spans, field, field_start, end);
                if field + 1 != self.file_columns {
                    drop_line(spans, rows);
                    return (line_start, rows);
                }
                rows += 1;
                line_start = at + 1;
                (field, field_start) = (0, at + 1);
                if rows == max_rows {
                    return (line_start, rows);
                }
            } else {
                drop_line(spans, rows);
                return (line_start, rows);
            }
        }
        // The last line without a line break, at the end of the input.
        if at_end && line_start < buf.len() {
            let end = if buf[buf.len() - 1] == b'\r' { buf.len() - 1 } else { buf.len() };
            close(spans, field, field_start, end.max(field_start));
            if field + 1 == self.file_columns {
                return (buf.len(), rows + 1);
            }
        }
        drop_line(spans, rows);
        (line_start, rows)
    }
}

/// An empty field is NULL, whatever the column's type (as arrow-csv and the careful path read
/// it).
fn nulls(spans: &Spans) -> Option<NullBuffer> {
    let valid: Vec<bool> = spans.iter().map(|(s, e)| e > s).collect();
    let nulls = NullBuffer::from(valid);
    (nulls.null_count() > 0).then_some(nulls)
}

fn integers(buf: &[u8], spans: &Spans) -> Option<Int64Array> {
    let mut values = Vec::with_capacity(spans.len());
    for &(s, e) in spans {
        values.push(if s == e { 0 } else { parse_i64(&buf[s as usize..e as usize])? });
    }
    Some(Int64Array::new(ScalarBuffer::from(values), nulls(spans)))
}

/// Decimal digits with an optional sign; `None` for anything else or an overflow.
fn parse_i64(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(i64::from(d - b'0'))?;
    }
    Some(if negative { -n } else { n })
}

fn strings(buf: &[u8], spans: &Spans) -> Option<StringArray> {
    let total: usize = spans.iter().map(|(s, e)| (e - s) as usize).sum();
    let mut values = Vec::with_capacity(total);
    let mut offsets = Vec::with_capacity(spans.len() + 1);
    offsets.push(0i32);
    for &(s, e) in spans {
        values.extend_from_slice(&buf[s as usize..e as usize]);
        offsets.push(i32::try_from(values.len()).ok()?);
    }
    // Validates the text as UTF-8, once for the column.
    StringArray::try_new(OffsetBuffer::new(ScalarBuffer::from(offsets)), values.into(), nulls(spans)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{Field, Schema, TimeUnit};

    fn splitter(projection: &[usize]) -> Splitter {
        let all = Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("t", DataType::Timestamp(TimeUnit::Millisecond, None), true),
            Field::new("d", DataType::Float64, true),
        ]);
        Splitter::new(b',', b'"', 4, projection, Arc::new(all.project(projection).expect("projection")))
            .expect("a splitter")
    }

    #[test]
    fn projected_fields_are_typed_and_the_rest_skipped() {
        let buf = b"1,x,2023-01-01 00:00:00.004,1.5\n-2,,2023-01-01 00:00:01,\r\n3,z,,2\npartial";
        let (batch, used) = splitter(&[2, 0]).decode(buf, 100, false).expect("decoded");
        assert_eq!(used, buf.len() - "partial".len());
        assert_eq!(batch.num_rows(), 3);
        let a = batch.column(1).as_any().downcast_ref::<Int64Array>().expect("ints");
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![Some(1), Some(-2), Some(3)]);
        assert_eq!(batch.column(0).null_count(), 1, "an empty timestamp is NULL");
        let (batch, _) = splitter(&[1, 3]).decode(buf, 2, false).expect("decoded");
        assert_eq!(batch.num_rows(), 2, "at most max_rows");
        assert_eq!(batch.column(0).null_count(), 1, "an empty string is NULL");
        // The last line without a break, at the end of the input.
        let (batch, used) = splitter(&[0]).decode(b"7,a,,", 10, true).expect("decoded");
        assert_eq!((batch.num_rows(), used), (1, 5));
    }

    #[test]
    fn anything_unusual_steps_aside() {
        for bad in [
            &b"1,\"x\",,\n"[..],           // a quote
            b"1,x,\n",                     // too few fields
            b"1,x,,,\n",                   // too many
            b"1.5,x,,\n",                  // not an integer
            b"99999999999999999999,x,,\n", // overflow
            b"1,x,yesterday,\n",           // not a timestamp
        ] {
            assert!(splitter(&[0, 2]).decode(bad, 10, false).is_none(), "{}", String::from_utf8_lossy(bad));
        }
        assert!(splitter(&[1]).decode(b"1,\xff,,\n", 10, false).is_none(), "not UTF-8");
        assert!(splitter(&[0]).decode(b"1,x,,", 10, false).is_none(), "no complete line yet");
    }

    #[test]
    fn a_line_it_cannot_split_ends_the_batch_before_it() {
        for bad in ["3,\"z\",,\n", "3,z,,,\n", "3,z\n"] {
            let buf = format!("1,x,,\n2,y,,\r\n{bad}4,w,,\n");
            let (batch, used) = splitter(&[1, 0]).decode(buf.as_bytes(), 100, true).expect("the lines before");
            assert_eq!((batch.num_rows(), used), (2, "1,x,,\n2,y,,\r\n".len()), "{bad:?}");
            let s = batch.column(0).as_any().downcast_ref::<StringArray>().expect("strings");
            assert_eq!(s.iter().collect::<Vec<_>>(), vec![Some("x"), Some("y")], "{bad:?}");
            assert!(splitter(&[1, 0]).decode(&buf.as_bytes()[used..], 100, true).is_none(), "{bad:?}");
        }
    }
}

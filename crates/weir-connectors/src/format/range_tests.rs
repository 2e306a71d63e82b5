//! Byte ranges of a text file: source tasks that split a file read each record exactly once,
//! wherever the split points fall (inside a record, on a newline, at either end).

use std::sync::Arc;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};

use super::{Format, ParsePolicy, Portion};

fn read(format: &Format, path: &std::path::Path, portion: Portion, schema: &SchemaRef) -> Vec<i64> {
    let mut reader = format.reader(path, portion, None, schema, &[0, 1], 3).expect("a reader");
    let mut values = Vec::new();
    while let Some(batch) = reader.next_batch().expect("a batch") {
        let batch: RecordBatch = batch;
        values.extend(batch.column(0).as_primitive::<Int64Type>().values().iter().copied());
    }
    values
}

#[test]
fn split_text_files_are_read_once_whatever_the_split_points() {
    let schema: SchemaRef =
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("s", DataType::Utf8, true)]));
    let dir = std::env::temp_dir().join(format!("weir-ranges-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let path = dir.join("t.txt");
    // Records of different lengths, one with a quoted delimiter.
    let csv: String =
        (0..40).map(|i| format!("{i},{}\n", if i % 7 == 3 { "\"a,b\"".into() } else { "x".repeat(i % 5) })).collect();
    let json: String = (0..40).map(|i| format!("{{\"id\":{i},\"s\":\"{}\"}}\n", "y".repeat(i % 6))).collect();
    let cases = [
        (csv, Format::Csv { delimiter: b',', quote: b'"', header: false, policy: ParsePolicy::Fail }),
        (json, Format::Json { policy: ParsePolicy::Fail }),
    ];
    for (text, format) in cases {
        std::fs::write(&path, &text).expect("write");
        let len = text.len() as u64;
        let all: Vec<i64> = (0..40).collect();
        for parts in [1u64, 2, 3, 7, 40, 90] {
            let mut read_all = Vec::new();
            for p in 0..parts {
                let (start, end) = (len * p / parts, if p + 1 == parts { u64::MAX } else { len * (p + 1) / parts });
                read_all.extend(read(&format, &path, Portion::Bytes { start, end }, &schema));
            }
            read_all.sort();
            assert_eq!(read_all, all, "{format:?}: {parts} ranges");
        }
        // Every single split point, the empty ranges at either end included.
        for cut in 0..=len {
            let mut both = read(&format, &path, Portion::Bytes { start: 0, end: cut }, &schema);
            both.extend(read(&format, &path, Portion::Bytes { start: cut, end: u64::MAX }, &schema));
            both.sort();
            assert_eq!(both, all, "{format:?}: split at byte {cut}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

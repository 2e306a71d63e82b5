//! The CSV reader across its paths: the splitter stepping aside in the middle of a file (a
//! quoted record after many plain ones) loses, duplicates and reorders nothing, and the
//! quoted record is read as arrow-csv reads it.

use std::sync::Arc;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};

use super::{Format, ParsePolicy, Portion};

#[test]
fn a_quoted_record_mid_file_is_read_by_the_decoder_after_the_splitter() {
    let schema: SchemaRef = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("s", DataType::Utf8, true),
        Field::new("n", DataType::Int64, true),
    ]));
    let dir = std::env::temp_dir().join(format!("weir-csv-paths-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let path = dir.join("t.csv");
    let text: String = (0..3000)
        .map(|i| match i {
            1234 => format!("{i},\"a,b\",{}\n", i * 2),
            _ => format!("{i},x{},{}\n", i % 10, i * 2),
        })
        .collect();
    std::fs::write(&path, &text).expect("write");
    let format = Format::Csv { delimiter: b',', quote: b'"', header: false, policy: ParsePolicy::Fail };
    // Projections that read the quoted column and that do not.
    for projection in [vec![0, 1, 2], vec![2, 0]] {
        let mut reader = format.reader(&path, Portion::Whole, None, &schema, &projection, 100).expect("a reader");
        let (mut ids, mut doubled, mut quoted) = (Vec::new(), Vec::new(), None);
        while let Some(batch) = reader.next_batch().expect("a batch") {
            let batch: RecordBatch = batch;
            let id = projection.iter().position(|c| *c == 0).expect("id projected");
            let n = projection.iter().position(|c| *c == 2).expect("n projected");
            ids.extend(batch.column(id).as_primitive::<Int64Type>().values().iter().copied());
            doubled.extend(batch.column(n).as_primitive::<Int64Type>().values().iter().copied());
            if let Some(s) = projection.iter().position(|c| *c == 1) {
                let strings = batch.column(s).as_string::<i32>();
                let ids = batch.column(id).as_primitive::<Int64Type>();
                for row in 0..batch.num_rows() {
                    if ids.value(row) == 1234 {
                        quoted = Some(strings.value(row).to_string());
                    }
                }
            }
        }
        assert_eq!(ids, (0..3000).collect::<Vec<i64>>(), "{projection:?}: every record once, in order");
        assert_eq!(doubled, (0..3000).map(|i| i * 2).collect::<Vec<i64>>(), "{projection:?}");
        if projection.contains(&1) {
            assert_eq!(quoted.as_deref(), Some("a,b"), "the quoted field, unquoted");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

//! `ORDER BY` an event time on chunks written as text ([`Chunk::from_pretty`]): the order
//! rows leave in, what is late, and a restore in the middle.

use std::sync::Arc;

use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use weir_core::{Operator, Watermark};

use crate::changelog_tests::{chunk, pretty};
use crate::operators::{Keyed, StateContext, TimeSort, TimeSortSpec};

fn sort() -> Keyed<TimeSort> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("t", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("v", DataType::Int64, true),
    ]));
    // ORDER BY t, v DESC (NULLs lowest: last when descending).
    let spec = TimeSortSpec { time: 1, order: vec![(2, SortOptions { descending: true, nulls_first: false })], schema };
    Keyed(TimeSort::new(spec, &StateContext::memory()).expect("sort"))
}

const ROWS: &str = "k:T t:TS v:I";

#[test]
fn rows_leave_in_time_order_then_by_the_other_keys_as_the_watermark_passes() {
    let mut s = sort();
    let mut out = Vec::new();
    s.process_chunk(chunk(&format!("{ROWS}\n+I a 5 1\n+I b 3 7\n+I c 5 9\n+I d 4 .\n+I e 5 .")), &mut out)
        .expect("rows");
    assert_eq!(pretty(&out), "");
    s.process_watermark(Watermark(4), &mut out).expect("watermark");
    let ts = |ms: i64| format!("1970-01-01 00:00:00.{ms:03}");
    assert_eq!(pretty(&out), format!("+I b {} 7\n+I d {} .\n", ts(3), ts(4)));
    out.clear();
    // Behind the watermark but after the last time emitted: still sorted in, as Flink does;
    // at or before the last time emitted: late.
    s.process_chunk(chunk(&format!("{ROWS}\n+I f 4 2\n+I g 2 1\n+I h 5 3\n+I i . 1")), &mut out).expect("rows");
    assert_eq!(s.late_rows(), 3);
    s.process_watermark(Watermark(5), &mut out).expect("watermark");
    assert_eq!(
        pretty(&out),
        format!("+I c {} 9\n+I h {} 3\n+I a {} 1\n+I e {} .\n", ts(5), ts(5), ts(5), ts(5)),
        "the row at 4 ms came after 4 ms had gone out: late"
    );
}

#[test]
fn a_restored_sort_emits_what_waited_at_the_checkpoint_and_keeps_its_late_bound() {
    let mut s = sort();
    let mut out = Vec::new();
    s.process_chunk(chunk(&format!("{ROWS}\n+I a 2 1\n+I b 6 1\n+I c 8 1")), &mut out).expect("rows");
    s.process_watermark(Watermark(3), &mut out).expect("watermark");
    out.clear();
    let snapshot = s.snapshot().expect("snapshot").expect("state");
    let mut restored = sort();
    restored.restore(&[snapshot.state.as_slice()]).expect("restore");
    restored.process_chunk(chunk(&format!("{ROWS}\n+I d 2 5\n+I e 7 1")), &mut out).expect("rows");
    assert_eq!(restored.late_rows(), 1, "2 ms went out before the checkpoint");
    restored.finish(&mut out).expect("finish");
    let ts = |ms: i64| format!("1970-01-01 00:00:00.{ms:03}");
    assert_eq!(pretty(&out), format!("+I b {} 1\n+I e {} 1\n+I c {} 1\n", ts(6), ts(7), ts(8)));
}

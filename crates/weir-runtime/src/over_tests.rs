//! OVER aggregates on chunks written as text ([`Chunk::from_pretty`]): rows emitted in time
//! order as the watermark passes them, frames sliding, peers, late rows and a restore.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::common::ScalarValue;
use weir_core::{Operator, Watermark};

use crate::changelog_tests::{chunk, pretty};
use crate::operators::{AggKind, AggregateDef, Keyed, OverAggregate, OverFunction, OverSpec, Preceding, StateContext};

const ROWS: &str = "k:T t:TS v:I";

/// `k`, `t`, `v` partitioned by `k`, ordered by `t` (event time), with `functions` over `v`.
fn over(preceding: Preceding, range: bool, functions: Vec<OverFunction>) -> Keyed<OverAggregate> {
    over_at(preceding, range, functions, false)
}

/// The same, `t` a processing time if `proctime`.
fn over_at(preceding: Preceding, range: bool, functions: Vec<OverFunction>, proctime: bool) -> Keyed<OverAggregate> {
    let input = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("t", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("v", DataType::Int64, true),
    ]));
    let mut fields: Vec<Field> = input.fields().iter().map(|f| f.as_ref().clone()).collect();
    for (i, _) in functions.iter().enumerate() {
        fields.push(Field::new(format!("f{i}"), DataType::Int64, true));
    }
    let spec = OverSpec {
        partition: vec![0],
        time: 1,
        proctime,
        preceding,
        range,
        functions,
        input_schema: input,
        schema: Arc::new(Schema::new(fields)),
    };
    Keyed(OverAggregate::new(spec, &StateContext::memory()).expect("over"))
}

fn agg(kind: AggKind) -> OverFunction {
    let arg = (kind != AggKind::Count).then_some(2);
    OverFunction::Aggregate(AggregateDef::new(kind, arg, DataType::Int64, DataType::Int64))
}

fn ts(ms: i64) -> String {
    format!("1970-01-01 00:00:00.{ms:03}")
}

fn feed(op: &mut Keyed<OverAggregate>, rows: &str, watermark: i64) -> String {
    let mut out = Vec::new();
    op.process_chunk(chunk(&format!("{ROWS}\n{rows}")), &mut out).expect("rows");
    op.process_watermark(Watermark(watermark), &mut out).expect("watermark");
    pretty(&out)
}

#[test]
fn a_rows_frame_slides_over_each_partition_in_time_order_across_firings() {
    // SUM, MIN, MAX, COUNT(*) over the row and the one before it.
    let mut o = over(
        Preceding::Rows(1),
        false,
        vec![agg(AggKind::Sum), agg(AggKind::Min), agg(AggKind::Max), agg(AggKind::Count)],
    );
    let got = feed(&mut o, "+I a 3 5\n+I b 1 7\n+I a 1 2\n+I a 2 .\n+I a 9 1", 4);
    // Time order (rows of one time: by key group); a's NULL counts as a row but not a value.
    let (first, rest) = got.split_at(got.match_indices('\n').nth(1).map_or(0, |(i, _)| i + 1));
    let mut first: Vec<&str> = first.lines().collect();
    first.sort();
    assert_eq!(first, [format!("+I a {} 2 2 2 2 1", ts(1)), format!("+I b {} 7 7 7 7 1", ts(1))]);
    assert_eq!(rest, format!("+I a {} . 2 2 2 2\n+I a {} 5 5 5 5 2\n", ts(2), ts(3)));
    // The next firing replays the kept tail: the frame of the row at 9 is 5 and 1.
    let got = feed(&mut o, "+I a 6 4", 10);
    assert_eq!(got, format!("+I a {} 4 9 4 5 2\n+I a {} 1 5 1 4 2\n", ts(6), ts(9)));
}

#[test]
fn range_peers_share_their_values_and_rows_count_one_by_one() {
    let functions = || vec![agg(AggKind::Sum), agg(AggKind::Count)];
    let mut range = over(Preceding::Unbounded, true, functions());
    let got = feed(&mut range, "+I a 1 1\n+I a 2 10\n+I a 2 20\n+I a 3 100", 5);
    assert_eq!(
        got,
        format!("+I a {} 1 1 1\n+I a {} 10 31 3\n+I a {} 20 31 3\n+I a {} 100 131 4\n", ts(1), ts(2), ts(2), ts(3))
    );
    let mut rows = over(Preceding::Unbounded, false, functions());
    let got = feed(&mut rows, "+I a 1 1\n+I a 2 10\n+I a 2 20\n+I a 3 100", 5);
    assert_eq!(
        got,
        format!("+I a {} 1 1 1\n+I a {} 10 11 2\n+I a {} 20 31 3\n+I a {} 100 131 4\n", ts(1), ts(2), ts(2), ts(3))
    );
}

#[test]
fn a_range_frame_retracts_rows_older_than_its_interval_and_keeps_min_and_max_right() {
    // RANGE BETWEEN 2 ms PRECEDING: the rows at t-2 ..= t.
    let mut o = over(Preceding::Range(2), true, vec![agg(AggKind::Min), agg(AggKind::Max), agg(AggKind::Sum)]);
    let got = feed(&mut o, "+I a 1 5\n+I a 2 9\n+I a 3 1\n+I a 4 7\n+I a 7 3", 5);
    assert_eq!(
        got,
        format!("+I a {} 5 5 5 5\n+I a {} 9 5 9 14\n+I a {} 1 1 9 15\n+I a {} 7 1 9 17\n", ts(1), ts(2), ts(3), ts(4))
    );
    // 7 waits for the watermark; its frame (5..=7) holds no earlier row.
    let got = feed(&mut o, "", 8);
    assert_eq!(got, format!("+I a {} 3 3 3 3\n", ts(7)));
}

#[test]
fn first_last_and_lag_skip_or_keep_nulls_as_flink_does() {
    let lag = OverFunction::Lag {
        arg: 2,
        arg_type: DataType::Int64,
        offset: 2,
        default: ScalarValue::Int64(Some(-1)),
        output: DataType::Int64,
    };
    let first = OverFunction::Aggregate(AggregateDef::new(
        AggKind::Bag(crate::operators::BagKind::FirstValue),
        Some(2),
        DataType::Int64,
        DataType::Int64,
    ));
    let last = OverFunction::Aggregate(AggregateDef::new(
        AggKind::Bag(crate::operators::BagKind::LastValue),
        Some(2),
        DataType::Int64,
        DataType::Int64,
    ));
    let mut o = over(Preceding::Unbounded, false, vec![first, last, lag]);
    let got = feed(&mut o, "+I a 1 .\n+I a 2 4\n+I a 3 .\n+I a 4 6", 2);
    assert_eq!(got, format!("+I a {} . . . -1\n+I a {} 4 4 4 -1\n", ts(1), ts(2)));
    // LAG reads the row two back, kept from the firing before; a NULL there gives the
    // default, as Flink's LAG does.
    let got = feed(&mut o, "", 9);
    assert_eq!(got, format!("+I a {} . 4 4 -1\n+I a {} 6 4 6 4\n", ts(3), ts(4)));
}

#[test]
fn late_rows_follow_flinks_rule_for_each_frame_and_a_restore_keeps_the_partitions() {
    // Unbounded: a row at or behind the watermark is late.
    let mut o = over(Preceding::Unbounded, true, vec![agg(AggKind::Count)]);
    feed(&mut o, "+I a 5 1", 6);
    feed(&mut o, "+I a 6 1\n+I b 4 1", 6);
    assert_eq!(o.late_rows(), 2);
    // Bounded: late only at or before the partition's last processed time; `b` has none.
    let mut o = over(Preceding::Rows(3), false, vec![agg(AggKind::Count)]);
    feed(&mut o, "+I a 5 1", 6);
    let got = feed(&mut o, "+I a 5 2\n+I b 4 1\n+I a . 3", 7);
    assert_eq!(o.late_rows(), 2, "a at 5 ms (processed) and a row without a time");
    assert_eq!(got, format!("+I b {} 1 1\n", ts(4)));

    let snapshot = o.snapshot().expect("snapshot").expect("state");
    let mut restored = over(Preceding::Rows(3), false, vec![agg(AggKind::Count)]);
    restored.restore(&[snapshot.state.as_slice()]).expect("restore");
    let got = feed(&mut restored, "+I a 8 1\n+I b 9 1", 10);
    assert_eq!(got, format!("+I a {} 1 2\n+I b {} 1 2\n", ts(8), ts(9)));
}

#[test]
fn in_processing_time_rows_go_through_the_frame_as_they_come() {
    let mut o = over_at(Preceding::Rows(1), false, vec![agg(AggKind::Sum)], true);
    let mut out = Vec::new();
    // Arrival order decides, not the time column; nothing waits for a watermark.
    o.process_chunk(chunk(&format!("{ROWS}\n+I a 9 1\n+I a 3 2\n+I b 5 7")), &mut out).expect("rows");
    assert_eq!(pretty(&out), format!("+I a {} 1 1\n+I a {} 2 3\n+I b {} 7 7\n", ts(9), ts(3), ts(5)));
    out.clear();
    o.process_chunk(chunk(&format!("{ROWS}\n+I a 1 4")), &mut out).expect("rows");
    assert_eq!(pretty(&out), format!("+I a {} 4 6\n", ts(1)));
    assert_eq!(o.late_rows(), 0);
}

//! MATCH_RECOGNIZE on chunks written as text ([`Chunk::from_pretty`]): a finished match held
//! back by an earlier partial match until `WITHIN` drops it (by the watermark alone, in a
//! partition without new rows), across a snapshot and restore of partial matches that share
//! rows.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::common::ScalarValue;
use weir_core::{Operator, Watermark};

use crate::changelog_tests::{chunk, pretty};
use crate::operators::{BinOp, Keyed, MatchExpr, MatchRecognize, MatchSpec, Nav, Pattern, Skip, StateContext, Step};

const ROWS: &str = "k:T t:TS v:I";

fn col(nav: Nav) -> MatchExpr {
    // Slot 1 is `v` (slot 0 is the partition column `k`).
    MatchExpr::Column { nav, slot: 1 }
}

fn lit(v: i64) -> MatchExpr {
    MatchExpr::Literal(ScalarValue::Int64(Some(v)))
}

fn bin(op: BinOp, l: MatchExpr, r: MatchExpr) -> MatchExpr {
    MatchExpr::Binary { op, left: Box::new(l), right: Box::new(r) }
}

/// `PARTITION BY k ORDER BY t MEASURES FIRST(A.v), C.v AFTER MATCH SKIP PAST LAST ROW
/// PATTERN (A B*? C) WITHIN 5 ms DEFINE A AS A.v < 10, B AS B.v > 0, C AS C.v = FIRST(A.v) + 10`.
fn matcher() -> Keyed<MatchRecognize> {
    let input = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("t", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("v", DataType::Int64, true),
    ]));
    let (a, b, c) = (0u16, 1u16, 2u16);
    let last = |var| Nav::Last { var: Some(var), offset: 0 };
    let first_a = Nav::First { var: Some(a), offset: 0 };
    let pattern = Pattern {
        steps: vec![
            Step { var: a, min: 1, max: Some(1), greedy: true, guarded: false },
            Step { var: b, min: 0, max: None, greedy: false, guarded: false },
            Step { var: c, min: 1, max: Some(1), greedy: true, guarded: false },
        ],
        conditions: vec![
            Some(bin(BinOp::Lt, col(last(a)), lit(10))),
            Some(bin(BinOp::Gt, col(last(b)), lit(0))),
            Some(bin(BinOp::Eq, col(last(c)), bin(BinOp::Plus, col(first_a), lit(10)))),
        ],
        names: vec!["A".into(), "B".into(), "C".into()],
        skip: Skip::PastLastRow,
        within: Some(5),
    };
    let spec = MatchSpec {
        partition: vec![0],
        time: 1,
        proctime: false,
        columns: vec![0, 2],
        pattern,
        measures: vec![col(first_a), col(last(c))],
        input_schema: input,
        schema: Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("a", DataType::Int64, true),
            Field::new("c", DataType::Int64, true),
        ])),
    };
    Keyed(MatchRecognize::new(spec, &StateContext::memory()).expect("match"))
}

fn feed(op: &mut Keyed<MatchRecognize>, rows: &str, watermark: i64) -> String {
    let mut out = Vec::new();
    if !rows.is_empty() {
        op.process_chunk(chunk(&format!("{ROWS}\n{rows}")), &mut out).expect("rows");
    }
    op.process_watermark(Watermark(watermark), &mut out).expect("watermark");
    pretty(&out)
}

#[test]
fn a_finished_match_waits_for_an_earlier_partial_match_until_within_drops_it() {
    let mut m = matcher();
    // a: A@1 (v 1), then v 2 (B of the match from 1, A of a match from 2).
    assert_eq!(feed(&mut m, "+I a 1 1\n+I a 2 2", 2), "");
    // Partial matches that share rows, through a snapshot and a restore.
    let snapshot = m.snapshot().expect("snapshot").expect("state");
    let mut m = matcher();
    m.restore(&[snapshot.state.as_slice()]).expect("restore");
    // v 12 = 2 + 10 finishes the match from 2; the one from 1 (12 is not 11) goes on, earlier:
    // the finished match waits. A row of another partition moves the watermark only.
    assert_eq!(feed(&mut m, "+I a 3 12\n+I b 4 50", 4), "");
    // At 6 the match from 1 is 5 ms old: dropped, and the one from 2 goes out, with no new
    // row in `a`.
    assert_eq!(feed(&mut m, "", 6), "+I a 2 12\n");
    // A late row (at or behind the watermark) is dropped and counted.
    assert_eq!(feed(&mut m, "+I a 5 1", 7), "");
    assert_eq!(m.late_rows(), 1);
}

#[test]
fn damaged_match_state_is_an_error_not_a_default() {
    let mut m = matcher();
    feed(&mut m, "+I a 1 1", 1);
    let mut snapshot = m.snapshot().expect("snapshot").expect("state");
    let n = snapshot.state.len();
    snapshot.state.truncate(n - 3);
    let mut restored = matcher();
    let got = restored.restore(&[snapshot.state.as_slice()]);
    assert!(got.is_err(), "a truncated snapshot restored");
}

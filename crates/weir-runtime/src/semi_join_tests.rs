//! Semi and anti joins on chunks written as text ([`Chunk::from_pretty`]): a row of the
//! emitted side comes and goes as its number of partners crosses zero.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::changelog_tests::steps;
use crate::operators::{JoinKind, JoinSpec, Keyed, StateContext, StreamJoin};

fn schema(fields: &[(&str, DataType)]) -> SchemaRef {
    Arc::new(Schema::new(fields.iter().map(|(n, t)| Field::new(*n, t.clone(), true)).collect::<Vec<_>>()))
}

fn semi(kind: JoinKind, appending: [bool; 2], nulls_equal: bool) -> Keyed<StreamJoin> {
    let left = schema(&[("k", DataType::Utf8), ("v", DataType::Int64)]);
    let right = schema(&[("k2", DataType::Utf8), ("w", DataType::Int64)]);
    let both = schema(&[("k", DataType::Utf8), ("v", DataType::Int64), ("k2", DataType::Utf8), ("w", DataType::Int64)]);
    let emitted = match kind.one_side() {
        Some((1, _)) => right.clone(),
        _ => left.clone(),
    };
    let spec = JoinSpec {
        kind,
        keys: [vec![0], vec![0]],
        schemas: [left, right],
        filter: None,
        pair_schema: both,
        schema: emitted,
        ttl: None,
        interval: None,
        appending,
        nulls_equal,
    };
    Keyed(StreamJoin::new(spec, &StateContext::memory()).expect("join"))
}

#[test]
fn a_semi_join_emits_a_row_once_at_its_first_partner_and_retracts_it_after_its_last() {
    let mut j = semi(JoinKind::LeftSemi, [false, false], false);
    let got = steps(
        &mut j,
        &[
            (0, "k:T v:I\n+I a 1\n+I b 2\n+I . 3"),
            (1, "k2:T w:I\n+I a 10\n+I a 11\n+I . 12"),
            (1, "k2:T w:I\n-D a 10"),
            (1, "k2:T w:I\n-U a 11\n+U b 11"),
            (0, "k:T v:I\n+I b 2\n-D a 1"),
        ],
    );
    assert_eq!(got[0], "");
    // Two partners, one row out; a NULL key meets nothing.
    assert_eq!(got[1], "+I a 1\n");
    assert_eq!(got[2], "");
    assert_eq!(got[3], "-D a 1\n+I b 2\n");
    // A second copy of b has its partner already; a has none, so its retraction is silent.
    assert_eq!(got[4], "+I b 2\n");
}

#[test]
fn an_anti_join_emits_rows_without_partners_and_takes_them_back_when_one_comes() {
    let mut j = semi(JoinKind::LeftAnti, [false, false], false);
    let got = steps(
        &mut j,
        &[
            (0, "k:T v:I\n+I a 1\n+I a 1\n+I b 2\n+I . 3"),
            (1, "k2:T w:I\n+I a 10\n+I a 11"),
            (1, "k2:T w:I\n-D a 10"),
            (1, "k2:T w:I\n-D a 11"),
            (0, "k:T v:I\n-D b 2\n-D . 3"),
        ],
    );
    // A NULL key has no partner: emitted at once, as NOT EXISTS does.
    assert_eq!(got[0], "+I a 1\n+I a 1\n+I b 2\n+I . 3\n");
    assert_eq!(got[1], "-D a 1\n-D a 1\n");
    assert_eq!(got[2], "");
    assert_eq!(got[3], "+I a 1\n+I a 1\n");
    assert_eq!(got[4], "-D b 2\n-D . 3\n");
}

#[test]
fn a_retraction_before_its_insert_is_passed_on_and_the_insert_then_restores_the_row() {
    // An updating input may deliver a row's retraction first (another task's order): Flink's
    // semi and anti joins pass it on by its partners, and so does Weir.
    let mut j = semi(JoinKind::LeftAnti, [false, false], false);
    let got = steps(&mut j, &[(0, "k:T v:I\n-D a 1"), (0, "k:T v:I\n+I a 1"), (1, "k2:T w:I\n+I a 5")]);
    assert_eq!(got, ["-D a 1\n", "+I a 1\n", "-D a 1\n"]);
}

#[test]
fn a_semi_join_over_appending_inputs_only_appends_and_a_right_semi_join_emits_the_right_side() {
    let mut j = semi(JoinKind::LeftSemi, [true, true], false);
    let got = steps(&mut j, &[(0, "k:T v:I\n+I a 1\n+I a 2"), (1, "k2:T w:I\n+I a 10"), (1, "k2:T w:I\n+I a 11")]);
    assert_eq!(got, ["", "+I a 1\n+I a 2\n", ""]);
    let mut j = semi(JoinKind::RightAnti, [true, true], false);
    let got = steps(&mut j, &[(1, "k2:T w:I\n+I a 10\n+I b 20"), (0, "k:T v:I\n+I a 1\n+I a 2")]);
    assert_eq!(got, ["+I a 10\n+I b 20\n", "-D a 10\n"]);
}

#[test]
fn intersect_and_except_compare_null_keys_as_equal() {
    let mut j = semi(JoinKind::LeftSemi, [false, false], true);
    let got = steps(&mut j, &[(0, "k:T v:I\n+I . 1\n+I a 2"), (1, "k2:T w:I\n+I . 9")]);
    assert_eq!(got, ["", "+I . 1\n"]);
    let mut j = semi(JoinKind::LeftAnti, [false, false], true);
    let got = steps(&mut j, &[(1, "k2:T w:I\n+I . 9"), (0, "k:T v:I\n+I . 1\n+I a 2")]);
    assert_eq!(got, ["", "+I a 2\n"]);
}

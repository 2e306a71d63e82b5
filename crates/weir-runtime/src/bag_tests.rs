//! The group aggregate's FIRST_VALUE, LAST_VALUE, LISTAGG, JSON_ARRAYAGG and JSON_OBJECTAGG
//! over an updating input, on chunks written as text: a retraction takes out the first equal
//! value, a retraction before its insert is dropped, an emptied group leaves no values
//! behind, and the values restore at another parallelism in their order.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema};
use weir_core::Operator;

use crate::changelog_tests::{chunk, push, snapshots_of_two_tasks};
use crate::operators::{AggKind, AggregateDef, BagKind, GroupAggregate, GroupSpec, StateContext};

/// `GROUP BY k` of (k, id, v) with FIRST_VALUE(v), LAST_VALUE(v), LISTAGG(v, ';'),
/// JSON_ARRAYAGG(v) and JSON_OBJECTAGG(KEY id VALUE v); `v` is already JSON text.
fn bags(state: &StateContext, retracting_input: bool) -> crate::operators::Keyed<GroupAggregate> {
    bags_with_ttl(state, retracting_input, None)
}

fn bags_with_ttl(
    state: &StateContext,
    retracting_input: bool,
    ttl: Option<i64>,
) -> crate::operators::Keyed<GroupAggregate> {
    let text = |name: &str| Field::new(name, DataType::Utf8, true);
    let output = Arc::new(Schema::new(vec![text("k"), text("f"), text("l"), text("la"), text("ja"), text("jo")]));
    let def = |kind| AggregateDef::new(AggKind::Bag(kind), Some(2), DataType::Utf8, DataType::Utf8);
    let mut listagg = def(BagKind::ListAgg);
    listagg.separator = ";".into();
    let mut object = def(BagKind::JsonObject { absent_on_null: false });
    object.arg = Some(1);
    object.second = Some(2);
    let spec = GroupSpec {
        keys: 1,
        aggregates: vec![
            def(BagKind::FirstValue),
            def(BagKind::LastValue),
            listagg,
            def(BagKind::JsonArray { absent_on_null: true }),
            object,
        ],
        retracting_input,
        schema: output,
        ttl,
    };
    crate::operators::Keyed(GroupAggregate::new(spec, state).expect("operator"))
}

#[test]
fn a_retraction_takes_out_the_first_equal_value() {
    let mut op = bags(&StateContext::memory(), true);
    assert_eq!(
        push(&mut op, "k:T id:T v:T\n+I a 1 10\n+I a 2 20\n+I a 3 10\n+I b 4 ."),
        "+I a 10 10 10;20;10 [10,20,10] {\"1\":10,\"2\":20,\"3\":10}\n+I b . . . [] {\"4\":null}\n"
    );
    // The first 10 goes; 30 comes last.
    assert_eq!(
        push(&mut op, "k:T id:T v:T\n-U a 1 10\n+U a 1 30"),
        "-U a 10 10 10;20;10 [10,20,10] {\"1\":10,\"2\":20,\"3\":10}\n\
         +U a 20 30 20;10;30 [20,10,30] {\"1\":30,\"2\":20,\"3\":10}\n"
    );
    // A retraction of a group without rows is dropped; the insert after it counts.
    assert_eq!(push(&mut op, "k:T id:T v:T\n-D c 9 90\n+I c 9 91"), "+I c 91 91 91 [91] {\"9\":91}\n");
    // An emptied group takes its values with it: inserted again, it starts afresh.
    assert_eq!(push(&mut op, "k:T id:T v:T\n-D c 9 91"), "-D c 91 91 91 [91] {\"9\":91}\n");
    assert_eq!(push(&mut op, "k:T id:T v:T\n+I c 8 80"), "+I c 80 80 80 [80] {\"8\":80}\n");
}

#[test]
fn over_an_appending_input_no_values_are_kept_but_json_objectaggs() {
    let mut op = bags(&StateContext::memory(), false);
    assert_eq!(push(&mut op, "k:T id:T v:T\n+I a 1 .\n+I a 2 20"), "+I a 20 20 20 [20] {\"1\":null,\"2\":20}\n");
    assert_eq!(
        push(&mut op, "k:T id:T v:T\n+I a 3 30"),
        "-U a 20 20 20 [20] {\"1\":null,\"2\":20}\n+U a 20 30 20;30 [20,30] {\"1\":null,\"2\":20,\"3\":30}\n"
    );
}

#[test]
fn a_json_objectagg_key_given_twice_fails_as_in_flink() {
    let mut op = bags(&StateContext::memory(), true);
    let mut out = Vec::new();
    let err = op.process_chunk(chunk("k:T id:T v:T\n+I a 1 10\n+I a 1 20"), &mut out).expect_err("a key twice");
    assert!(err.to_string().contains("key '1' is already present"), "{err}");
}

#[test]
fn values_restore_at_another_parallelism_in_their_order() {
    let (snapshots, one) =
        snapshots_of_two_tasks("k:T id:T v:T\n+I a 1 10\n+I b 2 20\n+I a 3 11\n+I c 4 40\n+I a 5 12", |state| {
            bags(state, true)
        });
    let mut op = bags(&one, true);
    let states: Vec<&[u8]> = snapshots.iter().map(|s| s.as_slice()).collect();
    op.restore(&states).expect("restore");
    let out = push(&mut op, "k:T id:T v:T\n-D a 1 10\n+I a 6 13");
    assert!(
        out.contains("+U a 11 13 11;12;13 [11,12,13] {\"3\":11,\"5\":12,\"6\":13}\n"),
        "the values of a, in order, without its first: {out}"
    );
}

#[test]
fn a_group_forgotten_by_its_ttl_forgets_its_values() {
    let mut op = bags_with_ttl(&StateContext::memory(), true, Some(10));
    push(&mut op, "k:T id:T v:T\n+I a 1 10");
    op.process_watermark(weir_core::Watermark(0), &mut Vec::new()).expect("watermark");
    // The watermark passes a's last update by more than the TTL: a is forgotten, silently.
    op.process_watermark(weir_core::Watermark(100), &mut Vec::new()).expect("watermark");
    // A new row of a starts it again, without the values it had.
    assert_eq!(push(&mut op, "k:T id:T v:T\n+I a 2 20"), "+I a 20 20 20 [20] {\"2\":20}\n");
}

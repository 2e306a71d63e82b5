//! Changelog kernels and the group aggregate on chunks written as text
//! ([`Chunk::from_pretty`]): update pairs kept by filters and exchanges, one change per group
//! per chunk, retractions through COUNT, SUM, MIN and MAX, and a restore at another
//! parallelism.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::logical_expr::Operator as BinaryOp;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
use datafusion::scalar::ScalarValue;
use weir_core::{Chunk, Materialized, Message, Operator};
use weir_state::KeyGroups;

use crate::exchange::hash_partition;
use crate::operators::{AggKind, AggregateDef, Filter, GroupAggregate, GroupSpec, StateContext};

pub(crate) fn chunk(text: &str) -> Chunk {
    Chunk::from_pretty(text).expect("fixture")
}

pub(crate) fn pretty(messages: &[Message]) -> String {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Chunk(c) => Some(c.to_pretty().expect("text")),
            _ => None,
        })
        .collect()
}

/// Feed `(input, chunk)` steps to a two-input operator; the changelog of each step.
pub(crate) fn steps(op: &mut dyn weir_core::Operator, steps: &[(usize, &str)]) -> Vec<String> {
    steps
        .iter()
        .map(|(input, text)| {
            let mut out = Vec::new();
            op.process_input(*input, chunk(text), &mut out).expect("process");
            pretty(&out)
        })
        .collect()
}

#[test]
fn a_filter_that_keeps_half_an_update_turns_it_into_a_delete_or_an_insert() {
    // Keep rows with v > 10.
    let predicate = Arc::new(BinaryExpr::new(
        Arc::new(Column::new("v", 1)),
        BinaryOp::Gt,
        Arc::new(Literal::new(ScalarValue::Int64(Some(10)))),
    ));
    let mut filter = Filter::new(predicate);
    let mut out = Vec::new();
    let input = chunk(
        "k:T v:I
         -U a 20
         +U a 5
         -U b 1
         +U b 30
         -U c 40
         +U c 50
         +I d 11
         -D e 12",
    );
    filter.process_chunk(input, &mut out).expect("filter");
    assert_eq!(pretty(&out), "-D a 20\n+I b 30\n-U c 40\n+U c 50\n+I d 11\n-D e 12\n");
}

#[test]
fn an_exchange_that_splits_an_update_sends_a_delete_and_an_insert() {
    let groups = KeyGroups::default();
    let task = |k: i64| {
        let one = chunk(&format!("k:I\n+I {k}"));
        groups.task_of(crate::exchange::key_groups_of(&one.batch, &[0], groups).expect("group")[0], 2)
    };
    // A key whose task is not key 1's: the update from 1 to it changes tasks.
    let other = (2..100).find(|k| task(*k) != task(1)).expect("a key of the other task");
    let input = chunk(&format!("k:I v:I\n-U 1 10\n+U {other} 10\n-U 1 7\n+U 1 8"));
    let parts = hash_partition(&input, &[0], 2, groups).expect("partition");
    let text = |k: i64| parts[task(k)].as_ref().map(|c| c.to_pretty().expect("text")).unwrap_or_default();
    assert_eq!(text(1), "-D 1 10\n-U 1 7\n+U 1 8\n", "a pair of one key stays a pair");
    assert_eq!(text(other), format!("+I {other} 10\n"));
}

/// `GROUP BY k` with COUNT(*), SUM(v), MIN(v), MAX(v) over an updating input.
fn group_aggregate(state: &StateContext) -> crate::operators::Keyed<GroupAggregate> {
    let output = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("n", DataType::Int64, false),
        Field::new("total", DataType::Int64, true),
        Field::new("lo", DataType::Int64, true),
        Field::new("hi", DataType::Int64, true),
    ]));
    let def = |kind, arg| AggregateDef::new(kind, arg, DataType::Int64, DataType::Int64);
    let spec = GroupSpec {
        keys: 1,
        aggregates: vec![
            def(AggKind::Count, None),
            def(AggKind::Sum, Some(1)),
            def(AggKind::Min, Some(1)),
            def(AggKind::Max, Some(1)),
        ],
        retracting_input: true,
        schema: output,
        ttl: None,
    };
    crate::operators::Keyed(GroupAggregate::new(spec, state).expect("operator"))
}

/// What an operator emits for a chunk written as text.
pub(crate) fn push(op: &mut impl Operator, text: &str) -> String {
    let mut out = Vec::new();
    op.process_chunk(chunk(text), &mut out).expect("chunk");
    pretty(&out)
}

/// `input` split by its first column over two tasks of operators `make` builds, each fed its
/// rows; their snapshots, and the state context of one task to restore them into.
pub(crate) fn snapshots_of_two_tasks<O: Operator>(
    input: &str,
    make: impl Fn(&StateContext) -> O,
) -> (Vec<Vec<u8>>, StateContext) {
    let groups = KeyGroups::default();
    let task = |index, count| StateContext {
        backend: weir_state::Backend::Memory,
        key_groups: groups,
        owned: groups.range_of(index, count),
    };
    let parts = hash_partition(&chunk(input), &[0], 2, groups).expect("partition");
    let mut snapshots = Vec::new();
    for (i, part) in parts.into_iter().enumerate() {
        let mut op = make(&task(i, 2));
        if let Some(part) = part {
            op.process_chunk(part, &mut Vec::new()).expect("chunk");
        }
        snapshots.push(op.snapshot().expect("snapshot").expect("state").state);
    }
    (snapshots, task(0, 1))
}

#[test]
fn a_group_aggregate_emits_one_change_per_group_and_takes_rows_back() {
    let mut op = group_aggregate(&StateContext::memory());
    assert_eq!(push(&mut op, "k:T v:I\n+I a 1\n+I a 5\n+I b 7\n+I a 3"), "+I a 3 9 1 5\n+I b 1 7 7 7\n");
    // The minimum and the maximum of a leave: the next ones are found among its values.
    assert_eq!(push(&mut op, "k:T v:I\n-U a 1\n+U a 4\n-D a 5"), "-U a 3 9 1 5\n+U a 2 7 3 4\n");
    // b empties: deleted. An unchanged result emits nothing.
    assert_eq!(push(&mut op, "k:T v:I\n-D b 7\n-U a 3\n+U a 3"), "-D b 1 7 7 7\n");
    assert_eq!(push(&mut op, "k:T v:I\n+I b 2"), "+I b 1 2 2 2\n");
}

#[test]
fn group_state_restores_at_another_parallelism() {
    // At two tasks, each taking its keys' rows.
    let (snapshots, one) = snapshots_of_two_tasks("k:T v:I\n+I a 1\n+I b 2\n+I c 3\n+I d 4\n+I a 10", group_aggregate);
    // At one task, from both: the groups go on where they were.
    let mut op = group_aggregate(&one);
    let states: Vec<&[u8]> = snapshots.iter().map(|s| s.as_slice()).collect();
    op.restore(&states).expect("restore");
    let out = push(&mut op, "k:T v:I\n-D a 1\n+I d 6");
    assert!(out.contains("-U a 2 11 1 10\n+U a 1 10 10 10\n"), "{out}");
    assert!(out.contains("-U d 1 4 4 4\n+U d 2 10 4 6\n"), "{out}");
}

#[test]
fn a_materialized_changelog_updates_rows_in_place() {
    let mut table = Materialized::new(chunk("k:T n:I").schema()).expect("table");
    for text in ["k:T n:I\n+I a 1\n+I b 1\n+I c 1", "k:T n:I\n-U a 1\n+U a 2\n-D b 1", "k:T n:I\n+I b 5"] {
        table.apply(&chunk(text)).expect("apply");
    }
    assert_eq!(Chunk::inserts(table.table().expect("rows")).to_pretty().expect("text"), "+I a 2\n+I c 1\n+I b 5\n");
    assert_eq!(table.unmatched, 0);
}

#[test]
fn upserts_become_a_retracting_changelog() {
    let schema = chunk("id:I name:T").schema();
    let spec = crate::operators::UpsertSpec { key: vec![0], schema };
    let mut op = crate::operators::Keyed(
        crate::operators::UpsertNormalize::new(spec, &StateContext::memory()).expect("operator"),
    );
    let mut push = |text: &str| {
        let mut out = Vec::new();
        op.process_chunk(chunk(text), &mut out).expect("chunk");
        pretty(&out)
    };
    assert_eq!(push("id:I name:T\n+U 1 a\n+U 2 b\n+U 1 c"), "+I 1 c\n+I 2 b\n");
    // A repeated row changes nothing; a deleted key that is not there neither.
    assert_eq!(push("id:I name:T\n+U 1 d\n+U 2 b\n-D 3 .\n-D 2 ."), "-U 1 c\n+U 1 d\n-D 2 b\n");
    assert_eq!(push("id:I name:T\n+U 2 e"), "+I 2 e\n");
}

/// A retraction of a group that has no state (it came before its insert, or the key was
/// forgotten) is dropped, as Flink drops it: no row, no state, no negative count.
#[test]
fn a_retraction_before_its_insert_changes_nothing() {
    let mut op = group_aggregate(&StateContext::memory());
    assert_eq!(push(&mut op, "k:T v:I\n-D a 5\n-U b 1\n+U b 2"), "+I b 1 2 2 2\n");
    assert_eq!(push(&mut op, "k:T v:I\n+I a 5"), "+I a 1 5 5 5\n");
    // Its MIN/MAX value counts were not taken below zero: taking 5 back empties the group.
    assert_eq!(push(&mut op, "k:T v:I\n-D a 5"), "-D a 1 5 5 5\n");
}

/// Many chunks over few rows: the kept batches are compacted, rows and places survive it.
#[test]
fn a_long_changelog_over_few_rows_stays_right_through_compaction() {
    let mut table = Materialized::new(chunk("k:T n:I").schema()).expect("table");
    table.apply(&chunk("k:T n:I\n+I a 0\n+I b 7\n+I b 7")).expect("apply");
    for n in 0..200 {
        table.apply(&chunk(&format!("k:T n:I\n-U a {n}\n+U a {}", n + 1))).expect("apply");
    }
    table.apply(&chunk("k:T n:I\n-D b 7\n+I c 1")).expect("apply");
    assert_eq!(Chunk::inserts(table.table().expect("rows")).to_pretty().expect("text"), "+I a 200\n+I b 7\n+I c 1\n");
    assert_eq!(table.len(), 3);
}

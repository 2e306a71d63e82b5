//! The upsert materializer on chunks written as text ([`Chunk::from_pretty`]): each sink
//! key's value as rows for it come and go, one chunk at a time and several in one chunk.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema};
use weir_core::Operator;

use crate::changelog_tests::{chunk, pretty};
use crate::operators::{Keyed, MaterializeSpec, StateContext, UpsertMaterialize};

fn materializer() -> Keyed<UpsertMaterialize> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("v", DataType::Int64, true),
        Field::new("w", DataType::Utf8, true),
    ]));
    Keyed(
        UpsertMaterialize::new(MaterializeSpec { key: vec![0], schema }, &StateContext::memory())
            .expect("materializer"),
    )
}

const ROWS: &str = "k:T v:I w:T";

fn step(m: &mut Keyed<UpsertMaterialize>, rows: &str) -> String {
    let mut out = Vec::new();
    m.process_chunk(chunk(&format!("{ROWS}\n{rows}")), &mut out).expect("chunk");
    pretty(&out)
}

#[test]
fn the_latest_row_of_a_key_is_its_value_and_an_earlier_one_comes_back_when_it_goes() {
    let mut m = materializer();
    assert_eq!(step(&mut m, "+I a 1 x"), "+I a 1 x\n");
    // A second row of the key (another row of the query's own key): it becomes the value.
    assert_eq!(step(&mut m, "+I a 2 y"), "-U a 1 x\n+U a 2 y\n");
    // The value's row is retracted: the earlier row holds the key again.
    assert_eq!(step(&mut m, "-U a 2 y"), "-U a 2 y\n+U a 1 x\n");
    // A row that is not the value goes: nothing changes for the sink.
    assert_eq!(step(&mut m, "+I a 3 z\n-D a 1 x"), "-U a 1 x\n+U a 3 z\n");
    assert_eq!(step(&mut m, "-D a 3 z"), "-D a 3 z\n");
    // A retraction of a row the key never held (before its insert, or after its state went).
    assert_eq!(step(&mut m, "-D b 9 q"), "");
    assert_eq!(step(&mut m, "+I b 9 q"), "+I b 9 q\n");
}

#[test]
fn equal_rows_are_counted_and_several_changes_of_a_chunk_leave_one_change_per_key() {
    let mut m = materializer();
    // Two equal rows for a key, then one retracted: the key keeps its value.
    assert_eq!(step(&mut m, "+I a 1 x\n+I a 1 x\n+I c 5 r"), "+I a 1 x\n+I c 5 r\n");
    assert_eq!(step(&mut m, "-D a 1 x"), "");
    // An update pair of one key in one chunk: one change; a key added and removed: none.
    assert_eq!(step(&mut m, "-U a 1 x\n+U a 4 x\n+I d 1 s\n-D d 1 s"), "-U a 1 x\n+U a 4 x\n");
    let snapshot = m.snapshot().expect("snapshot").expect("state");
    let mut restored = materializer();
    restored.restore(&[snapshot.state.as_slice()]).expect("restore");
    assert_eq!(step(&mut restored, "-D a 4 x\n-D c 5 r"), "-D a 4 x\n-D c 5 r\n");
}

#[test]
fn materialized_keys_restore_at_another_parallelism() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("v", DataType::Int64, true),
        Field::new("w", DataType::Utf8, true),
    ]));
    let make = |ctx: &StateContext| {
        Keyed(
            UpsertMaterialize::new(MaterializeSpec { key: vec![0], schema: schema.clone() }, ctx)
                .expect("materializer"),
        )
    };
    // At two tasks, each holding its keys' rows: a with two rows, the later its value.
    let (snapshots, one) = crate::changelog_tests::snapshots_of_two_tasks(
        &format!("{ROWS}\n+I a 1 x\n+I b 2 y\n+I a 3 z\n+I c 4 q"),
        make,
    );
    // At one task, from both: taking a's value back brings its earlier row back.
    let mut m = make(&one);
    let states: Vec<&[u8]> = snapshots.iter().map(|s| s.as_slice()).collect();
    m.restore(&states).expect("restore");
    assert_eq!(step(&mut m, "-D a 3 z\n-D b 2 y"), "-U a 3 z\n+U a 1 x\n-D b 2 y\n");
    assert_eq!(step(&mut m, "-D c 4 q"), "-D c 4 q\n");
}

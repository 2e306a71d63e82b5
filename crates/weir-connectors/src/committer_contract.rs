//! The contract of a two-phase-commit sink ([`weir_core::two_phase`]), as one suite each
//! committer runs through [`TwoPhaseCommitSink`]: rows become visible only when a checkpoint
//! up to theirs completes, exactly once, through given-up checkpoints, crashes between a
//! checkpoint's completion and its commit, repeated restores, restores at another
//! parallelism and the final pre-commit; and a state of another format version is refused.
//! The file committer runs it here; the Kafka and PostgreSQL committers run it against real
//! servers in the integration tests (`committers.rs`), with the `contract-tests` feature.

use std::sync::Arc;

use datafusion::arrow::array::Int64Array;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use weir_core::two_phase::{Committer, TwoPhaseCommitSink};
use weir_core::{Chunk, Sink};

/// A committer under test and a way to read what it has made visible.
pub trait Harness {
    type C: Committer;
    /// Sink task `task` of `count` (a new one stands for a restarted process).
    fn make(&self, task: usize, count: usize) -> Self::C;
    /// Every visible value, sorted.
    fn published(&self) -> Vec<i64>;
}

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]))
}

fn chunk(values: &[i64]) -> Chunk {
    let batch = RecordBatch::try_new(schema(), vec![Arc::new(Int64Array::from(values.to_vec()))]);
    Chunk::inserts(batch.expect("a batch of one column"))
}

pub fn sink<H: Harness>(h: &H, task: usize, count: usize) -> TwoPhaseCommitSink<H::C> {
    TwoPhaseCommitSink::new(h.make(task, count), task)
}

/// Runs every case, each on a fresh harness from `fresh`.
pub async fn run<H: Harness>(fresh: impl Fn(&str) -> H) {
    visible_only_once_committed(&fresh("visible")).await;
    given_up_checkpoints_commit_with_the_next(&fresh("given_up")).await;
    restore_publishes_once_and_discards_the_rest(&fresh("restore")).await;
    restore_at_another_parallelism(&fresh("rescale")).await;
    final_pre_commit(&fresh("final")).await;
    foreign_states_are_refused(&fresh("foreign")).await;
}

async fn visible_only_once_committed<H: Harness>(h: &H) {
    let mut s = sink(h, 0, 1);
    s.write_chunk(chunk(&[1, 2])).await.expect("write");
    s.pre_commit(1).await.expect("pre-commit");
    s.write_chunk(chunk(&[3])).await.expect("write");
    assert_eq!(h.published(), Vec::<i64>::new(), "nothing before checkpoint 1 completes");
    s.commit(1).await.expect("commit");
    assert_eq!(h.published(), vec![1, 2], "checkpoint 1's rows, not those after its barrier");
    s.commit(1).await.expect("a repeated completion");
    assert_eq!(h.published(), vec![1, 2]);
}

async fn given_up_checkpoints_commit_with_the_next<H: Harness>(h: &H) {
    let mut s = sink(h, 0, 1);
    s.write_chunk(chunk(&[1])).await.expect("write");
    s.pre_commit(1).await.expect("pre-commit 1");
    s.write_chunk(chunk(&[2])).await.expect("write");
    s.pre_commit(2).await.expect("pre-commit 2, checkpoint 1 given up");
    assert_eq!(h.published(), Vec::<i64>::new());
    s.commit(2).await.expect("commit 2");
    assert_eq!(h.published(), vec![1, 2], "checkpoint 1's rows with checkpoint 2");
}

async fn restore_publishes_once_and_discards_the_rest<H: Harness>(h: &H) {
    let state = {
        let mut s = sink(h, 0, 1);
        s.write_chunk(chunk(&[1])).await.expect("write");
        let state = s.pre_commit(1).await.expect("pre-commit").expect("a state");
        s.write_chunk(chunk(&[3])).await.expect("write");
        // Checkpoint 1 completed, and the process died before it committed (the runtime
        // hands a sink a completion before the next barrier, so none came after it).
        state
    };
    for _ in 0..2 {
        let mut s = sink(h, 0, 1);
        s.restore(1, Some(&state)).await.expect("restore (again: idempotent)");
        assert_eq!(h.published(), vec![1], "checkpoint 1's rows, once; none of checkpoint 2's");
    }
    let mut s = sink(h, 0, 1);
    s.restore(1, Some(&state)).await.expect("restore");
    s.write_chunk(chunk(&[4])).await.expect("write");
    s.pre_commit(2).await.expect("pre-commit");
    s.commit(2).await.expect("commit");
    assert_eq!(h.published(), vec![1, 4]);
}

async fn restore_at_another_parallelism<H: Harness>(h: &H) {
    if !H::C::RESCALES {
        return;
    }
    let mut states = Vec::new();
    for task in 0..2 {
        let mut s = sink(h, task, 2);
        s.write_chunk(chunk(&[10 + task as i64])).await.expect("write");
        states.push(s.pre_commit(1).await.expect("pre-commit").expect("a state"));
        s.write_chunk(chunk(&[20 + task as i64])).await.expect("write after the barrier");
    }
    let mut s = sink(h, 0, 1);
    let old: Vec<(usize, Option<&[u8]>)> = states.iter().enumerate().map(|(i, st)| (i, Some(st.as_slice()))).collect();
    s.restore_rescaled(1, &old).await.expect("restore at parallelism 1");
    assert_eq!(h.published(), vec![10, 11], "both tasks' checkpoint 1, nothing after it");
}

async fn final_pre_commit<H: Harness>(h: &H) {
    let mut s = sink(h, 0, 1);
    s.write_chunk(chunk(&[1])).await.expect("write");
    s.pre_commit(1).await.expect("pre-commit");
    s.commit(1).await.expect("commit");
    s.write_chunk(chunk(&[2])).await.expect("write");
    s.pre_commit_final().await.expect("final pre-commit").expect("a state");
    assert_eq!(h.published(), vec![1]);
    s.commit(2).await.expect("the final checkpoint, numbered after the last");
    s.finish().await.expect("finish");
    assert_eq!(h.published(), vec![1, 2]);
}

async fn foreign_states_are_refused<H: Harness>(h: &H) {
    let state = {
        let mut s = sink(h, 0, 1);
        s.write_chunk(chunk(&[1])).await.expect("write");
        s.pre_commit(1).await.expect("pre-commit").expect("a state")
    };
    let text = String::from_utf8(state).expect("a JSON state");
    let other_version =
        text.replacen(&format!("\"version\":{}", H::C::VERSION), &format!("\"version\":{}", H::C::VERSION + 1), 1);
    let e = sink(h, 0, 1).restore(1, Some(other_version.as_bytes())).await.expect_err("another version");
    assert!(e.to_string().contains("format version"), "{e}");
    let e = sink(h, 0, 1).restore(1, Some(b"{\"pending\":[]}")).await.expect_err("a state of before");
    assert!(e.to_string().contains("is not a"), "{e}");
    let e = sink(h, 0, 1).restore(1, Some(&text.as_bytes()[..text.len() / 2])).await.expect_err("damaged");
    assert!(e.to_string().contains("damaged") && e.to_string().contains("checkpoint 1"), "{e}");
    assert_eq!(h.published(), Vec::<i64>::new(), "a refused restore publishes nothing");
}

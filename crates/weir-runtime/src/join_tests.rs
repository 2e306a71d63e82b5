//! The regular join and the Top-N operator on chunks written as text
//! ([`Chunk::from_pretty`]): the exact changelog each emits.

use std::sync::Arc;

use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use weir_core::Operator;

use crate::changelog_tests::{chunk, pretty, steps};
use crate::operators::{JoinKind, JoinSpec, RankKind, StateContext, StreamJoin, TopN, TopNSpec};

fn schema(fields: &[(&str, DataType)]) -> SchemaRef {
    Arc::new(Schema::new(fields.iter().map(|(n, t)| Field::new(*n, t.clone(), true)).collect::<Vec<_>>()))
}

fn join(kind: JoinKind) -> crate::operators::Keyed<StreamJoin> {
    join_of(kind, [false, false])
}

fn join_of(kind: JoinKind, appending: [bool; 2]) -> crate::operators::Keyed<StreamJoin> {
    let left = schema(&[("k", DataType::Utf8), ("v", DataType::Int64)]);
    let right = schema(&[("k2", DataType::Utf8), ("w", DataType::Int64)]);
    let both = schema(&[("k", DataType::Utf8), ("v", DataType::Int64), ("k2", DataType::Utf8), ("w", DataType::Int64)]);
    let spec = JoinSpec {
        kind,
        keys: [vec![0], vec![0]],
        schemas: [left, right],
        filter: None,
        pair_schema: both.clone(),
        schema: both,
        ttl: None,
        interval: None,
        appending,
        nulls_equal: false,
    };
    crate::operators::Keyed(StreamJoin::new(spec, &StateContext::memory()).expect("join"))
}

#[test]
fn a_left_join_retracts_a_padded_row_at_its_first_match_and_restores_it_after_its_last() {
    let mut j = join(JoinKind::Left);
    let got = steps(
        &mut j,
        &[
            (0, "k:T v:I\n+I a 1\n+I b 2"),
            (1, "k2:T w:I\n+I a 10\n+I a 11"),
            (1, "k2:T w:I\n-D a 10"),
            (1, "k2:T w:I\n-U a 11\n+U c 12"),
            (0, "k:T v:I\n-D b 2\n+I . 3"),
        ],
    );
    assert_eq!(got[0], "+I a 1 . .\n+I b 2 . .\n");
    assert_eq!(got[1], "-D a 1 . .\n+I a 1 a 10\n+I a 1 a 11\n");
    assert_eq!(got[2], "-D a 1 a 10\n");
    // The last match leaves: the padded row is back. `c` has no left row: nothing.
    assert_eq!(got[3], "-D a 1 a 11\n+I a 1 . .\n");
    // A NULL key matches nothing; a left row of it is emitted padded.
    assert_eq!(got[4], "-D b 2 . .\n+I . 3 . .\n");
}

#[test]
fn a_full_join_pads_both_sides_and_joins_every_copy_of_duplicate_rows() {
    let mut j = join(JoinKind::Full);
    let got = steps(&mut j, &[(1, "k2:T w:I\n+I a 10\n+I a 10"), (0, "k:T v:I\n+I a 1"), (0, "k:T v:I\n-D a 1")]);
    assert_eq!(got[0], "+I . . a 10\n+I . . a 10\n");
    assert_eq!(got[1], "-D . . a 10\n-D . . a 10\n+I a 1 a 10\n+I a 1 a 10\n");
    assert_eq!(got[2], "-D a 1 a 10\n-D a 1 a 10\n+I . . a 10\n+I . . a 10\n");
}

#[test]
fn appending_inputs_store_rows_under_arrival_numbers_and_join_every_copy() {
    // Both sides only append: no read before a row is written, duplicates are two entries.
    let mut j = join_of(JoinKind::Full, [true, true]);
    let got = steps(
        &mut j,
        &[(1, "k2:T w:I\n+I a 10\n+I a 10"), (0, "k:T v:I\n+I a 1\n+I a 1\n+I b 2"), (1, "k2:T w:I\n+I b 20")],
    );
    assert_eq!(got[0], "+I . . a 10\n+I . . a 10\n");
    assert_eq!(got[1], "-D . . a 10\n+I a 1 a 10\n-D . . a 10\n+I a 1 a 10\n+I a 1 a 10\n+I a 1 a 10\n+I b 2 . .\n");
    assert_eq!(got[2], "-D b 2 . .\n+I b 2 b 20\n");
}

fn top_n(hi: u64, retracting_input: bool) -> crate::operators::Keyed<TopN> {
    top_n_of(hi, retracting_input, false)
}

fn top_n_of(hi: u64, retracting_input: bool, later_wins_ties: bool) -> crate::operators::Keyed<TopN> {
    top_n_ranks(1..=hi, retracting_input, later_wins_ties)
}

fn top_n_ranks(
    ranks: std::ops::RangeInclusive<u64>,
    retracting_input: bool,
    later_wins_ties: bool,
) -> crate::operators::Keyed<TopN> {
    let input = schema(&[("k", DataType::Utf8), ("v", DataType::Int64)]);
    let spec = TopNSpec {
        kind: RankKind::RowNumber,
        partition: vec![0],
        order: vec![(1, SortOptions { descending: true, nulls_first: false })],
        lo: *ranks.start(),
        hi: *ranks.end(),
        later_wins_ties,
        retracting_input,
        input_schema: input,
        schema: schema(&[("k", DataType::Utf8), ("v", DataType::Int64), ("rn", DataType::UInt64)]),
        ttl: None,
    };
    crate::operators::Keyed(TopN::new(spec, &StateContext::memory()).expect("top-n"))
}

#[test]
fn a_top_n_emits_one_change_per_rank_per_chunk() {
    let mut t = top_n(2, false);
    let got = steps(
        &mut t,
        &[
            (0, "k:T v:I\n+I a 5\n+I a 7\n+I b 1"),
            // 9 takes rank 1 and 7 moves to rank 2; 5 leaves. Ties go to the earlier row.
            (0, "k:T v:I\n+I a 9\n+I a 3"),
            (0, "k:T v:I\n+I a 7"),
        ],
    );
    assert_eq!(got[0], "+I a 7 1\n+I a 5 2\n+I b 1 1\n");
    assert_eq!(got[1], "-U a 7 1\n+U a 9 1\n-U a 5 2\n+U a 7 2\n");
    assert_eq!(got[2], "");
}

/// One row per partition over an append-only input (a deduplication): each chunk reads each
/// partition's row once and keeps the best of it and the chunk's rows; ties go to the earlier
/// row, or to the later one for a deduplication keeping the last row; a restored operator
/// goes on with the same rows and arrival numbers.
#[test]
fn a_top_1_over_an_append_only_input_keeps_the_best_row_and_breaks_ties_by_arrival() {
    for later_wins_ties in [false, true] {
        let mut t = top_n_of(1, false, later_wins_ties);
        let first = steps(&mut t, &[(0, "k:T v:I\n+I a 5\n+I a 7\n+I a 7\n+I b 1")]);
        assert_eq!(first[0], "+I a 7 1\n+I b 1 1\n");
        let state = t.snapshot().expect("snapshot").expect("state").state;
        let mut t = top_n_of(1, false, later_wins_ties);
        t.restore(&[&state]).expect("restore");
        let got = steps(
            &mut t,
            &[(0, "k:T v:I\n+I a 7\n+I b 0"), (0, "k:T v:I\n+I a 8\n+I c 0\n+I a 9\n+I a 6"), (0, "k:T v:I\n-D a 9")],
        );
        // A tie with the stored row: kept, or replaced by the later row (the same values).
        let tie = if later_wins_ties { "-U a 7 1\n+U a 7 1\n" } else { "" };
        assert_eq!(got[0], tie, "later wins ties: {later_wins_ties}");
        assert_eq!(got[1], "-U a 7 1\n+U a 9 1\n+I c 0 1\n");
        // A retraction has nothing to take back in an append-only Top-1: counted.
        assert_eq!(got[2], "");
        assert_eq!(t.0.unmatched, 1);
    }
}

/// `ROW_NUMBER()` over an append-only input keeps only each partition's top rows; the general
/// path, told the input may retract, keeps every row. On the same inserts (many ties, rows
/// entering above, between and below the kept ones, ranks 2..=3 shown) both must emit the same
/// changes, and the append-only one the same again after a restore between chunks.
#[test]
fn a_top_n_over_an_append_only_input_emits_what_the_general_path_emits() {
    for later_wins_ties in [false, true] {
        let mut seed = 7u64;
        let chunks: Vec<String> = (0..12)
            .map(|_| {
                let mut text = String::from("k:T v:I\n");
                for _ in 0..9 {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let (k, v) = (["a", "b", "c"][(seed >> 60) as usize % 3], (seed >> 33) % 6);
                    text.push_str(&format!("+I {k} {v}\n"));
                }
                text
            })
            .collect();
        let steps_of: Vec<(usize, &str)> = chunks.iter().map(|c| (0, c.as_str())).collect();
        let general = steps(&mut top_n_ranks(2..=3, true, later_wins_ties), &steps_of);
        let mut fast = top_n_ranks(2..=3, false, later_wins_ties);
        let mut got = steps(&mut fast, &steps_of[..5]);
        let state = fast.snapshot().expect("snapshot").expect("state").state;
        let mut fast = top_n_ranks(2..=3, false, later_wins_ties);
        fast.restore(&[&state]).expect("restore");
        got.extend(steps(&mut fast, &steps_of[5..]));
        assert_eq!(got, general, "later wins ties: {later_wins_ties}");
        assert!(got.iter().filter(|c| c.contains("-U")).count() >= 3, "rows entering above kept ones: {got:?}");
        assert!(got.iter().all(|c| !c.contains(" 1\n")), "rank 1 is not shown: {got:?}");
    }
}

#[test]
fn a_top_n_over_retractions_brings_back_a_row_that_had_left() {
    let mut t = top_n(1, true);
    let got = steps(
        &mut t,
        &[(0, "k:T v:I\n+I a 5\n+I a 7"), (0, "k:T v:I\n-U a 7\n+U a 2"), (0, "k:T v:I\n-D a 5\n-D a 2")],
    );
    assert_eq!(got[0], "+I a 7 1\n");
    assert_eq!(got[1], "-U a 7 1\n+U a 5 1\n");
    assert_eq!(got[2], "-D a 5 1\n");
}

#[test]
fn a_left_interval_join_pads_a_row_when_it_can_no_longer_be_joined_and_drops_late_rows() {
    use crate::operators::Interval;
    use weir_core::Watermark;
    let left = schema(&[
        ("k", DataType::Utf8),
        ("t", DataType::Timestamp(datafusion::arrow::datatypes::TimeUnit::Millisecond, None)),
    ]);
    let right = schema(&[
        ("k2", DataType::Utf8),
        ("u", DataType::Timestamp(datafusion::arrow::datatypes::TimeUnit::Millisecond, None)),
    ]);
    let both = Arc::new(Schema::new([left.fields().to_vec(), right.fields().to_vec()].concat()));
    // left.t - right.u within [0, 2000] ms.
    let spec = JoinSpec {
        kind: JoinKind::Left,
        keys: [vec![0], vec![0]],
        schemas: [left, right],
        filter: None,
        pair_schema: both.clone(),
        schema: both,
        ttl: None,
        interval: Some(Interval { times: [1, 1], lower: Some(0), upper: Some(2000) }),
        appending: [true, true],
        nulls_equal: false,
    };
    let mut j = crate::operators::Keyed(StreamJoin::new(spec, &StateContext::memory()).expect("join"));
    let mut out = Vec::new();
    j.process_input(0, chunk("k:T t:TS\n+I a 3000\n+I b 4000"), &mut out).expect("left");
    // Nothing padded yet: a partner may still come.
    assert_eq!(pretty(&out), "");
    j.process_input(1, chunk("k2:T u:TS\n+I a 1500"), &mut out).expect("right");
    assert_eq!(pretty(&out), "+I a 1970-01-01 00:00:03 a 1970-01-01 00:00:01.500\n");
    out.clear();
    // Past 4000 no right row can meet b (its partners are at most 4000 - 0): padded, once.
    j.process_watermark(Watermark(4000), &mut out).expect("watermark");
    assert_eq!(pretty(&out), "+I b 1970-01-01 00:00:04 . .\n");
    out.clear();
    // Behind the watermark: late, dropped.
    j.process_input(0, chunk("k:T t:TS\n+I a 3500"), &mut out).expect("late");
    j.process_input(1, chunk("k2:T u:TS\n+I a 3900"), &mut out).expect("late");
    assert_eq!(pretty(&out), "");
    assert_eq!(j.late_rows(), 2);
    j.finish(&mut out).expect("finish");
    assert_eq!(pretty(&out), "");
}

#[test]
fn a_first_row_by_event_time_waits_for_the_watermark_and_then_is_final() {
    use crate::operators::FirstRow;
    use weir_core::Watermark;
    let ms = datafusion::arrow::datatypes::TimeUnit::Millisecond;
    let input = schema(&[("k", DataType::Utf8), ("t", DataType::Timestamp(ms, None))]);
    let spec = TopNSpec {
        kind: RankKind::RowNumber,
        partition: vec![0],
        order: vec![(1, SortOptions { descending: false, nulls_first: false })],
        lo: 1,
        hi: 1,
        later_wins_ties: false,
        retracting_input: false,
        input_schema: input,
        schema: schema(&[("k", DataType::Utf8), ("t", DataType::Timestamp(ms, None)), ("rn", DataType::UInt64)]),
        ttl: None,
    };
    let mut f = crate::operators::Keyed(FirstRow::new(spec.clone(), 1, &StateContext::memory()).expect("first row"));
    let mut out = Vec::new();
    // An earlier row that comes later replaces the candidate: nothing is emitted yet.
    f.process_chunk(chunk("k:T t:TS\n+I a 5\n+I a 3\n+I b 9"), &mut out).expect("rows");
    assert_eq!(pretty(&out), "");
    f.process_watermark(Watermark(4), &mut out).expect("watermark");
    assert_eq!(pretty(&out), "+I a 1970-01-01 00:00:00.003 1\n");
    out.clear();
    // `a` is done; `c` at 2 is behind the watermark: late.
    f.process_chunk(chunk("k:T t:TS\n+I a 6\n+I c 2"), &mut out).expect("rows");
    assert_eq!(f.late_rows(), 1);
    f.finish(&mut out).expect("finish");
    assert_eq!(pretty(&out), "+I b 1970-01-01 00:00:00.009 1\n");
    // A candidate replaced by an earlier row leaves two timers; a watermark past both
    // releases the key once (it was emitted twice).
    out.clear();
    let mut f = crate::operators::Keyed(FirstRow::new(spec, 1, &StateContext::memory()).expect("first row"));
    f.process_chunk(chunk("k:T t:TS\n+I d 7"), &mut out).expect("rows");
    f.process_chunk(chunk("k:T t:TS\n+I d 6"), &mut out).expect("rows");
    f.process_watermark(Watermark(8), &mut out).expect("watermark");
    assert_eq!(pretty(&out), "+I d 1970-01-01 00:00:00.006 1\n");
}

#[test]
fn a_versioned_join_joins_each_row_with_the_version_valid_at_its_time() {
    use crate::operators::VersionedJoin;
    use weir_core::Watermark;
    let ms = datafusion::arrow::datatypes::TimeUnit::Millisecond;
    let left = schema(&[("k", DataType::Utf8), ("t", DataType::Timestamp(ms, None))]);
    let right = schema(&[("k2", DataType::Utf8), ("v", DataType::Int64), ("u", DataType::Timestamp(ms, None))]);
    let both = Arc::new(Schema::new([left.fields().to_vec(), right.fields().to_vec()].concat()));
    let spec = JoinSpec {
        kind: JoinKind::Left,
        keys: [vec![0], vec![0]],
        schemas: [left, right],
        filter: None,
        pair_schema: both.clone(),
        schema: both,
        ttl: None,
        interval: None,
        appending: [true, false],
        nulls_equal: false,
    };
    let mut j = crate::operators::Keyed(VersionedJoin::new(spec, [1, 2], &StateContext::memory()).expect("join"));
    let mut out = Vec::new();
    // Versions of `a`: 10 from 1 ms, 20 from 5 ms (an update), deleted at 8 ms.
    j.process_input(1, chunk("k2:T v:I u:TS\n+I a 10 1\n-U a 10 1\n+U a 20 5\n+I b 30 2\n-D b 30 7"), &mut out)
        .expect("versions");
    j.process_input(1, chunk("k2:T v:I u:TS\n-D a 20 8"), &mut out).expect("versions");
    // Rows wait for the watermark, whatever the order they come in; they join in time order
    // (a row with no version then, `a` at 0, is padded).
    j.process_input(0, chunk("k:T t:TS\n+I a 6\n+I a 0\n+I a 3\n+I b 4\n+I a 9"), &mut out).expect("rows");
    assert_eq!(pretty(&out), "");
    j.process_watermark(Watermark(6), &mut out).expect("watermark");
    let ts = |ms: i64| format!("1970-01-01 00:00:00.{ms:03}");
    assert_eq!(
        pretty(&out),
        format!(
            "+I a {} a 10 {}\n+I b {} b 30 {}\n+I a {} a 20 {}\n+I a {} . . .\n",
            ts(3),
            ts(1),
            ts(4),
            ts(2),
            ts(6),
            ts(5),
            ts(0)
        )
        .replace(".000", "")
    );
    out.clear();
    j.finish(&mut out).expect("finish");
    // At 9 `a` is deleted (since 8): padded.
    assert_eq!(pretty(&out), format!("+I a {} . . .\n", ts(9)));
}

#[test]
fn a_lookup_join_holds_rows_that_come_before_its_table_is_loaded() {
    use crate::operators::LookupJoin;
    let mut j = crate::operators::Keyed(LookupJoin::new(j_spec(), &StateContext::memory()).expect("lookup join"));
    let mut out = Vec::new();
    // Rows before the table has ended wait, in state.
    j.process_input(0, chunk("k:T v:I\n+I a 1\n+I z 2"), &mut out).expect("early rows");
    j.process_input(1, chunk("k2:T w:I\n+I a 10\n+I a 11"), &mut out).expect("table");
    assert_eq!(pretty(&out), "");
    // A checkpoint now keeps both; the restored operator goes on where this one was.
    let state = j.snapshot().expect("snapshot").expect("state").state;
    let mut j = crate::operators::Keyed(LookupJoin::new(j_spec(), &StateContext::memory()).expect("lookup join"));
    j.restore(&[&state]).expect("restore");
    j.input_ended(1, &mut out).expect("table loaded");
    assert_eq!(pretty(&out), "+I a 1 a 10\n+I a 1 a 11\n+I z 2 . .\n");
    out.clear();
    // Then rows join as they come.
    j.process_input(0, chunk("k:T v:I\n+I a 3"), &mut out).expect("rows");
    assert_eq!(pretty(&out), "+I a 3 a 10\n+I a 3 a 11\n");
}

#[test]
fn a_lookup_join_whose_rows_end_first_joins_them_when_its_table_ends() {
    use crate::operators::LookupJoin;
    let mut j = crate::operators::Keyed(LookupJoin::new(j_spec(), &StateContext::memory()).expect("lookup join"));
    let mut out = Vec::new();
    j.process_input(0, chunk("k:T v:I\n+I a 1"), &mut out).expect("rows");
    // The rows' input ends: nothing is called for it, the table goes on.
    j.input_ended(0, &mut out).expect("rows ended");
    j.process_input(1, chunk("k2:T w:I\n+I a 10"), &mut out).expect("table");
    assert_eq!(pretty(&out), "");
    j.finish(&mut out).expect("both ended");
    assert_eq!(pretty(&out), "+I a 1 a 10\n");
}

/// A LEFT lookup join of `k, v` rows with a `k2, w` table.
fn j_spec() -> JoinSpec {
    let left = schema(&[("k", DataType::Utf8), ("v", DataType::Int64)]);
    let right = schema(&[("k2", DataType::Utf8), ("w", DataType::Int64)]);
    let both = Arc::new(Schema::new([left.fields().to_vec(), right.fields().to_vec()].concat()));
    JoinSpec {
        kind: JoinKind::Left,
        keys: [vec![0], vec![0]],
        schemas: [left, right],
        filter: None,
        pair_schema: both.clone(),
        schema: both,
        ttl: None,
        interval: None,
        appending: [true, true],
        nulls_equal: false,
    }
}

/// Event-time state TTL of a regular join, fed in one fixed order. The order matters: an entry
/// is stamped with the join's watermark, which is the smaller of its inputs', so how two
/// sources interleave decides what expires. A SQL test cannot fix that order (its two sources
/// race); here it is fixed, over both backends.
#[test]
fn a_join_with_a_ttl_forgets_entries_not_touched_while_the_watermark_advanced_by_it() {
    use weir_core::Watermark;
    let dir = std::env::temp_dir().join(format!(
        "weir-join-ttl-{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
    ));
    let rocksdb = StateContext {
        backend: weir_state::Backend::RocksDb {
            local: dir.join("local"),
            shared: Arc::new(weir_storage::LocalDir::new(dir.join("shared"))),
        },
        ..StateContext::memory()
    };
    for (name, context) in [("memory", StateContext::memory()), ("rocksdb", rocksdb)] {
        let spec = JoinSpec { kind: JoinKind::Inner, ttl: Some(5000), ..j_spec() };
        let mut j = crate::operators::Keyed(StreamJoin::new(spec, &context).expect("join"));
        let mut step = |input: Option<(usize, &str)>, watermark: Option<i64>| {
            let mut out = Vec::new();
            if let Some((input, text)) = input {
                j.process_input(input, chunk(text), &mut out).expect("chunk");
            }
            if let Some(w) = watermark {
                j.process_watermark(Watermark(w), &mut out).expect("watermark");
            }
            pretty(&out)
        };
        // Entries written before the first watermark count as written at it (0).
        assert_eq!(step(Some((1, "k2:T w:I\n+I a 100\n+I b 200")), None), "", "{name}");
        assert_eq!(step(Some((0, "k:T v:I\n+I a 1\n+I b 2")), Some(0)), "+I a 1 a 100\n+I b 2 b 200\n", "{name}");
        assert_eq!(step(Some((0, "k:T v:I\n+I a 10")), Some(4000)), "+I a 10 a 100\n", "{name}");
        assert_eq!(step(Some((1, "k2:T w:I\n+I b 201")), Some(8000)), "+I b 2 b 201\n", "{name}");
        // At 8000 what was written at 3000 or before is gone: both table rows, a@1, b@2 and
        // a@10. Being read by a probe does not keep an inner join's row (a write does, as in
        // Flink): a@10 met a's table row and it is gone all the same. b@201 (4000) stays.
        assert_eq!(step(Some((0, "k:T v:I\n+I a 11\n+I b 12")), Some(9500)), "+I b 12 b 201\n", "{name}");
        // At 9500 b@201 (written at 4000) is gone too.
        assert_eq!(step(Some((0, "k:T v:I\n+I b 13")), None), "", "{name}");
        // The rows side expires the same way: a new table row meets only a@11 (written at 8000).
        assert_eq!(step(Some((1, "k2:T w:I\n+I a 101")), None), "+I a 11 a 101\n", "{name}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

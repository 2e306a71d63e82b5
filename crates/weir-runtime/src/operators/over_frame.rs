//! One partition's rows through an OVER window's frame, in time order: what each row is
//! given, and what the partition keeps for the rows to come.
//!
//! The rows of a partition form one sequence: the tail kept from earlier firings, then the
//! rows the watermark has just passed. A bounded frame (`ROWS n PRECEDING`, `RANGE INTERVAL
//! … PRECEDING`) keeps the rows still inside it and replays them at each firing, so the
//! accumulators need not be stored: each row is added once when it enters the frame and
//! retracted once when it leaves it (`COUNT`, `SUM`, `AVG` by sign; `MIN` and `MAX` by a
//! monotonic queue; `FIRST_VALUE` and `LAST_VALUE` by a queue of the non-NULL rows), so a row
//! costs amortised O(1) and a firing O(frame) per partition, never a rescan per row. An
//! unbounded frame keeps its accumulators instead, and no rows but those `LAG` reads.
//!
//! Flink's rules, followed here: with `RANGE` the rows of one time are peers, added together
//! and given the same values; with `ROWS` each row is added and given its values in arrival
//! order. `LAG` is evaluated as Flink's aggregate is, after the step's rows are added: so over
//! `RANGE` peers share the value counted back from the last of them.

use std::collections::{BTreeMap, VecDeque};

use super::aggregates::{Acc, AggKind, BagKind, Num};
use weir_core::{Result, WeirError};

/// How far back an OVER window's frame reaches from the current row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preceding {
    Unbounded,
    /// `n` rows before the current one.
    Rows(u64),
    /// Rows at most this many milliseconds earlier.
    Range(i64),
}

/// A row of the partition's sequence: one kept from earlier (`Kept`, into the flat list of
/// this firing's kept rows) or one just due (`Due`, into the firing's batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pos {
    Kept(usize),
    Due(usize),
}

/// A function's value for an output row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Val {
    Null,
    /// The argument's value in this row.
    At(Pos),
    /// A value kept by an unbounded frame (its row format).
    Bytes(Vec<u8>),
    /// `LAG`'s default.
    Default,
}

/// What a function is, as the frame sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// COUNT, SUM, AVG: a counted accumulator (`Acc::Count` or `Acc::Sum`).
    Counted,
    Min,
    Max,
    First,
    Last,
    Lag(usize),
    /// `COUNT(DISTINCT x)`: each value's count in the frame.
    Distinct,
}

impl Kind {
    pub fn of(kind: AggKind, distinct: bool) -> Result<Kind> {
        Ok(match kind {
            AggKind::Count if distinct => Kind::Distinct,
            _ if distinct => {
                return Err(WeirError::not_supported(format!("{}(DISTINCT …) in an OVER window", kind.name())))
            }
            AggKind::Count | AggKind::Sum | AggKind::Avg => Kind::Counted,
            AggKind::Min => Kind::Min,
            AggKind::Max => Kind::Max,
            AggKind::Bag(BagKind::FirstValue) => Kind::First,
            AggKind::Bag(BagKind::LastValue) => Kind::Last,
            other => return Err(WeirError::not_supported(format!("{}() in an OVER window", other.name()))),
        })
    }
}

/// `COUNT(DISTINCT …)`'s values in the frame (row format) with their counts.
pub(crate) type Seen = BTreeMap<Vec<u8>, u64>;

/// What the run reads of the firing's rows.
pub(crate) trait Rows {
    /// The argument `slot`'s value at `pos` in its row format, `None` when NULL.
    fn bytes(&self, slot: usize, pos: Pos) -> Option<&[u8]>;
    /// Function `function`'s argument as a number at `pos` (in its lane), `None` when NULL.
    fn number(&self, function: usize, pos: Pos) -> Option<Num>;
}

/// One function of the window: its kind and argument slot (`None`: `COUNT(*)`).
pub(crate) struct Function {
    pub kind: Kind,
    pub slot: Option<usize>,
}

/// The results of a partition's run: per function, per due row (by its index in the
/// firing's batch), the accumulator or the value.
pub(crate) struct Outputs {
    pub accs: Vec<Vec<(usize, Acc)>>,
    pub values: Vec<Vec<(usize, Val)>>,
}

/// A partition's sequence through the frame. `seq` is the kept tail then the due rows, with
/// their times; `kept` of them are the tail. `accs` holds an unbounded frame's accumulators
/// (one per function), and `seen` its `COUNT(DISTINCT …)` values with their counts, both
/// updated. Returns the index in `seq` from which rows must be kept.
pub(crate) fn run(
    functions: &[Function],
    preceding: Preceding,
    range: bool,
    seq: &[(i64, Pos)],
    kept: usize,
    rows: &dyn Rows,
    accs: &mut [Acc],
    seen: &mut [Seen],
    out: &mut Outputs,
) -> Result<usize> {
    let bounded = preceding != Preceding::Unbounded;
    let mut queues: Vec<VecDeque<usize>> = vec![VecDeque::new(); functions.len()];
    // A bounded frame counts its distinct values afresh as it replays.
    let mut fresh: Vec<Seen> = vec![Seen::new(); functions.len()];
    let seen = if bounded { &mut fresh[..] } else { seen };
    let mut lo = 0usize;
    // A bounded frame replays its kept rows; an unbounded one starts at the due rows.
    let mut p = if bounded { 0 } else { kept };
    while p < seq.len() {
        let end = if range { p + seq[p..].iter().take_while(|(t, _)| *t == seq[p].0).count() } else { p + 1 };
        for q in p..end {
            for (f, function) in functions.iter().enumerate() {
                add(function, f, q, seq, rows, &mut accs[f], &mut queues[f], &mut seen[f]);
            }
        }
        match preceding {
            Preceding::Rows(n) => {
                while ((end - 1 - lo) as u64) > n {
                    retract(functions, lo, seq, rows, accs, &mut queues, seen);
                    lo += 1;
                }
            }
            Preceding::Range(ms) => {
                let from = seq[p].0.saturating_sub(ms);
                while seq[lo].0 < from {
                    retract(functions, lo, seq, rows, accs, &mut queues, seen);
                    lo += 1;
                }
            }
            Preceding::Unbounded => {}
        }
        if p >= kept {
            for q in p..end {
                let Pos::Due(row) = seq[q].1 else { return Err(WeirError::internal("an OVER row out of order")) };
                emit(functions, row, end - 1, seq, accs, &queues, seen, out);
            }
        }
        p = end;
    }
    // What the rows to come need: a bounded frame's rows, and LAG's.
    let last = seq.len();
    let mut keep = last;
    match preceding {
        Preceding::Rows(n) => keep = keep.min(last.saturating_sub(n as usize)),
        Preceding::Range(ms) => {
            if let Some((t, _)) = seq.last() {
                let from = t.saturating_add(1).saturating_sub(ms);
                keep = keep.min(seq.iter().position(|(s, _)| *s >= from).unwrap_or(last));
            }
        }
        Preceding::Unbounded => {}
    }
    for function in functions {
        if let Kind::Lag(k) = function.kind {
            keep = keep.min(last.saturating_sub(k));
        }
    }
    Ok(keep)
}

#[allow(clippy::too_many_arguments)]
fn add(
    function: &Function,
    f: usize,
    q: usize,
    seq: &[(i64, Pos)],
    rows: &dyn Rows,
    acc: &mut Acc,
    queue: &mut VecDeque<usize>,
    seen: &mut Seen,
) {
    let pos = seq[q].1;
    let value = function.slot.and_then(|s| rows.bytes(s, pos));
    match function.kind {
        Kind::Counted => count(acc, function.slot.is_none() || value.is_some(), rows.number(f, pos), 1),
        Kind::Distinct => {
            if let Some(v) = value {
                *seen.entry(v.to_vec()).or_insert(0) += 1;
            }
        }
        Kind::Min | Kind::Max => {
            let Some(v) = value else { return };
            if let Acc::Extreme(current) = acc {
                // An unbounded frame keeps the extreme itself.
                let better = current.as_deref().is_none_or(|c| if function.kind == Kind::Min { v < c } else { v > c });
                if better {
                    *current = Some(v.to_vec());
                }
                return;
            }
            // A bounded frame: a queue whose values only rise (MIN) or fall (MAX) from the front.
            while let Some(&b) = queue.back() {
                let back = function.slot.and_then(|s| rows.bytes(s, seq[b].1)).unwrap_or_default();
                let dominated = if function.kind == Kind::Min { back >= v } else { back <= v };
                if !dominated {
                    break;
                }
                queue.pop_back();
            }
            queue.push_back(q);
        }
        Kind::First | Kind::Last => {
            let Some(v) = value else { return };
            if let Acc::Extreme(current) = acc {
                if function.kind == Kind::Last || current.is_none() {
                    *current = Some(v.to_vec());
                }
                return;
            }
            queue.push_back(q);
        }
        Kind::Lag(_) => {}
    }
}

/// Add (or, with `sign` -1, take back) one row to a COUNT, SUM or AVG: a row whose argument
/// is NULL counts for none of them.
fn count(acc: &mut Acc, counts: bool, number: Option<Num>, sign: i64) {
    if !counts {
        return;
    }
    match acc {
        Acc::Count(n) => *n += sign,
        Acc::Sum(n, sum) => {
            if let Some(v) = number {
                *n += sign;
                sum.add(v, sign);
            }
        }
        _ => {}
    }
}

fn retract(
    functions: &[Function],
    lo: usize,
    seq: &[(i64, Pos)],
    rows: &dyn Rows,
    accs: &mut [Acc],
    queues: &mut [VecDeque<usize>],
    seen: &mut [Seen],
) {
    for (f, function) in functions.iter().enumerate() {
        match function.kind {
            Kind::Distinct => {
                if let Some(v) = function.slot.and_then(|s| rows.bytes(s, seq[lo].1)) {
                    if let Some(n) = seen[f].get_mut(v) {
                        *n -= 1;
                        if *n == 0 {
                            seen[f].remove(v);
                        }
                    }
                }
            }
            Kind::Counted => {
                let pos = seq[lo].1;
                let present = function.slot.is_none_or(|s| rows.bytes(s, pos).is_some());
                count(&mut accs[f], present, rows.number(f, pos), -1);
            }
            Kind::Min | Kind::Max | Kind::First | Kind::Last => {
                if queues[f].front() == Some(&lo) {
                    queues[f].pop_front();
                }
            }
            Kind::Lag(_) => {}
        }
    }
}

/// Due row `row`'s values, the frame ending at sequence index `last`.
#[allow(clippy::too_many_arguments)]
fn emit(
    functions: &[Function],
    row: usize,
    last: usize,
    seq: &[(i64, Pos)],
    accs: &[Acc],
    queues: &[VecDeque<usize>],
    seen: &[Seen],
    out: &mut Outputs,
) {
    for (f, function) in functions.iter().enumerate() {
        let value = match (function.kind, &accs[f]) {
            (Kind::Counted, acc) => {
                out.accs[f].push((row, acc.clone()));
                continue;
            }
            (Kind::Distinct, _) => {
                out.accs[f].push((row, Acc::Count(seen[f].len() as i64)));
                continue;
            }
            (Kind::Lag(k), _) => match last.checked_sub(k) {
                Some(at) => Val::At(seq[at].1),
                None => Val::Default,
            },
            (_, Acc::Extreme(Some(v))) => Val::Bytes(v.clone()),
            (_, Acc::Extreme(None)) => Val::Null,
            (Kind::Last, _) => queues[f].back().map_or(Val::Null, |q| Val::At(seq[*q].1)),
            (_, _) => queues[f].front().map_or(Val::Null, |q| Val::At(seq[*q].1)),
        };
        out.values[f].push((row, value));
    }
}

//! Regular joins: `INNER`, `LEFT`, `RIGHT` and `FULL` joins, and semi and anti joins (`IN`,
//! `EXISTS`, `NOT IN`, `NOT EXISTS`, `INTERSECT`, `EXCEPT`), on equal keys plus any residual
//! condition, over append-only or updating inputs, as Flink's streaming joins.
//!
//! Each input's rows live in a sorted state table under their join key: a multiset, one entry
//! per distinct row (Arrow's row format) with its count and, for a side whose rows are kept
//! without a partner (the left of a `LEFT JOIN`), how many rows of the other side it is
//! joined with. A chunk is joined as a whole: its distinct keys are looked up once in the
//! other side's table (one prefix scan each), its rows' own entries with one multi-get, the
//! condition is evaluated over every candidate pair at once, and the changes are written
//! once per entry. Then, row by row in the chunk's order (an insert and a retraction of one
//! key must meet in order):
//! - an insert joins every matching row of the other side (`+I`); without a match, a row of
//!   an outer side is emitted padded with NULLs. The first match of an outer row of the other
//!   side retracts its padded row first (`-D`);
//! - a retraction retracts what its insert emitted (`-D`), and an outer row of the other side
//!   that loses its last match is emitted padded again (`+I`).
//!
//! A semi or anti join keeps, for each row of the side it emits, its number of partners, as
//! an outer side's: the row comes and goes as that number crosses zero ([`semi_anti_row`]).
//!
//! So the output is a retracting changelog unless both inputs are append-only and no side is
//! outer (nor is it an anti join). A NULL key matches nothing (SQL equality): such rows are never stored; an outer
//! side's are emitted padded at once.
//!
//! With `ttl` (event-time state TTL, `'table.exec.state.ttl'`), an entry not touched while
//! the watermark advanced by the TTL is forgotten, as the group aggregate's keys are.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array};
use datafusion::arrow::compute::{prep_null_mask_filter, take};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatchOptions;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;
use weir_core::{Chunk, Message, Op, Result, Watermark, WeirError};
use weir_state::tables::Change;
use weir_state::{StateTables, Table, TableDecl, TableKind};

use super::keyed::KeyedLogic;
use super::state::{interner, ordered, Progress, StateContext};

const TABLES: [TableDecl; 4] = [
    TableDecl { name: "left", kind: TableKind::Sorted },
    TableDecl { name: "right", kind: TableKind::Sorted },
    TableDecl { name: "expiry", kind: TableKind::Timed },
    TableDecl { name: "interval", kind: TableKind::Timed },
];

/// Which rows without a partner are kept (padded with NULLs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    Inner,
    Left,
    Right,
    Full,
    /// Rows of one input with (semi) or without (anti) a partner, that input's columns only.
    LeftSemi,
    LeftAnti,
    RightSemi,
    RightAnti,
}

impl JoinKind {
    /// Whether rows of input `side` without a partner are emitted padded.
    pub fn outer(self, side: usize) -> bool {
        match self {
            JoinKind::Left => side == 0,
            JoinKind::Right => side == 1,
            JoinKind::Full => true,
            _ => false,
        }
    }

    /// A semi or anti join: the input whose rows it emits, and whether it is a semi join.
    pub fn one_side(self) -> Option<(usize, bool)> {
        match self {
            JoinKind::LeftSemi => Some((0, true)),
            JoinKind::LeftAnti => Some((0, false)),
            JoinKind::RightSemi => Some((1, true)),
            JoinKind::RightAnti => Some((1, false)),
            _ => None,
        }
    }
}

/// A join as planned.
#[derive(Debug, Clone)]
pub struct JoinSpec {
    pub kind: JoinKind,
    /// The equal keys: columns of each input, pairwise of the same type.
    pub keys: [Vec<usize>; 2],
    pub schemas: [SchemaRef; 2],
    /// Condition beyond the equal keys, over a left row and a right row side by side.
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    /// The left columns, then the right columns: what `filter` reads.
    pub pair_schema: SchemaRef,
    /// The output: both inputs' columns, or one input's for semi and anti joins.
    pub schema: SchemaRef,
    /// Event-time state TTL in milliseconds (regular joins only).
    pub ttl: Option<i64>,
    /// An interval join's time bounds (regular joins only).
    pub interval: Option<Interval>,
    /// Which inputs only append (regular joins: their rows are stored under an arrival
    /// number, with no read before the write).
    pub appending: [bool; 2],
    /// Whether a NULL key equals a NULL key (`INTERSECT` and `EXCEPT` compare rows so); in a
    /// join's `ON` it matches nothing.
    pub nulls_equal: bool,
}

/// An interval join: `left.time - right.time` is within `[lower, upper]` milliseconds (a
/// bound may be open). Each row is dropped once the watermark passes the last time a row of
/// the other input could match it; a row of an outer side without a partner is emitted
/// padded then, so the output stays append-only. Rows behind the watermark when they come
/// are late (their partners may be gone): dropped and counted, as Flink's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    pub times: [usize; 2],
    pub lower: Option<i64>,
    pub upper: Option<i64>,
}

impl Interval {
    /// The watermark after which a row of `side` at `time` can meet no row to come.
    fn dead_after(&self, side: usize, time: i64) -> Option<i64> {
        match side {
            0 => self.lower.map(|l| time.saturating_sub(l)),
            _ => self.upper.map(|u| time.saturating_add(u)),
        }
    }
}

impl JoinSpec {
    /// Row converters for the join key (both inputs' key columns have its types) and for
    /// each input's whole rows.
    pub(crate) fn converters(&self) -> Result<(RowConverter, [RowConverter; 2])> {
        let field = |f: &datafusion::arrow::datatypes::Field| SortField::new(f.data_type().clone());
        let keys = RowConverter::new(self.keys[0].iter().map(|k| field(self.schemas[0].field(*k))).collect())?;
        let whole = |s: usize| RowConverter::new(self.schemas[s].fields().iter().map(|f| field(f)).collect());
        Ok((keys, [whole(0)?, whole(1)?]))
    }
}

/// One stored row: how many copies, how many partners each copy has (outer sides only), and
/// the watermark when it was last touched (for TTL).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Entry {
    count: u64,
    partners: u64,
    touched: i64,
}

impl Entry {
    fn encode(&self) -> [u8; 24] {
        let mut out = [0u8; 24];
        out[..8].copy_from_slice(&self.count.to_le_bytes());
        out[8..16].copy_from_slice(&self.partners.to_le_bytes());
        out[16..].copy_from_slice(&self.touched.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        let word = |i: usize| -> Result<[u8; 8]> {
            bytes
                .get(i * 8..i * 8 + 8)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| WeirError::internal("join state is damaged"))
        };
        Ok(Self {
            count: u64::from_le_bytes(word(0)?),
            partners: u64::from_le_bytes(word(1)?),
            touched: i64::from_le_bytes(word(2)?),
        })
    }
}

/// The other side's rows under a chunk's keys, decoded once.
struct Partners {
    batch: RecordBatch,
    /// Per distinct key of the chunk, its rows' range in `batch`.
    ranges: Vec<std::ops::Range<usize>>,
    /// Per row of `batch`: its entry's sort key (the row bytes, or an arrival number on an
    /// appending side), its row bytes and its entry (updated as the chunk is joined).
    sorts: Vec<Vec<u8>>,
    rows: Vec<Vec<u8>>,
    entries: Vec<Entry>,
    changed: Vec<bool>,
}

/// How one side stores a row: an updating side under the row's bytes (a retraction finds
/// it), the value the entry alone; an appending side under an arrival number, the value the
/// entry and then the row's bytes (nothing to read before writing a new row).
/// Values are appended to one buffer per chunk (a chunk writes about one per row: an
/// allocation each was a good part of a wide join's cost); the range written is returned.
fn push_stored_value(out: &mut Vec<u8>, appending: bool, entry: &Entry, row: &[u8]) -> std::ops::Range<usize> {
    let start = out.len();
    out.extend_from_slice(&entry.encode());
    if appending {
        out.extend_from_slice(row);
    }
    start..out.len()
}

pub struct StreamJoin {
    spec: JoinSpec,
    keys: RowConverter,
    /// Whole rows of each input in Arrow's row format.
    rows: [RowConverter; 2],
    tables: StateTables,
    sides: [Table; 2],
    expiry: Table,
    /// Interval joins: entries by the watermark after which they are dropped.
    dying: Table,
    /// The watermark, late rows, and the numbers of the rows of appending sides.
    progress: Progress,
}

impl StreamJoin {
    pub fn new(spec: JoinSpec, state: &StateContext) -> Result<Self> {
        if spec.kind.one_side().is_some() && spec.interval.is_some() {
            return Err(WeirError::internal("a semi or anti join with interval bounds"));
        }
        let (keys, rows) = spec.converters()?;
        let tables = state.open(&TABLES)?;
        Ok(Self {
            keys,
            rows,
            sides: [tables.table("left")?, tables.table("right")?],
            expiry: tables.table("expiry")?,
            dying: tables.table("interval")?,
            tables,
            spec,
            progress: Progress::default(),
        })
    }

    /// Rows of input `side` back from their row format.
    fn decode(&self, side: usize, values: &[Vec<u8>]) -> Result<RecordBatch> {
        let parser = self.rows[side].parser();
        let columns = self.rows[side].convert_rows(values.iter().map(|v| parser.parse(v)))?;
        let options = RecordBatchOptions::new().with_row_count(Some(values.len()));
        Ok(RecordBatch::try_new_with_options(self.spec.schemas[side].clone(), columns, &options)?)
    }

    /// The other side's stored rows under each of `keys` (group, key bytes).
    fn partners(&self, other: usize, keys: &[(u16, Vec<u8>)]) -> Result<Partners> {
        let (mut sorts, mut rows, mut entries, mut ranges) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::with_capacity(keys.len()));
        let asked: Vec<(u16, &[u8])> = keys.iter().map(|(g, k)| (*g, k.as_slice())).collect();
        for found in self.tables.entries_many(self.sides[other], &asked)? {
            let start = rows.len();
            for (sort, mut value) in found {
                entries.push(Entry::decode(&value)?);
                rows.push(if self.spec.appending[other] { value.split_off(24) } else { sort.clone() });
                sorts.push(sort);
            }
            ranges.push(start..rows.len());
        }
        let batch = self.decode(other, &rows)?;
        Ok(Partners { batch, ranges, changed: vec![false; rows.len()], sorts, rows, entries })
    }

    /// For each candidate pair (chunk row `i`, partner row `j`), whether the condition holds.
    fn condition(
        &self,
        side: usize,
        batch: &RecordBatch,
        partners: &RecordBatch,
        pairs: &[(u32, u32)],
    ) -> Result<Vec<bool>> {
        let mine = UInt32Array::from_iter_values(pairs.iter().map(|p| p.0));
        let theirs = UInt32Array::from_iter_values(pairs.iter().map(|p| p.1));
        if side == 0 {
            pair_condition(&self.spec, batch, &mine, partners, &theirs)
        } else {
            pair_condition(&self.spec, partners, &theirs, batch, &mine)
        }
    }

    fn join_chunk(&mut self, side: usize, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        let other = 1 - side;
        let n = chunk.num_rows();
        if n == 0 {
            return Ok(());
        }
        let ops = chunk.ops();
        let batch = chunk.batch;
        let key_columns: Vec<ArrayRef> = self.spec.keys[side].iter().map(|k| batch.column(*k).clone()).collect();
        let mut valid = vec![true; n];
        // An interval join drops rows that can meet nothing to come (`live` false).
        let mut live = vec![true; n];
        let mut dies: Vec<Option<i64>> = vec![None; n];
        if let Some(interval) = self.spec.interval {
            let times = super::window::millis(batch.column(interval.times[side]))?;
            for i in 0..n {
                if !times.is_valid(i) {
                    continue;
                }
                // Behind the watermark: its partners may be gone already.
                if times.value(i) <= self.progress.watermark.0 {
                    live[i] = false;
                    self.progress.late += 1;
                }
                dies[i] = interval.dead_after(side, times.value(i));
            }
        }
        for c in key_columns.iter().filter(|_| !self.spec.nulls_equal) {
            if let Some(nulls) = c.logical_nulls() {
                valid.iter_mut().zip(nulls.iter()).for_each(|(v, ok)| *v &= ok);
            }
        }
        // A late row is neither looked up nor stored.
        valid.iter_mut().zip(&live).for_each(|(v, l)| *v &= *l);
        let key_rows = self.keys.convert_columns(&key_columns)?;
        // A join without equal keys: every row's key is empty (Arrow's rows of no columns
        // hold no row to index).
        let key_of_row = |i: usize| -> &[u8] {
            if key_columns.is_empty() {
                &[]
            } else {
                key_rows.row(i).data()
            }
        };
        let groups = crate::exchange::key_groups_of_columns(&key_columns, n, self.tables.key_groups())?;
        let row_bytes = self.rows[side].convert_columns(batch.columns())?;

        // Distinct keys, each looked up once on the other side.
        let mut index = interner::<&[u8], usize>();
        let mut distinct: Vec<(u16, Vec<u8>)> = Vec::new();
        let key_of: Vec<Option<usize>> = (0..n)
            .map(|i| {
                valid[i].then(|| {
                    *index.entry(key_of_row(i)).or_insert_with(|| {
                        distinct.push((groups[i], key_of_row(i).to_vec()));
                        distinct.len() - 1
                    })
                })
            })
            .collect();
        let mut partners = self.partners(other, &distinct)?;
        let mut pairs = Vec::new();
        for (i, k) in key_of.iter().enumerate() {
            if let Some(k) = k {
                pairs.extend(partners.ranges[*k].clone().map(|j| (i as u32, j as u32)));
            }
        }
        let holds = self.condition(side, &batch, &partners.batch, &pairs)?;
        let mut matched: Vec<Vec<u32>> = vec![Vec::new(); n];
        for ((i, j), ok) in pairs.iter().zip(holds) {
            if ok {
                matched[*i as usize].push(*j);
            }
        }

        // This side's entries of the chunk's rows: an appending side's are new (under arrival
        // numbers); an updating side's are read with one multi-get.
        let appending = self.spec.appending[side];
        if appending && ops.iter().any(|o| o.sign() < 0) {
            return Err(WeirError::internal("a retraction on a join input planned as append-only"));
        }
        // Every row's entry key, in one buffer.
        let mut key_bytes = Vec::new();
        let key_ranges: Vec<Option<std::ops::Range<usize>>> = (0..n)
            .map(|i| {
                key_of[i].map(|k| {
                    let start = key_bytes.len();
                    if appending {
                        self.progress.next_seq += 1;
                        let seq = self.progress.next_seq.to_be_bytes();
                        StateTables::push_entry_key(&mut key_bytes, &distinct[k].1, &seq);
                    } else {
                        StateTables::push_entry_key(&mut key_bytes, &distinct[k].1, row_bytes.row(i).data());
                    }
                    start..key_bytes.len()
                })
            })
            .collect();
        let entry_keys: Vec<Option<&[u8]>> = key_ranges.iter().map(|r| r.clone().map(|r| &key_bytes[r])).collect();
        let lookups: Vec<(u16, &[u8], usize)> =
            (0..n).filter_map(|i| entry_keys[i].map(|k| (groups[i], k, i))).collect();
        let found = if appending {
            vec![None; lookups.len()]
        } else {
            let keys: Vec<(u16, &[u8])> = lookups.iter().map(|(g, k, _)| (*g, *k)).collect();
            self.tables.get_many(self.sides[side], &keys)?
        };
        let mut own = interner::<&[u8], (u16, Entry, bool, usize)>();
        for ((group, key, row), value) in lookups.iter().zip(found) {
            let entry = value.map(|v| Entry::decode(&v)).transpose()?.unwrap_or_default();
            own.entry(*key).or_insert((*group, entry, false, *row));
        }

        let (outer_mine, outer_theirs) = (self.spec.kind.outer(side), self.spec.kind.outer(other));
        let one_side = self.spec.kind.one_side();
        // An interval join pads a row without a partner when it is dropped, not before.
        let deferred = self.spec.interval.is_some();
        let stamp = self.progress.watermark.0;
        let mut emit = Emitted::default();
        for i in 0..n {
            if !live[i] {
                continue;
            }
            let insert = ops[i].sign() > 0;
            let Some(entry_key) = entry_keys[i] else {
                // A NULL key has no partner: an anti join's row of it is emitted at once.
                if outer_mine || one_side == Some((side, false)) {
                    emit.push(Some(i), None, if insert { Op::Insert } else { Op::Delete }, 1);
                }
                continue;
            };
            let total: u64 = matched[i].iter().map(|j| partners.entries[*j as usize].count).sum();
            let (_, entry, changed, _) =
                own.get_mut(entry_key).ok_or_else(|| WeirError::internal("a join row's entry is missing"))?;
            *changed = true;
            entry.touched = stamp;
            if insert {
                entry.count += 1;
                entry.partners = total;
            } else {
                // Retracting a row not (or no longer, after TTL) stored still retracts what
                // it joined, as Flink does.
                entry.count = entry.count.saturating_sub(1);
            }
            if let Some((kept, semi)) = one_side {
                semi_anti_row(&mut emit, &mut partners, &matched[i], (i, side == kept), semi, insert, total, stamp);
                continue;
            }
            if total == 0 {
                if outer_mine && !deferred {
                    emit.push(Some(i), None, if insert { Op::Insert } else { Op::Delete }, 1);
                }
                continue;
            }
            for j in &matched[i] {
                let j = *j as usize;
                let theirs = &mut partners.entries[j];
                let copies = theirs.count;
                if copies == 0 {
                    continue;
                }
                if insert {
                    if outer_theirs && theirs.partners == 0 && !deferred {
                        emit.push(None, Some(j), Op::Delete, copies);
                    }
                    emit.push(Some(i), Some(j), Op::Insert, copies);
                } else {
                    emit.push(Some(i), Some(j), Op::Delete, copies);
                }
                if outer_theirs {
                    theirs.partners = if insert { theirs.partners + 1 } else { theirs.partners.saturating_sub(1) };
                    theirs.touched = stamp;
                    partners.changed[j] = true;
                    if !insert && theirs.partners == 0 {
                        emit.push(None, Some(j), Op::Insert, copies);
                    }
                }
            }
        }

        // State: this side's entries, and the other side's partner counts.
        let mut values = Vec::new();
        let mine: Vec<Write<'_>> = own
            .iter()
            .filter(|(_, (_, _, changed, _))| *changed)
            .map(|(k, (g, e, _, i))| {
                (*g, *k, (e.count > 0).then(|| push_stored_value(&mut values, appending, e, row_bytes.row(*i).data())))
            })
            .collect();
        let changes: Vec<Change<'_>> = mine.iter().map(|(g, k, v)| (*g, *k, v.clone().map(|v| &values[v]))).collect();
        self.tables.write(self.sides[side], &changes)?;
        self.file_for_expiry(side, mine.iter().filter(|m| m.2.is_some()).map(|(g, k, _)| (*g, *k)))?;
        if self.spec.interval.is_some() {
            let mut dying = Vec::new();
            for i in (0..n).filter(|i| live[*i]) {
                if let (Some(d), Some(k)) = (dies[i], entry_keys[i]) {
                    dying.push((groups[i], [&ordered(d)[..], &[side as u8], k].concat()));
                }
            }
            let changes: Vec<Change<'_>> = dying.iter().map(|(g, k)| (*g, k.as_slice(), Some(&[][..]))).collect();
            self.tables.write(self.dying, &changes)?;
        }
        let mut theirs = Vec::new();
        values.clear();
        for (k, range) in partners.ranges.iter().enumerate() {
            for j in range.clone().filter(|j| partners.changed[*j]) {
                theirs.push((
                    distinct[k].0,
                    StateTables::entry_key(&distinct[k].1, &partners.sorts[j]),
                    push_stored_value(&mut values, self.spec.appending[other], &partners.entries[j], &partners.rows[j]),
                ));
            }
        }
        let changes: Vec<Change<'_>> =
            theirs.iter().map(|(g, k, v)| (*g, k.as_slice(), Some(&values[v.clone()]))).collect();
        self.tables.write(self.sides[other], &changes)?;
        self.file_for_expiry(other, theirs.iter().map(|(g, k, _)| (*g, k.as_slice())))?;

        if let Some(out_chunk) = emit.build(&self.spec, side, &batch, &partners.batch)? {
            out.push(Message::Chunk(out_chunk));
        }
        Ok(())
    }

    /// With a TTL, file each touched entry (`side`, group, entry key) under the watermark it
    /// was touched at.
    fn file_for_expiry<'a>(&mut self, side: usize, touched: impl Iterator<Item = (u16, &'a [u8])>) -> Result<()> {
        if self.spec.ttl.is_none() {
            return Ok(());
        }
        let stamp = ordered(self.progress.watermark.0);
        let keys: Vec<(u16, Vec<u8>)> = touched.map(|(g, k)| (g, [&stamp[..], &[side as u8], k].concat())).collect();
        let changes: Vec<Change<'_>> = keys.iter().map(|(g, k)| (*g, k.as_slice(), Some(&[][..]))).collect();
        self.tables.write(self.expiry, &changes)
    }

    /// Interval joins: drop the rows no row to come can meet once the watermark is at
    /// `watermark`; rows of an outer side that never met a partner are emitted padded.
    fn drop_dead(&mut self, watermark: i64, out: &mut Vec<Message>) -> Result<()> {
        let (from, to) = (ordered(i64::MIN), ordered(watermark.saturating_add(1)));
        let dead = self.tables.scan_times(self.dying, &from, &to)?;
        if dead.is_empty() {
            return Ok(());
        }
        self.tables.delete_times(self.dying, &from, &to)?;
        for side in 0..2 {
            let keys: Vec<(u16, &[u8])> = dead
                .iter()
                .filter(|(_, k, _)| k.get(8) == Some(&(side as u8)))
                .map(|(g, k, _)| (*g, &k[9..]))
                .collect();
            let values = self.tables.get_many(self.sides[side], &keys)?;
            let mut unmatched = Vec::new();
            let mut gone = Vec::new();
            for ((g, k), v) in keys.iter().zip(values) {
                let Some(v) = v else { continue };
                let entry = Entry::decode(&v)?;
                if self.spec.kind.outer(side) && entry.partners == 0 {
                    // An interval join's inputs append: the row's bytes follow the entry.
                    for _ in 0..entry.count {
                        unmatched.push(v[24..].to_vec());
                    }
                }
                gone.push((*g, *k, None));
            }
            self.tables.write(self.sides[side], &gone)?;
            if !unmatched.is_empty() {
                let rows = self.decode(side, &unmatched)?;
                let n = rows.num_rows() as u32;
                let mine = UInt32Array::from_iter_values(0..n);
                let none = UInt32Array::from(vec![None; n as usize]);
                let other = RecordBatch::new_empty(self.spec.schemas[1 - side].clone());
                let batch = if side == 0 {
                    assemble(&self.spec.schema, &rows, &mine, &other, &none)?
                } else {
                    assemble(&self.spec.schema, &other, &none, &rows, &mine)?
                };
                out.push(Message::Chunk(Chunk::inserts(batch)));
            }
        }
        Ok(())
    }

    /// Forget entries last touched at or before `horizon`: each filed entry whose stored
    /// stamp is still that old is deleted (a later touch filed it again).
    fn expire(&mut self, horizon: i64) -> Result<()> {
        let (from, to) = (ordered(i64::MIN), ordered(horizon.saturating_add(1)));
        let filed = self.tables.scan_times(self.expiry, &from, &to)?;
        if filed.is_empty() {
            return Ok(());
        }
        self.tables.delete_times(self.expiry, &from, &to)?;
        for side in 0..2 {
            let keys: Vec<(u16, &[u8])> = filed
                .iter()
                .filter(|(_, k, _)| k.get(8) == Some(&(side as u8)))
                .map(|(g, k, _)| (*g, &k[9..]))
                .collect();
            let values = self.tables.get_many(self.sides[side], &keys)?;
            let (mut gone, mut restamped) = (Vec::new(), Vec::new());
            for ((g, k), v) in keys.iter().zip(values) {
                let Some(v) = v else { continue };
                let mut entry = Entry::decode(&v)?;
                if entry.touched == i64::MIN {
                    // Touched before the first watermark: counts as touched at it.
                    entry.touched = self.progress.watermark.0;
                    restamped.push((*g, *k, [&entry.encode()[..], &v[24..]].concat()));
                } else if entry.touched <= horizon {
                    gone.push((*g, *k, None));
                }
            }
            let changes: Vec<Change<'_>> = restamped.iter().map(|(g, k, v)| (*g, *k, Some(&v[..]))).collect();
            gone.extend(changes);
            self.tables.write(self.sides[side], &gone)?;
            let refile: Vec<(u16, Vec<u8>)> = restamped.iter().map(|(g, k, _)| (*g, k.to_vec())).collect();
            self.file_for_expiry(side, refile.iter().map(|(g, k)| (*g, k.as_slice())))?;
        }
        Ok(())
    }
}

/// A semi or anti join's output for row `i` of the chunk (of the emitted side when `kept`):
/// - a row of the emitted side is emitted (or retracted) when it has partners (semi) or none
///   (anti), once per copy whatever the number of partners, as Flink's semi join;
/// - a row of the other side changes its partners' counts, and a partner whose count crosses
///   zero comes (semi) or goes (anti), or the other way round when the count falls to zero.
#[allow(clippy::too_many_arguments)]
fn semi_anti_row(
    emit: &mut Emitted,
    partners: &mut Partners,
    matched: &[u32],
    (i, kept): (usize, bool),
    semi: bool,
    insert: bool,
    total: u64,
    stamp: i64,
) {
    let op = |insert: bool| if insert { Op::Insert } else { Op::Delete };
    if kept {
        if (total > 0) == semi {
            emit.push(Some(i), None, op(insert), 1);
        }
        return;
    }
    for j in matched.iter().map(|j| *j as usize) {
        let theirs = &mut partners.entries[j];
        if theirs.count == 0 {
            continue;
        }
        let before = theirs.partners;
        theirs.partners = if insert { before + 1 } else { before.saturating_sub(1) };
        theirs.touched = stamp;
        partners.changed[j] = true;
        let (was, is) = (before > 0, theirs.partners > 0);
        if was != is {
            emit.push(None, Some(j), op(is == semi), theirs.count);
        }
    }
}

/// A write of an entry: key group, entry key, where its new value is in the chunk's buffer of
/// values (`None` deletes).
type Write<'a> = (u16, &'a [u8], Option<std::ops::Range<usize>>);

/// Output rows as (row of the chunk, row of the partners, op), expanded by copies.
#[derive(Default)]
struct Emitted {
    mine: Vec<Option<u32>>,
    theirs: Vec<Option<u32>>,
    ops: Vec<Op>,
}

impl Emitted {
    fn push(&mut self, mine: Option<usize>, theirs: Option<usize>, op: Op, copies: u64) {
        for _ in 0..copies {
            self.mine.push(mine.map(|i| i as u32));
            self.theirs.push(theirs.map(|j| j as u32));
            self.ops.push(op);
        }
    }

    /// The output rows: both inputs' columns, or a semi or anti join's emitted side's.
    fn build(self, spec: &JoinSpec, side: usize, batch: &RecordBatch, partners: &RecordBatch) -> Result<Option<Chunk>> {
        if self.ops.is_empty() {
            return Ok(None);
        }
        let schema = &spec.schema;
        let mine = UInt32Array::from(self.mine);
        let theirs = UInt32Array::from(self.theirs);
        let out = if let Some((kept, _)) = spec.kind.one_side() {
            let (rows, at) = if kept == side { (batch, &mine) } else { (partners, &theirs) };
            let columns = rows.columns().iter().map(|c| take(c.as_ref(), at, None)).collect::<Result<Vec<_>, _>>()?;
            let options = RecordBatchOptions::new().with_row_count(Some(at.len()));
            RecordBatch::try_new_with_options(schema.clone(), columns, &options)?
        } else if side == 0 {
            assemble(schema, batch, &mine, partners, &theirs)?
        } else {
            assemble(schema, partners, &theirs, batch, &mine)?
        };
        Ok(Some(if self.ops.iter().all(|o| *o == Op::Insert) {
            Chunk::inserts(out)
        } else {
            Chunk::changes(out, &self.ops)
        }))
    }
}

/// Whether the join's condition holds for each pair (left row `li[k]`, right row `ri[k]`);
/// all true without one. NULL (unknown) is not true.
pub(crate) fn pair_condition(
    spec: &JoinSpec,
    left: &RecordBatch,
    li: &UInt32Array,
    right: &RecordBatch,
    ri: &UInt32Array,
) -> Result<Vec<bool>> {
    let Some(filter) = &spec.filter else { return Ok(vec![true; li.len()]) };
    if li.is_empty() {
        return Ok(Vec::new());
    }
    let joined = assemble(&spec.pair_schema, left, li, right, ri)?;
    let keep = filter.evaluate(&joined)?.into_array(joined.num_rows())?;
    let keep = keep
        .as_any()
        .downcast_ref::<BooleanArray>()
        .ok_or_else(|| WeirError::internal("join condition is not boolean"))?;
    let keep = if keep.nulls().is_some() { prep_null_mask_filter(keep) } else { keep.clone() };
    Ok(keep.values().iter().collect())
}

/// Rows pairing left row `li[k]` with right row `ri[k]`; a NULL index pads that side with
/// NULLs.
pub(crate) fn assemble(
    schema: &SchemaRef,
    left: &RecordBatch,
    li: &UInt32Array,
    right: &RecordBatch,
    ri: &UInt32Array,
) -> Result<RecordBatch> {
    let mut columns = Vec::with_capacity(schema.fields().len());
    for c in left.columns() {
        columns.push(take(c.as_ref(), li, None)?);
    }
    for c in right.columns() {
        columns.push(take(c.as_ref(), ri, None)?);
    }
    let options = RecordBatchOptions::new().with_row_count(Some(li.len()));
    Ok(RecordBatch::try_new_with_options(schema.clone(), columns, &options)?)
}

impl KeyedLogic for StreamJoin {
    type Own = ();

    fn name(&self) -> String {
        "Join".into()
    }

    fn process(&mut self, input: usize, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        if input > 1 {
            return Err(WeirError::internal(format!("a join has two inputs, not input {input}")));
        }
        self.join_chunk(input, chunk, out)
    }

    /// An interval join's outer rows whose partners can no longer come are emitted alone (all
    /// of them at the end of the input); with a TTL, entries not touched for that long are
    /// forgotten first.
    fn fire(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        if self.spec.interval.is_some() {
            self.drop_dead(watermark.0, out)?;
        }
        if let (Some(ttl), false) = (self.spec.ttl, watermark == Watermark::END_OF_TIME) {
            self.expire(watermark.0.saturating_sub(ttl))?;
        }
        Ok(())
    }

    fn state(&mut self) -> (&mut StateTables, &mut Progress) {
        (&mut self.tables, &mut self.progress)
    }

    fn progress(&self) -> &Progress {
        &self.progress
    }
}

//! The group aggregate: Flink's `GROUP BY` outside a window (also a global aggregate,
//! `SELECT DISTINCT`, `UNION`), over an append-only or an updating input. Its output is
//! updating: a group's first result is a `+I`, a changed result a `-U` old / `+U` new pair,
//! and a group that a retracting input empties a `-D`.
//!
//! Per chunk, rows are grouped in memory first; then each distinct group touches the state
//! once (one `get_many`, one write) and emits at most one change: Flink emits one per input
//! row unless mini-batch is on. A group whose result did not change emits nothing. The stage
//! before computed the group key as columns `0..keys` and the exchange hashed exactly those,
//! so a group's state is filed under the key group that routed it (a checkpoint restores at
//! another parallelism).
//!
//! A retraction of a group without rows is dropped, as Flink drops it (a changelog that
//! starts mid-stream, a Debezium topic read from the latest offset, begins with updates of
//! rows never seen).
//!
//! State TTL (`'table.exec.state.ttl'`) is in event time: a group is forgotten, without any
//! output (as in Flink), once the watermark has passed the watermark of its last update by
//! the TTL; updates before the first watermark count as made at it. The `expiry` table files
//! each group under the watermark of its update; a group updated again since is found newer
//! and kept. Flink's TTL is processing time, so what it forgets depends on when a replay
//! runs; this depends on the input and its watermarks only.

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatchOptions;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use weir_core::{Chunk, Message, Op, Result, Watermark, WeirError};
use weir_state::tables::Change;
use weir_state::{StateTables, Table, TableDecl, TableKind};

use super::aggregates::{decode, encode, Acc, AggKind, AggregateDef, GroupState, Prepared, Values};
use super::keyed::KeyedLogic;
use super::state::{interner, ordered, Interner, Progress, StateContext};

mod bag;

const TABLES: [TableDecl; 5] = [
    TableDecl { name: "groups", kind: TableKind::Value },
    // Group keys by the watermark of their last update: `ordered(watermark) | key`.
    TableDecl { name: "expiry", kind: TableKind::Timed },
    // Per group and MIN/MAX aggregate, a count per value: over an updating input only.
    TableDecl { name: "extremes", kind: TableKind::Sorted },
    // Per group and DISTINCT aggregate, a count per value.
    TableDecl { name: "distinct", kind: TableKind::Sorted },
    // Per group and FIRST_VALUE/LAST_VALUE/LISTAGG/JSON aggregate over an updating input (and
    // JSON_OBJECTAGG over any): its values by arrival, `key | aggregate | sequence`.
    TableDecl { name: "bag", kind: TableKind::Sorted },
];

#[derive(Debug, Clone)]
pub struct GroupSpec {
    /// Input columns `0..keys` are the group key.
    pub keys: usize,
    pub aggregates: Vec<AggregateDef>,
    /// The input takes rows back: MIN and MAX then keep every value.
    pub retracting_input: bool,
    /// Group columns, then one column per aggregate.
    pub schema: SchemaRef,
    /// State TTL in event time, in milliseconds.
    pub ttl: Option<i64>,
}

pub struct GroupAggregate {
    spec: GroupSpec,
    tables: StateTables,
    groups: Table,
    extremes: Table,
    distinct: Table,
    bag: Table,
    expiry: Table,
    /// The watermark (the TTL's clock).
    progress: Progress,
    /// Groups were updated before the first watermark: filed under `i64::MIN` until it comes.
    unstamped: bool,
    /// Row format of the group key (`None`: a global aggregate, one group).
    keys: Option<RowConverter>,
    aggs: Vec<Prepared>,
    empty: Vec<Acc>,
    /// The DISTINCT aggregates, by argument column: each set shares its value counts.
    distinct_sets: Vec<Vec<usize>>,
}

/// The distinct groups of a chunk: each row's group, and each group's first row, key and
/// key group.
struct Grouped {
    of_row: Vec<usize>,
    keys: Vec<Vec<u8>>,
    key_groups: Vec<u16>,
}

/// The key under which aggregate `a` of the group with key `key` keeps its values.
fn value_key(key: &[u8], a: usize) -> Vec<u8> {
    let mut k = key.to_vec();
    k.push(a as u8);
    k
}

/// A group of the chunk (its index) and a value in row format.
type GroupValue<'a> = (usize, &'a [u8]);

/// A DISTINCT aggregate (MIN and MAX are the same with DISTINCT or without).
fn shares_values(agg: &AggregateDef) -> bool {
    agg.distinct && !matches!(agg.kind, AggKind::Min | AggKind::Max)
}

/// `k` little-endian counts (zeros for none).
fn counts_of(v: Option<&[u8]>, k: usize) -> Vec<i64> {
    let mut counts = Vec::with_capacity(k);
    counts_into(v, k, &mut counts);
    counts
}

/// [`counts_of`], into `counts` (cleared first). A value of [`flags_len`] bytes holds flags
/// instead ([`push_flags`]): each counts as one.
fn counts_into(v: Option<&[u8]>, k: usize, counts: &mut Vec<i64>) {
    counts.clear();
    counts.resize(k, 0);
    match v {
        Some(v) if v.len() == flags_len(k) => {
            for (j, c) in counts.iter_mut().enumerate() {
                *c = i64::from(v[j / 8] >> (j % 8) & 1);
            }
        }
        Some(v) => {
            for (c, bytes) in counts.iter_mut().zip(v.chunks_exact(8)) {
                *c = bytes.try_into().map(i64::from_le_bytes).unwrap_or(0);
            }
        }
        None => {}
    }
}

/// The length of `k` flags: never that of `k` counts (`8 * k`), so either reads back.
fn flags_len(k: usize) -> usize {
    k.div_ceil(8)
}

/// Over an append-only input, a DISTINCT value's entry says only which aggregates have
/// counted it (a count there only grows, and all that is read of it is whether it is
/// positive): a bit per aggregate instead of eight bytes. q16's two sets of four aggregates
/// write over a million such entries; their values went from 32 bytes to 1.
fn push_flags(counts: &[i64], out: &mut Vec<u8>) {
    let from = out.len();
    out.resize(from + flags_len(counts.len()), 0);
    for (j, _) in counts.iter().enumerate().filter(|(_, c)| **c > 0) {
        out[from + j / 8] |= 1 << (j % 8);
    }
}

impl GroupAggregate {
    pub fn new(spec: GroupSpec, state: &StateContext) -> Result<Self> {
        if spec.aggregates.len() > 255 {
            return Err(WeirError::not_supported("more than 255 aggregates in one GROUP BY"));
        }
        let keys = (spec.keys > 0)
            .then(|| {
                RowConverter::new(
                    spec.schema.fields()[..spec.keys].iter().map(|f| SortField::new(f.data_type().clone())).collect(),
                )
            })
            .transpose()?;
        let aggs = spec.aggregates.iter().cloned().map(Prepared::new).collect::<Result<Vec<_>>>()?;
        let empty = aggs.iter().map(|a| a.empty()).collect();
        let mut distinct_sets: Vec<Vec<usize>> = Vec::new();
        for (a, agg) in spec.aggregates.iter().enumerate().filter(|(_, agg)| shares_values(agg)) {
            match distinct_sets.iter_mut().find(|s| spec.aggregates[s[0]].arg == agg.arg) {
                Some(set) => set.push(a),
                None => distinct_sets.push(vec![a]),
            }
        }
        let tables = state.open(&TABLES)?;
        Ok(Self {
            groups: tables.table("groups")?,
            extremes: tables.table("extremes")?,
            distinct: tables.table("distinct")?,
            bag: tables.table("bag")?,
            expiry: tables.table("expiry")?,
            progress: Progress::default(),
            unstamped: false,
            tables,
            spec,
            keys,
            aggs,
            empty,
            distinct_sets,
        })
    }

    fn group(&self, batch: &RecordBatch) -> Result<Grouped> {
        let rows = batch.num_rows();
        let key_columns: Vec<ArrayRef> = batch.columns()[..self.spec.keys].to_vec();
        let encoded: Option<Rows> = self.keys.as_ref().map(|c| c.convert_columns(&key_columns)).transpose()?;
        let key_of = |i: usize| encoded.as_ref().map_or(&[][..], |r| r.row(i).data());
        let mut index: Interner<&[u8], usize> = interner();
        let mut of_row = Vec::with_capacity(rows);
        let mut first = Vec::new();
        for i in 0..rows {
            let next = first.len();
            let g = *index.entry(key_of(i)).or_insert(next);
            if g == next {
                first.push(i);
            }
            of_row.push(g);
        }
        let all = crate::exchange::key_groups_of_columns(&key_columns, rows, self.tables.key_groups())?;
        Ok(Grouped {
            of_row,
            keys: first.iter().map(|i| key_of(*i).to_vec()).collect(),
            key_groups: first.iter().map(|i| all[*i]).collect(),
        })
    }

    /// Apply a table's per-(group, value) count changes; returns the counts before and after.
    fn count_values(
        &mut self,
        table: Table,
        grouped: &Grouped,
        a: usize,
        deltas: &[((usize, &[u8]), i64)],
    ) -> Result<Vec<(i64, i64)>> {
        let keys: Vec<Vec<u8>> =
            deltas.iter().map(|((g, v), _)| StateTables::entry_key(&value_key(&grouped.keys[*g], a), v)).collect();
        let lookups: Vec<(u16, &[u8])> =
            deltas.iter().zip(&keys).map(|(((g, _), _), k)| (grouped.key_groups[*g], k.as_slice())).collect();
        let stored = self.tables.get_many(table, &lookups)?;
        let counts: Vec<(i64, i64)> = stored
            .iter()
            .zip(deltas)
            .map(|(s, (_, d))| {
                let before = counts_of(s.as_deref(), 1)[0];
                (before, before + d)
            })
            .collect();
        let bytes: Vec<[u8; 8]> = counts.iter().map(|(_, n)| n.to_le_bytes()).collect();
        let changes: Vec<Change<'_>> = lookups
            .iter()
            .zip(&counts)
            .zip(&bytes)
            .map(|(((g, k), (_, n)), b)| (*g, *k, (*n > 0).then_some(&b[..])))
            .collect();
        self.tables.write(table, &changes)?;
        Ok(counts)
    }

    /// Aggregate `a` (not a DISTINCT one: [`Self::accumulate_distinct`]) over the chunk, into
    /// the groups' new states.
    fn accumulate(
        &mut self,
        a: usize,
        batch: &RecordBatch,
        signs: &[i64],
        grouped: &Grouped,
        new: &mut [GroupState],
    ) -> Result<()> {
        let def = self.aggs[a].def.clone();
        if let AggKind::Bag(kind) = def.kind {
            return self.accumulate_bag(a, kind, batch, signs, grouped, new);
        }
        let arg = def.arg.map(|c| batch.column(c).clone());
        let filter: Option<BooleanArray> = def.filter.map(|c| batch.column(c).as_boolean().clone());
        let counted = |i: usize| {
            signs[i] != 0
                && filter.as_ref().is_none_or(|f| f.is_valid(i) && f.value(i))
                && arg.as_ref().is_none_or(|a| a.is_valid(i))
        };
        let agg = &self.aggs[a];
        let values = match (&arg, agg.lane, def.kind) {
            (Some(arg), Some(lane), AggKind::Sum | AggKind::Avg | AggKind::Moment(_)) => Some(Values::read(arg, lane)?),
            _ => None,
        };
        let value_rows = match (&agg.rows, &arg) {
            (Some(c), Some(arg)) => Some(c.convert_columns(std::slice::from_ref(arg))?),
            _ => None,
        };
        let extreme = matches!(def.kind, AggKind::Min | AggKind::Max);
        let rows = batch.num_rows();
        let (true, Some(value_rows)) = (extreme && self.spec.retracting_input, &value_rows) else {
            // Plain: each counted row adds or takes away its value.
            for i in (0..rows).filter(|i| counted(*i)) {
                let acc = &mut new[grouped.of_row[i]].accs[a];
                match &value_rows {
                    Some(r) if extreme => agg.offer(acc, r.row(i).data()),
                    _ => agg.add(acc, values.as_ref(), i, signs[i]),
                }
            }
            return Ok(());
        };
        // MIN/MAX over an updating input: a signed count per value.
        let mut per_value: Interner<GroupValue<'_>, i64> = interner();
        for i in (0..rows).filter(|i| counted(*i)) {
            *per_value.entry((grouped.of_row[i], value_rows.row(i).data())).or_insert(0) += signs[i];
        }
        let mut deltas: Vec<(GroupValue<'_>, i64)> = per_value.into_iter().collect();
        deltas.sort_unstable();
        let counts = self.count_values(self.extremes, grouped, a, &deltas)?;
        let mut lost = vec![false; new.len()];
        for (((g, v), _), (before, after)) in deltas.iter().zip(&counts) {
            if *after <= 0 && *before > 0 {
                lost[*g] = true;
            } else if *after > 0 {
                self.aggs[a].offer(&mut new[*g].accs[a], v);
            }
        }
        // A group whose extreme may have gone finds it again among its values.
        for (g, _) in lost.iter().enumerate().filter(|(_, l)| **l) {
            let entries = self.tables.entries(self.extremes, grouped.key_groups[g], &value_key(&grouped.keys[g], a))?;
            let found = match def.kind {
                AggKind::Min => entries.first(),
                _ => entries.last(),
            };
            new[g].accs[a] = Acc::Extreme(found.map(|(v, _)| v.clone()));
        }
        Ok(())
    }

    /// The DISTINCT aggregates of one argument column (`set`, by index), which share one
    /// entry per (group, value): a count per aggregate (their `FILTER`s differ), so q15's four
    /// `count(DISTINCT bidder) FILTER (…)` touch the state once per value. An aggregate takes a
    /// value in when its count turns positive and back out when it falls to zero.
    fn accumulate_distinct(
        &mut self,
        set: &[usize],
        batch: &RecordBatch,
        signs: &[i64],
        grouped: &Grouped,
        new: &mut [GroupState],
    ) -> Result<()> {
        let first = set[0];
        let (Some(column), Some(converter)) = (self.aggs[first].def.arg, self.aggs[first].rows.as_ref()) else {
            return Err(WeirError::internal("a DISTINCT aggregate without an argument"));
        };
        let arg = batch.column(column).clone();
        let value_rows = converter.convert_columns(std::slice::from_ref(&arg))?;
        let filters: Vec<Option<BooleanArray>> =
            set.iter().map(|a| self.aggs[*a].def.filter.map(|c| batch.column(c).as_boolean().clone())).collect();
        let mut values = Vec::with_capacity(set.len());
        for a in set {
            let agg = &self.aggs[*a];
            values.push(match (agg.lane, agg.def.kind) {
                (Some(lane), AggKind::Sum | AggKind::Avg | AggKind::Moment(_)) => Some(Values::read(&arg, lane)?),
                _ => None,
            });
        }
        // Per (group, value): where its signed counts start in `counts` (one per aggregate),
        // and a row holding the value. Flat buffers: this runs per distinct value of a chunk.
        let k = set.len();
        let mut per_value: Interner<GroupValue<'_>, (usize, usize)> = interner();
        let mut counts: Vec<i64> = Vec::new();
        let passes = |f: &Option<BooleanArray>, i: usize| f.as_ref().is_none_or(|f| f.is_valid(i) && f.value(i));
        for i in (0..batch.num_rows()).filter(|i| signs[*i] != 0 && arg.is_valid(*i)) {
            // A row no aggregate of the set counts touches nothing.
            if !filters.iter().any(|f| passes(f, i)) {
                continue;
            }
            let (at, _) = *per_value.entry((grouped.of_row[i], value_rows.row(i).data())).or_insert_with(|| {
                counts.resize(counts.len() + k, 0);
                (counts.len() - k, i)
            });
            for (count, f) in counts[at..at + k].iter_mut().zip(&filters) {
                if passes(f, i) {
                    *count += signs[i];
                }
            }
        }
        let mut deltas: Vec<(GroupValue<'_>, usize, usize)> =
            per_value.into_iter().map(|(key, (at, row))| (key, at, row)).collect();
        deltas.sort_unstable_by(|x, y| x.0.cmp(&y.0));
        // Each group's key for this set, made once per group rather than once per value.
        let mut group_keys: Vec<Option<Vec<u8>>> = vec![None; grouped.keys.len()];
        let mut joined = Vec::new();
        let mut ends = Vec::with_capacity(deltas.len());
        for ((g, v), _, _) in &deltas {
            let key = group_keys[*g].get_or_insert_with(|| value_key(&grouped.keys[*g], first));
            StateTables::push_entry_key(&mut joined, key, v);
            ends.push(joined.len());
        }
        let lookups: Vec<(u16, &[u8])> = deltas
            .iter()
            .zip(weir_state::pieces(&joined, &ends))
            .map(|(((g, _), _, _), key)| (grouped.key_groups[*g], key))
            .collect();
        let stored = self.tables.get_many(self.distinct, &lookups)?;
        // What to write per value: nothing, a delete, or its counts (a range of `encoded`).
        let mut encoded: Vec<u8> = Vec::new();
        let mut writes: Vec<Option<Option<std::ops::Range<usize>>>> = Vec::with_capacity(deltas.len());
        let (mut before, mut after) = (Vec::with_capacity(k), Vec::with_capacity(k));
        for (((g, _), at, row), old) in deltas.iter().zip(&stored) {
            counts_into(old.as_deref(), k, &mut before);
            after.clear();
            after.extend(before.iter().zip(&counts[*at..*at + k]).map(|(b, d)| b + d));
            for (j, (b, a)) in before.iter().zip(&after).enumerate() {
                let sign = match (*b > 0, *a > 0) {
                    (false, true) => 1,
                    (true, false) => -1,
                    _ => continue,
                };
                self.aggs[set[j]].add(&mut new[*g].accs[set[j]], values[j].as_ref(), *row, sign);
            }
            // Over an append-only input counts only grow, so all that matters of a stored
            // count is that it is positive: a value already counted by the same aggregates is
            // not written again (q16's distinct bidders and auctions are mostly repeats).
            let unchanged = !self.spec.retracting_input
                && old.is_some()
                && before.iter().zip(&after).all(|(b, a)| (*b > 0) == (*a > 0));
            writes.push(if unchanged {
                None
            } else if after.iter().any(|c| *c > 0) {
                let from = encoded.len();
                if self.spec.retracting_input {
                    encoded.extend(after.iter().flat_map(|c| c.to_le_bytes()));
                } else {
                    push_flags(&after, &mut encoded);
                }
                Some(Some(from..encoded.len()))
            } else {
                Some(None)
            });
        }
        let changes: Vec<Change<'_>> = lookups
            .iter()
            .zip(&writes)
            .filter_map(|((g, key), w)| w.as_ref().map(|v| (*g, *key, v.clone().map(|r| &encoded[r]))))
            .collect();
        self.tables.write(self.distinct, &changes)?;
        Ok(())
    }

    /// Where values are counted per group: each DISTINCT set's entries (under its first
    /// aggregate), and MIN/MAX's over an updating input.
    fn counted_values(&self) -> Vec<(Table, usize)> {
        let mut tables: Vec<(Table, usize)> = self.distinct_sets.iter().map(|set| (self.distinct, set[0])).collect();
        if self.spec.retracting_input {
            let extremes =
                self.aggs.iter().enumerate().filter(|(_, a)| matches!(a.def.kind, AggKind::Min | AggKind::Max));
            tables.extend(extremes.map(|(a, _)| (self.extremes, a)));
        }
        let bags = self.aggs.iter().enumerate().filter(|(_, agg)| self.keeps_bag(agg.def.kind));
        tables.extend(bags.map(|(a, _)| (self.bag, a)));
        tables
    }

    /// Groups updated before the first watermark, filed under it now that it has come.
    fn restamp(&mut self) -> Result<()> {
        let (from, to) = (ordered(i64::MIN), ordered(i64::MIN + 1));
        let entries = self.tables.scan_times(self.expiry, &from, &to)?;
        self.tables.delete_times(self.expiry, &from, &to)?;
        let stamp = self.progress.watermark.0;
        let lookups: Vec<(u16, &[u8])> = entries.iter().map(|(g, k, _)| (*g, &k[8..])).collect();
        let stored = self.tables.get_many(self.groups, &lookups)?;
        let mut states = Vec::new();
        let mut filed = Vec::new();
        for ((g, key), value) in lookups.iter().zip(&stored) {
            let Some(value) = value else { continue };
            let mut state = decode(value, &self.empty)?;
            if state.updated == i64::MIN {
                state.updated = stamp;
                let mut bytes = Vec::new();
                encode(&state, &mut bytes);
                states.push((*g, key.to_vec(), bytes));
                filed.push((*g, [&ordered(stamp)[..], key].concat()));
            }
        }
        let changes: Vec<Change<'_>> = states.iter().map(|(g, k, v)| (*g, k.as_slice(), Some(v.as_slice()))).collect();
        self.tables.write(self.groups, &changes)?;
        let changes: Vec<Change<'_>> = filed.iter().map(|(g, k)| (*g, k.as_slice(), Some(&[][..]))).collect();
        self.tables.write(self.expiry, &changes)?;
        self.unstamped = false;
        Ok(())
    }

    /// Forget every group last updated at or before watermark `bound`.
    fn expire(&mut self, bound: i64) -> Result<()> {
        let (from, to) = (ordered(i64::MIN), ordered(bound.saturating_add(1)));
        let entries = self.tables.scan_times(self.expiry, &from, &to)?;
        if entries.is_empty() {
            return Ok(());
        }
        self.tables.delete_times(self.expiry, &from, &to)?;
        let lookups: Vec<(u16, &[u8])> = entries.iter().map(|(g, k, _)| (*g, &k[8..])).collect();
        let stored = self.tables.get_many(self.groups, &lookups)?;
        let mut gone: Vec<(u16, &[u8])> = Vec::new();
        for (((g, key), value), (_, filed, _)) in lookups.iter().zip(&stored).zip(&entries) {
            let Some(value) = value else { continue };
            // A group updated since it was filed here is kept: its newer entry decides.
            if ordered(decode(value, &self.empty)?.updated)[..] == filed[..8] {
                gone.push((*g, key));
            }
        }
        for (g, key) in &gone {
            for (table, a) in self.counted_values() {
                let entries = self.tables.entries(table, *g, &value_key(key, a))?;
                let keys: Vec<Vec<u8>> =
                    entries.iter().map(|(v, _)| StateTables::entry_key(&value_key(key, a), v)).collect();
                let deletes: Vec<Change<'_>> = keys.iter().map(|k| (*g, k.as_slice(), None)).collect();
                self.tables.write(table, &deletes)?;
            }
        }
        let deletes: Vec<Change<'_>> = gone.iter().map(|(g, k)| (*g, *k, None)).collect();
        self.tables.write(self.groups, &deletes)?;
        Ok(())
    }

    /// The output rows for (group, state) pairs.
    fn rows(&self, grouped: &Grouped, picked: &[(usize, &GroupState)], ops: &[Op]) -> Result<Chunk> {
        let mut columns: Vec<ArrayRef> = match &self.keys {
            Some(converter) => {
                let parser = converter.parser();
                converter.convert_rows(picked.iter().map(|(g, _)| parser.parse(&grouped.keys[*g])))?
            }
            None => Vec::new(),
        };
        for (a, agg) in self.aggs.iter().enumerate() {
            let accs: Vec<&Acc> = picked.iter().map(|(_, s)| &s.accs[a]).collect();
            columns.push(agg.results(&accs)?);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(picked.len()));
        let batch = RecordBatch::try_new_with_options(self.spec.schema.clone(), columns, &options)?;
        Ok(Chunk::changes(batch, ops))
    }
}

impl KeyedLogic for GroupAggregate {
    type Own = bool;

    fn name(&self) -> String {
        "GroupAggregate".into()
    }

    fn process(&mut self, _input: usize, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        if chunk.num_rows() == 0 {
            return Ok(());
        }
        let grouped = self.group(&chunk.batch)?;
        let mut signs: Vec<i64> = (0..chunk.num_rows()).map(|i| chunk.op(i).sign()).collect();
        let lookups: Vec<(u16, &[u8])> =
            grouped.key_groups.iter().zip(&grouped.keys).map(|(g, k)| (*g, k.as_slice())).collect();
        let old: Vec<Option<GroupState>> = self
            .tables
            .get_many(self.groups, &lookups)?
            .iter()
            .map(|v| v.as_ref().map(|v| decode(v, &self.empty)).transpose())
            .collect::<Result<_>>()?;
        let stamp = self.progress.watermark.0;
        let mut new: Vec<GroupState> = old
            .iter()
            .map(|o| match o {
                Some(o) => GroupState { updated: stamp, ..o.clone() },
                None => GroupState { rows: 0, updated: stamp, accs: self.empty.clone() },
            })
            .collect();
        // Rows in order, as Flink takes records: a retraction while its group has no rows
        // (it came before its insert, or the key was forgotten) is dropped, sign 0, so that a
        // later insert of the same chunk still counts.
        for (g, s) in grouped.of_row.iter().zip(&mut signs) {
            if *s < 0 && new[*g].rows <= 0 {
                *s = 0;
            } else {
                new[*g].rows += *s;
            }
        }
        for a in 0..self.aggs.len() {
            if !shares_values(&self.aggs[a].def) {
                self.accumulate(a, &chunk.batch, &signs, &grouped, &mut new)?;
            }
        }
        for set in self.distinct_sets.clone() {
            self.accumulate_distinct(&set, &chunk.batch, &signs, &grouped, &mut new)?;
        }
        // One change per group, then one write.
        let mut picked: Vec<(usize, &GroupState)> = Vec::new();
        let mut ops = Vec::new();
        let mut encoded: Vec<Option<Vec<u8>>> = Vec::with_capacity(new.len());
        for (g, (before, after)) in old.iter().zip(&new).enumerate() {
            let alive = after.rows > 0;
            match (before, alive) {
                (None, true) => {
                    picked.push((g, after));
                    ops.push(Op::Insert);
                }
                (Some(before), false) => {
                    picked.push((g, before));
                    ops.push(Op::Delete);
                }
                (Some(before), true) if before.accs != after.accs => {
                    picked.extend([(g, before), (g, after)]);
                    ops.extend([Op::UpdateBefore, Op::UpdateAfter]);
                }
                _ => {}
            }
            encoded.push(alive.then(|| {
                let mut bytes = Vec::new();
                encode(after, &mut bytes);
                bytes
            }));
        }
        let changes: Vec<Change<'_>> = lookups
            .iter()
            .zip(&encoded)
            .zip(&old)
            .filter(|((_, e), o)| e.is_some() || o.is_some())
            .map(|(((g, k), e), _)| (*g, *k, e.as_deref()))
            .collect();
        self.tables.write(self.groups, &changes)?;
        if self.spec.ttl.is_some() {
            // File each group written under this watermark, unless it already is.
            let keys: Vec<(u16, Vec<u8>)> = (0..new.len())
                .filter(|g| encoded[*g].is_some() && old[*g].as_ref().is_none_or(|o| o.updated != stamp))
                .map(|g| (grouped.key_groups[g], [&ordered(stamp)[..], &grouped.keys[g]].concat()))
                .collect();
            let filed: Vec<Change<'_>> = keys.iter().map(|(g, k)| (*g, k.as_slice(), Some(&[][..]))).collect();
            self.tables.write(self.expiry, &filed)?;
            self.unstamped |= stamp == i64::MIN && !filed.is_empty();
        }
        if !picked.is_empty() {
            out.push(Message::Chunk(self.rows(&grouped, &picked, &ops)?));
        }
        Ok(())
    }

    /// With a TTL, groups not updated for that long are forgotten (the end of the input
    /// forgets nothing: nothing more comes to find a group gone). Groups updated before the
    /// first watermark are filed under it when it comes.
    fn fire(&mut self, watermark: Watermark, _out: &mut Vec<Message>) -> Result<()> {
        if let (Some(ttl), false) = (self.spec.ttl, watermark == Watermark::END_OF_TIME) {
            if self.unstamped {
                self.restamp()?;
            }
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

    fn own(&self) -> bool {
        self.unstamped
    }

    /// From one snapshot or several (another parallelism): groups of any are unstamped.
    fn restore_own(&mut self, own: Vec<bool>) -> Result<()> {
        self.unstamped |= own.into_iter().any(|u| u);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Flags read back as counts of one; counts written before flags existed (and over an
    /// updating input) still read as counts, whatever the number of aggregates.
    #[test]
    fn a_distinct_entry_reads_back_as_flags_or_as_counts() {
        for k in [1, 4, 8, 9, 255] {
            let counts: Vec<i64> = (0..k).map(|j| if j % 3 == 1 { 0 } else { j as i64 + 2 }).collect();
            let mut flags = Vec::new();
            push_flags(&counts, &mut flags);
            assert_eq!(flags.len(), flags_len(k));
            let expected: Vec<i64> = counts.iter().map(|c| i64::from(*c > 0)).collect();
            assert_eq!(counts_of(Some(&flags), k), expected, "{k} flags");
            let stored: Vec<u8> = counts.iter().flat_map(|c| c.to_le_bytes()).collect();
            assert_eq!(counts_of(Some(&stored), k), counts, "{k} counts");
        }
        assert_eq!(counts_of(None, 3), vec![0, 0, 0]);
    }
}

//! Top-N and deduplication: `ROW_NUMBER()` (or `RANK()`, `DENSE_RANK()`) `OVER (PARTITION BY
//! … ORDER BY …)` filtered to ranks `lo..=hi`, as Flink's rank operators. Each partition's
//! rows live in a sorted state table under the partition key, ordered by the `ORDER BY`
//! columns (Arrow's row format with each column's direction) and then by arrival, so that
//! of rows that tie the earlier ranks first (as Flink's Top-N; a deduplication keeping the
//! last row lets the later win instead, as Flink's).
//!
//! Per chunk, each partition is read once (one prefix scan), all of the chunk's rows of it
//! applied in order, and what changed in its ranks `lo..=hi` emitted once: a `-U`/`+U` pair
//! per rank whose row changed, `-D` for a rank no longer filled, `+I` for a new one. Over an
//! append-only input only the rows that rank within `hi` are kept (a row pushed out never
//! comes back), all of a partition's in one value (`tops`), so that a chunk reads its
//! partitions with one multi-get; over an updating input every row is (a retraction can
//! bring one back), each an entry of the sorted table `ranked`. `ROW_NUMBER()` over an
//! append-only input, the common case, has a path that copies no rows ([`append_only`]).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, UInt64Array};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatchOptions;
use datafusion::arrow::row::{RowConverter, SortField};
use weir_core::{Chunk, Message, Op, Result, Watermark, WeirError};
use weir_state::tables::Change;
use weir_state::{StateTables, Table, TableDecl, TableKind};

use super::keyed::KeyedLogic;
use super::state::{interner, ordered, Progress, StateContext};

mod append_only;

const TABLES: [TableDecl; 4] = [
    TableDecl { name: "ranked", kind: TableKind::Sorted },
    TableDecl { name: "tops", kind: TableKind::Value },
    TableDecl { name: "touched", kind: TableKind::Value },
    TableDecl { name: "expiry", kind: TableKind::Timed },
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankKind {
    RowNumber,
    Rank,
    DenseRank,
}

#[derive(Debug, Clone)]
pub struct TopNSpec {
    pub kind: RankKind,
    /// Partition columns of the input (what the exchange before hashed).
    pub partition: Vec<usize>,
    /// `ORDER BY` columns of the input, each with its direction.
    pub order: Vec<(usize, SortOptions)>,
    /// Ranks kept, 1-based and inclusive.
    pub lo: u64,
    pub hi: u64,
    /// Of rows that tie, the later arrival ranks first (Flink's deduplication keeping the
    /// last row).
    pub later_wins_ties: bool,
    /// Whether rows of the input can be retracted (then every row is kept in state).
    pub retracting_input: bool,
    pub input_schema: SchemaRef,
    /// The input's columns and the rank.
    pub schema: SchemaRef,
    /// Event-time state TTL in milliseconds (`'table.exec.state.ttl'`): a partition not
    /// written while the watermark advanced this much is forgotten.
    pub ttl: Option<i64>,
}

/// A partition's rows as stored: sort key (order bytes, then arrival) and row bytes.
type Ranked = Vec<(Vec<u8>, Vec<u8>)>;

pub struct TopN {
    spec: TopNSpec,
    partitions: RowConverter,
    order: RowConverter,
    rows: RowConverter,
    tables: StateTables,
    ranked: Table,
    tops: Table,
    /// With a TTL: each partition's watermark when last written, and partitions filed by it.
    touched: Table,
    expiry: Table,
    /// The watermark, and the arrival numbers of rows (the tie-break).
    progress: Progress,
    /// Retractions of rows that were not there (or had left an append-only Top-N).
    pub unmatched: u64,
}

impl TopN {
    pub fn new(spec: TopNSpec, state: &StateContext) -> Result<Self> {
        if spec.order.is_empty() {
            return Err(WeirError::user("Top-N needs an ORDER BY: without one, which rows are first is not defined"));
        }
        let field = |i: usize, o: Option<SortOptions>| {
            let t = spec.input_schema.field(i).data_type().clone();
            match o {
                Some(o) => SortField::new_with_options(t, o),
                None => SortField::new(t),
            }
        };
        let partitions = RowConverter::new(spec.partition.iter().map(|i| field(*i, None)).collect())?;
        let order = RowConverter::new(spec.order.iter().map(|(i, o)| field(*i, Some(*o))).collect())?;
        let rows = RowConverter::new((0..spec.input_schema.fields().len()).map(|i| field(i, None)).collect())?;
        let tables = state.open(&TABLES)?;
        Ok(Self {
            ranked: tables.table("ranked")?,
            tops: tables.table("tops")?,
            touched: tables.table("touched")?,
            expiry: tables.table("expiry")?,
            progress: Progress::default(),
            tables,
            partitions,
            order,
            rows,
            spec,
            unmatched: 0,
        })
    }

    fn ranks(&self, rows: &Ranked, order_len: &[usize]) -> Vec<u64> {
        ranks(&self.spec, rows.iter().map(|(k, _)| k.as_slice()), order_len)
    }

    /// With a TTL: note the watermark at which these partitions were written.
    fn stamp(&mut self, written: &[(u16, &[u8])]) -> Result<()> {
        if self.spec.ttl.is_none() || written.is_empty() {
            return Ok(());
        }
        let stamp = self.progress.watermark.0.to_le_bytes();
        let filed: Vec<(u16, Vec<u8>)> =
            written.iter().map(|(g, k)| (*g, [&ordered(self.progress.watermark.0)[..], k].concat())).collect();
        let changes: Vec<Change<'_>> = written.iter().map(|(g, k)| (*g, *k, Some(&stamp[..]))).collect();
        self.tables.write(self.touched, &changes)?;
        let changes: Vec<Change<'_>> = filed.iter().map(|(g, k)| (*g, k.as_slice(), Some(&[][..]))).collect();
        self.tables.write(self.expiry, &changes)
    }

    /// Forget the partitions last written at or before `horizon`; those written before the
    /// first watermark count as written at it.
    fn expire(&mut self, horizon: i64) -> Result<()> {
        let (from, to) = (ordered(i64::MIN), ordered(horizon.saturating_add(1)));
        let filed = self.tables.scan_times(self.expiry, &from, &to)?;
        if filed.is_empty() {
            return Ok(());
        }
        self.tables.delete_times(self.expiry, &from, &to)?;
        let keys: Vec<(u16, &[u8])> = filed.iter().map(|(g, k, _)| (*g, &k[8..])).collect();
        let stamps = self.tables.get_many(self.touched, &keys)?;
        let (mut restamp, mut gone) = (Vec::new(), Vec::new());
        for ((g, k), stamp) in keys.iter().zip(stamps) {
            let Some(stamp) = stamp.and_then(|s| s.try_into().ok()).map(i64::from_le_bytes) else { continue };
            if stamp == i64::MIN {
                restamp.push((*g, *k));
            } else if stamp <= horizon {
                gone.push((*g, *k));
            }
        }
        for (g, k) in &gone {
            self.tables.delete_entries(self.ranked, *g, k)?;
        }
        let changes: Vec<Change<'_>> = gone.iter().map(|(g, k)| (*g, *k, None)).collect();
        self.tables.write(self.tops, &changes)?;
        self.tables.write(self.touched, &changes)?;
        self.stamp(&restamp)
    }

    /// Changes as one chunk of rows and their ranks.
    fn emit<R: AsRef<[u8]>>(&self, changes: &[(R, u64, Op)], out: &mut Vec<Message>) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let parser = self.rows.parser();
        let mut columns = self.rows.convert_rows(changes.iter().map(|(r, _, _)| parser.parse(r.as_ref())))?;
        columns.push(Arc::new(UInt64Array::from_iter_values(changes.iter().map(|c| c.1))));
        let options = RecordBatchOptions::new().with_row_count(Some(changes.len()));
        let batch = RecordBatch::try_new_with_options(self.spec.schema.clone(), columns, &options)?;
        let ops: Vec<Op> = changes.iter().map(|c| c.2).collect();
        out.push(Message::Chunk(Chunk::changes(batch, &ops)));
        Ok(())
    }

    /// The next arrival number as it orders rows that tie: later first for a deduplication
    /// keeping the last row.
    fn next_seq(&mut self) -> u64 {
        let seq = if self.spec.later_wins_ties { u64::MAX - self.progress.next_seq } else { self.progress.next_seq };
        self.progress.next_seq += 1;
        seq
    }

    fn sort_key(&mut self, order: &[u8]) -> Vec<u8> {
        [order, &self.next_seq().to_be_bytes()].concat()
    }
}

/// The ranks of a partition's sorted rows (their sort keys; `order_len`: bytes of each that
/// are the `ORDER BY` values), up to the first past `hi`.
pub(super) fn ranks<'a>(spec: &TopNSpec, keys: impl Iterator<Item = &'a [u8]>, order_len: &[usize]) -> Vec<u64> {
    let mut out = Vec::new();
    let (mut rank, mut dense) = (0u64, 0u64);
    let mut previous: Option<&[u8]> = None;
    for (i, key) in keys.enumerate() {
        let order = &key[..order_len[i]];
        let tied = previous == Some(order);
        previous = Some(order);
        rank = match spec.kind {
            RankKind::RowNumber => i as u64 + 1,
            RankKind::Rank if tied => rank,
            RankKind::Rank => i as u64 + 1,
            RankKind::DenseRank if tied => dense,
            RankKind::DenseRank => {
                dense += 1;
                dense
            }
        };
        if rank > spec.hi {
            break;
        }
        out.push(rank);
    }
    out
}

/// A partition's top rows as one value: each row's sort key and bytes, length-prefixed.
fn encode_top(rows: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(rows.iter().map(|(k, v)| 8 + k.len() + v.len()).sum());
    for (k, v) in rows {
        push_item(&mut out, k);
        push_item(&mut out, v);
    }
    out
}

fn push_item(out: &mut Vec<u8>, item: &[u8]) {
    out.extend_from_slice(&(item.len() as u32).to_le_bytes());
    out.extend_from_slice(item);
}

/// The next length-prefixed item of an [`encode_top`] value, borrowed.
fn next_item<'b>(bytes: &mut &'b [u8]) -> Result<&'b [u8]> {
    let damaged = || WeirError::internal("Top-N state is damaged");
    let (len, rest) = bytes.split_at_checked(4).ok_or_else(damaged)?;
    let len = u32::from_le_bytes(len.try_into().map_err(|_| damaged())?) as usize;
    let (item, rest) = rest.split_at_checked(len).ok_or_else(damaged)?;
    *bytes = rest;
    Ok(item)
}

fn decode_top(mut bytes: &[u8]) -> Result<Ranked> {
    let mut rows = Vec::new();
    while !bytes.is_empty() {
        let k = next_item(&mut bytes)?.to_vec();
        let v = next_item(&mut bytes)?.to_vec();
        rows.push((k, v));
    }
    Ok(rows)
}

/// What a chunk changes in the output, as rows to decode: (row bytes, rank, op).
type Changes = Vec<(Vec<u8>, u64, Op)>;

impl KeyedLogic for TopN {
    type Own = ();

    fn name(&self) -> String {
        "TopN".into()
    }

    fn process(&mut self, _input: usize, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        let n = chunk.num_rows();
        if n == 0 {
            return Ok(());
        }
        let ops = chunk.ops();
        let batch = &chunk.batch;
        let part_columns: Vec<ArrayRef> = self.spec.partition.iter().map(|i| batch.column(*i).clone()).collect();
        let order_columns: Vec<ArrayRef> = self.spec.order.iter().map(|(i, _)| batch.column(*i).clone()).collect();
        let part_keys = self.partitions.convert_columns(&part_columns)?;
        let order_keys = self.order.convert_columns(&order_columns)?;
        let rows = self.rows.convert_columns(batch.columns())?;
        let groups = crate::exchange::key_groups_of_columns(&part_columns, n, self.tables.key_groups())?;

        // The chunk's rows by partition, partitions in order of first appearance.
        let mut index = interner::<&[u8], usize>();
        let mut partitions: Vec<(u16, &[u8], Vec<usize>)> = Vec::new();
        for (i, group) in groups.iter().enumerate() {
            // Without partition columns (ORDER BY … LIMIT) the whole stream is one partition;
            // Arrow's rows of no columns hold no row to index.
            let key = if part_columns.is_empty() { &[][..] } else { part_keys.row(i).data() };
            let p = *index.entry(key).or_insert_with(|| {
                partitions.push((*group, key, Vec::new()));
                partitions.len() - 1
            });
            partitions[p].2.push(i);
        }

        if self.keeps_top_rows_only() {
            return self.keep_top(&chunk, &rows, &order_keys, &partitions, out);
        }
        let mut changes: Changes = Vec::new();
        let mut writes: Vec<(u16, Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        let mut top_writes: Vec<(u16, &[u8], Vec<u8>)> = Vec::new();
        let order_bytes = |key: &[u8]| key.len().saturating_sub(8);
        // Over an append-only input, every partition's top rows with one multi-get; over an
        // updating input, every partition's rows with one iterator.
        let keys: Vec<(u16, &[u8])> = partitions.iter().map(|(g, k, _)| (*g, *k)).collect();
        let mut stored_all: Vec<Ranked> = if self.spec.retracting_input {
            self.tables.entries_many(self.ranked, &keys)?
        } else {
            let tops = self.tables.get_many(self.tops, &keys)?;
            tops.into_iter()
                .map(|t| t.map(|t| decode_top(&t)).transpose().map(Option::unwrap_or_default))
                .collect::<Result<_>>()?
        };
        let mut written: Vec<(u16, &[u8])> = Vec::new();
        for (p, (group, key, members)) in partitions.iter().enumerate() {
            let writes_before = writes.len() + top_writes.len();
            let stored = std::mem::take(&mut stored_all[p]);
            let lens: Vec<usize> = stored.iter().map(|(k, _)| order_bytes(k)).collect();
            let before_ranks = self.ranks(&stored, &lens);
            let before: Vec<(u64, Vec<u8>, Vec<u8>)> =
                before_ranks.iter().zip(&stored).map(|(r, (k, v))| (*r, k.clone(), v.clone())).collect();
            let mut current = stored;
            let mut added = interner::<Vec<u8>, bool>();
            let mut removed: Vec<Vec<u8>> = Vec::new();
            for &i in members {
                let row = rows.row(i).data();
                if ops[i].sign() > 0 {
                    let sort = self.sort_key(order_keys.row(i).data());
                    let at = current.partition_point(|(k, _)| k.as_slice() <= sort.as_slice());
                    current.insert(at, (sort.clone(), row.to_vec()));
                    added.insert(sort, true);
                } else {
                    let order = order_keys.row(i).data();
                    // Rows are in order: search only those whose order is the retracted row's.
                    let from = current.partition_point(|(k, _)| &k[..order_bytes(k)] < order);
                    let found = current[from..]
                        .iter()
                        .take_while(|(k, _)| &k[..order_bytes(k)] == order)
                        .position(|(_, v)| v == row)
                        .map(|at| from + at);
                    match found {
                        Some(at) => {
                            let (k, _) = current.remove(at);
                            if added.remove(&k).is_none() {
                                removed.push(k);
                            }
                        }
                        None => self.unmatched += 1,
                    }
                }
            }
            let lens: Vec<usize> = current.iter().map(|(k, _)| order_bytes(k)).collect();
            let after_ranks = self.ranks(&current, &lens);
            if !self.spec.retracting_input {
                // A row past `hi` never ranks again: forget it.
                if current[..after_ranks.len()].iter().any(|(k, _)| added.contains_key(k)) {
                    top_writes.push((*group, *key, encode_top(&current[..after_ranks.len()])));
                }
                removed.clear();
            }
            let kept = if self.spec.retracting_input { current.len() } else { 0 };
            for (k, v) in &current[..kept] {
                if added.contains_key(k) {
                    writes.push((*group, StateTables::entry_key(key, k), Some(v.clone())));
                }
            }
            if self.spec.retracting_input {
                for (k, _) in &current[kept..] {
                    if !added.contains_key(k) {
                        removed.push(k.clone());
                    }
                }
            }
            for k in removed {
                writes.push((*group, StateTables::entry_key(key, &k), None));
            }
            if writes.len() + top_writes.len() > writes_before {
                written.push((*group, *key));
            }

            // Ranks lo..=hi before and after: what changed, paired by rank.
            let in_range = |r: u64| r >= self.spec.lo && r <= self.spec.hi;
            let after: Vec<(u64, &Vec<u8>, &Vec<u8>)> =
                after_ranks.iter().zip(&current).map(|(r, (k, v))| (*r, k, v)).filter(|x| in_range(x.0)).collect();
            let before: Vec<&(u64, Vec<u8>, Vec<u8>)> = before.iter().filter(|x| in_range(x.0)).collect();
            let same = |a: &(u64, Vec<u8>, Vec<u8>), b: &(u64, &Vec<u8>, &Vec<u8>)| a.0 == b.0 && &a.1 == b.1;
            let gone: Vec<&&(u64, Vec<u8>, Vec<u8>)> =
                before.iter().filter(|b| !after.iter().any(|a| same(b, a))).collect();
            let mut new: Vec<&(u64, &Vec<u8>, &Vec<u8>)> =
                after.iter().filter(|a| !before.iter().any(|b| same(b, a))).collect();
            let mut deleted = Vec::new();
            for g in gone {
                match new.iter().position(|a| a.0 == g.0) {
                    Some(p) => {
                        let a = new.remove(p);
                        changes.push((g.2.clone(), g.0, Op::UpdateBefore));
                        changes.push((a.2.clone(), a.0, Op::UpdateAfter));
                    }
                    None => deleted.push((g.2.clone(), g.0, Op::Delete)),
                }
            }
            changes.extend(deleted);
            changes.extend(new.into_iter().map(|a| (a.2.clone(), a.0, Op::Insert)));
        }
        let changes_ref: Vec<Change<'_>> = writes.iter().map(|(g, k, v)| (*g, k.as_slice(), v.as_deref())).collect();
        self.tables.write(self.ranked, &changes_ref)?;
        let top_changes: Vec<Change<'_>> = top_writes.iter().map(|(g, k, v)| (*g, *k, Some(v.as_slice()))).collect();
        self.tables.write(self.tops, &top_changes)?;
        self.stamp(&written)?;
        self.emit(&changes, out)
    }

    /// With a TTL, partitions not written for that long are forgotten first (nothing is
    /// emitted: a later row of one starts it again, as in Flink). Nothing waits for the
    /// watermark otherwise: the end of the input fires nothing.
    fn fire(&mut self, watermark: Watermark, _out: &mut Vec<Message>) -> Result<()> {
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

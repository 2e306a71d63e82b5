//! Joins against a table as of a time: `JOIN t FOR SYSTEM_TIME AS OF s.ts`. The table is
//! always the right input.
//!
//! - [`LookupJoin`] (`s.ts` is processing time, `t` bounded: a file, as Nexmark q13's side
//!   input). The table is loaded once into a state table (a multiset per join key); rows of
//!   the stream that arrive before it is loaded wait in state, and are joined when its input
//!   ends. After that each chunk is joined as it comes, each distinct key looked up once.
//!   Append-only: what a row joined never changes.
//! - [`VersionedJoin`] (`s.ts` is event time, `t` a versioned table: a `PRIMARY KEY` and a
//!   watermark, as Flink's event-time temporal join). Each version of a key is kept under its
//!   time; each stream row waits until the watermark passes its time and then joins the
//!   version valid then (the latest at or before it), so the result does not depend on which
//!   input ran ahead. A stream row already behind the watermark is late: dropped and counted.
//!   Versions older than the one valid at the watermark are dropped once a row of their key
//!   has been joined. Append-only.
//! - [`TableLookupJoin`] (`s.ts` is processing time, `t` a database table): each chunk's
//!   distinct keys are asked of the table (a [`Lookup`], which may cache) and joined as they
//!   come. No state: what a row joined is what the table held when it was looked up.

use datafusion::arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use datafusion::arrow::record_batch::RecordBatchOptions;
use datafusion::arrow::row::RowConverter;
use weir_core::{Chunk, Lookup, Message, Operator, Result, Watermark, WeirError};
use weir_state::tables::Change;
use weir_state::{StateTables, Table, TableDecl, TableKind};

use super::join::{assemble, pair_condition, JoinKind, JoinSpec};
use super::keyed::KeyedLogic;
use super::state::{from_ordered, interner, ordered, Progress, StateContext};
use super::window::millis;

/// Each row's key bytes (`None`: a NULL key) and each row's key group.
type KeysOf = (Vec<Option<Vec<u8>>>, Vec<u16>);
/// A stored count (`None`: the entry goes).
type Count = Option<[u8; 8]>;
/// A key's versions: time, and the row (`None`: deleted then).
type Versions = Vec<(i64, Option<Vec<u8>>)>;

/// What both kinds share: the spec, row converters, and joining stream rows against rows
/// of the table found per key.
struct Joiner {
    spec: JoinSpec,
    keys: RowConverter,
    rows: [RowConverter; 2],
}

impl Joiner {
    fn new(spec: JoinSpec) -> Result<Self> {
        if !matches!(spec.kind, JoinKind::Inner | JoinKind::Left) {
            return Err(WeirError::not_supported(format!(
                "{:?} joins against a table FOR SYSTEM_TIME AS OF (inner and left joins only)",
                spec.kind
            )));
        }
        let (keys, rows) = spec.converters()?;
        Ok(Self { keys, rows, spec })
    }

    /// Each row's key bytes (`None`: a NULL key, which matches nothing) and key group.
    fn keys_of(&self, batch: &RecordBatch, side: usize, groups: weir_state::KeyGroups) -> Result<KeysOf> {
        let columns: Vec<ArrayRef> = self.spec.keys[side].iter().map(|k| batch.column(*k).clone()).collect();
        let rows = self.keys.convert_columns(&columns)?;
        let mut valid = vec![true; batch.num_rows()];
        for c in &columns {
            if let Some(nulls) = c.logical_nulls() {
                valid.iter_mut().zip(nulls.iter()).for_each(|(v, ok)| *v &= ok);
            }
        }
        let keys = (0..batch.num_rows()).map(|i| valid[i].then(|| rows.row(i).data().to_vec())).collect();
        let groups = crate::exchange::key_groups_of_columns(&columns, batch.num_rows(), groups)?;
        Ok((keys, groups))
    }

    fn decode(&self, side: usize, values: &[Vec<u8>]) -> Result<RecordBatch> {
        let parser = self.rows[side].parser();
        let columns = self.rows[side].convert_rows(values.iter().map(|v| parser.parse(v)))?;
        let options = RecordBatchOptions::new().with_row_count(Some(values.len()));
        Ok(RecordBatch::try_new_with_options(self.spec.schemas[side].clone(), columns, &options)?)
    }

    /// Join `stream` rows with their candidates: `candidates[i]` lists rows of `table`
    /// (with copies) for stream row `i`. Inner: the pairs the condition keeps; left: a row
    /// with none padded.
    fn join(&self, stream: &RecordBatch, table: &RecordBatch, candidates: &[Vec<(u32, u64)>]) -> Result<Option<Chunk>> {
        let (mut li, mut ri, mut copies) = (Vec::new(), Vec::new(), Vec::new());
        for (i, c) in candidates.iter().enumerate() {
            for (j, n) in c {
                li.push(i as u32);
                ri.push(*j);
                copies.push(*n);
            }
        }
        let holds =
            pair_condition(&self.spec, stream, &UInt32Array::from(li.clone()), table, &UInt32Array::from(ri.clone()))?;
        let mut matched = vec![false; stream.num_rows()];
        let (mut out_l, mut out_r): (Vec<Option<u32>>, Vec<Option<u32>>) = (Vec::new(), Vec::new());
        for k in 0..li.len() {
            if holds[k] {
                matched[li[k] as usize] = true;
                for _ in 0..copies[k] {
                    out_l.push(Some(li[k]));
                    out_r.push(Some(ri[k]));
                }
            }
        }
        if self.spec.kind == JoinKind::Left {
            for (i, m) in matched.iter().enumerate() {
                if !m {
                    out_l.push(Some(i as u32));
                    out_r.push(None);
                }
            }
        }
        if out_l.is_empty() {
            return Ok(None);
        }
        let batch = assemble(&self.spec.schema, stream, &UInt32Array::from(out_l), table, &UInt32Array::from(out_r))?;
        Ok(Some(Chunk::inserts(batch)))
    }
}

const LOOKUP_TABLES: [TableDecl; 2] =
    [TableDecl { name: "table", kind: TableKind::Sorted }, TableDecl { name: "waiting", kind: TableKind::Value }];

pub struct LookupJoin {
    joiner: Joiner,
    tables: StateTables,
    table: Table,
    waiting: Table,
    /// The table's input has ended: stream rows join as they come.
    loaded: bool,
    /// The arrival numbers of rows waiting for the table.
    progress: Progress,
}

impl LookupJoin {
    pub fn new(spec: JoinSpec, state: &StateContext) -> Result<Self> {
        let tables = state.open(&LOOKUP_TABLES)?;
        Ok(Self {
            joiner: Joiner::new(spec)?,
            table: tables.table("table")?,
            waiting: tables.table("waiting")?,
            tables,
            loaded: false,
            progress: Progress::default(),
        })
    }

    fn load(&mut self, batch: &RecordBatch, ops: &[weir_core::Op]) -> Result<()> {
        let (keys, groups) = self.joiner.keys_of(batch, 1, self.tables.key_groups())?;
        let rows = self.joiner.rows[1].convert_columns(batch.columns())?;
        let entry_keys: Vec<Option<Vec<u8>>> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| k.as_ref().map(|k| StateTables::entry_key(k, rows.row(i).data())))
            .collect();
        let lookups: Vec<(u16, &[u8])> =
            entry_keys.iter().enumerate().filter_map(|(i, k)| k.as_deref().map(|k| (groups[i], k))).collect();
        let found = self.tables.get_many(self.table, &lookups)?;
        let mut counts = interner::<&[u8], (u16, i64)>();
        for ((g, k), v) in lookups.iter().zip(found) {
            let n = v.and_then(|v| v.try_into().ok().map(i64::from_le_bytes)).unwrap_or(0);
            counts.entry(*k).or_insert((*g, n));
        }
        for (i, k) in entry_keys.iter().enumerate() {
            if let Some(k) = k {
                if let Some(c) = counts.get_mut(k.as_slice()) {
                    c.1 = (c.1 + ops[i].sign()).max(0);
                }
            }
        }
        let encoded: Vec<(u16, &[u8], Count)> =
            counts.iter().map(|(k, (g, n))| (*g, *k, (*n > 0).then(|| n.to_le_bytes()))).collect();
        let changes: Vec<Change<'_>> = encoded.iter().map(|(g, k, v)| (*g, *k, v.as_ref().map(|v| &v[..]))).collect();
        self.tables.write(self.table, &changes)
    }

    /// Join stream rows against the loaded table.
    fn probe(&self, batch: &RecordBatch) -> Result<Option<Chunk>> {
        let (keys, groups) = self.joiner.keys_of(batch, 0, self.tables.key_groups())?;
        let mut index = interner::<&[u8], usize>();
        let mut distinct: Vec<(u16, &[u8])> = Vec::new();
        let key_of: Vec<Option<usize>> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                k.as_deref().map(|k| {
                    *index.entry(k).or_insert_with(|| {
                        distinct.push((groups[i], k));
                        distinct.len() - 1
                    })
                })
            })
            .collect();
        let (mut rows, mut found) = (Vec::new(), Vec::with_capacity(distinct.len()));
        for entries in self.tables.entries_many(self.table, &distinct)? {
            let mut of_key = Vec::new();
            for (row, count) in entries {
                let n = count
                    .try_into()
                    .map(u64::from_le_bytes)
                    .map_err(|_| WeirError::internal("lookup state is damaged"))?;
                of_key.push((rows.len() as u32, n));
                rows.push(row);
            }
            found.push(of_key);
        }
        let table = self.joiner.decode(1, &rows)?;
        let candidates: Vec<Vec<(u32, u64)>> =
            key_of.iter().map(|k| k.map(|k| found[k].clone()).unwrap_or_default()).collect();
        self.joiner.join(batch, &table, &candidates)
    }

    /// The table is loaded: join the rows that waited for it.
    fn release(&mut self, out: &mut Vec<Message>) -> Result<()> {
        if self.loaded {
            return Ok(());
        }
        self.loaded = true;
        let mut waiting = Vec::new();
        for group in self.tables.owned() {
            let entries = self.tables.scan(self.waiting, group, &[], None)?;
            if !entries.is_empty() {
                self.tables.delete_range(self.waiting, group, &[], None)?;
            }
            waiting.extend(entries);
        }
        // In arrival order.
        waiting.sort();
        let rows: Vec<Vec<u8>> = waiting.into_iter().map(|(_, v)| v).collect();
        for part in rows.chunks(8192) {
            let batch = self.joiner.decode(0, part)?;
            if let Some(chunk) = self.probe(&batch)? {
                out.push(Message::Chunk(chunk));
            }
        }
        Ok(())
    }
}

impl KeyedLogic for LookupJoin {
    type Own = bool;

    fn name(&self) -> String {
        "LookupJoin".into()
    }

    fn process(&mut self, input: usize, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        match input {
            1 => self.load(&chunk.batch, &chunk.ops()),
            _ if !chunk.is_append_only() => {
                Err(WeirError::not_supported("a lookup join of an updating stream (it looks rows up as they come)"))
            }
            _ if self.loaded => {
                if let Some(c) = self.probe(&chunk.batch)? {
                    out.push(Message::Chunk(c));
                }
                Ok(())
            }
            _ => {
                let (_, groups) = self.joiner.keys_of(&chunk.batch, 0, self.tables.key_groups())?;
                let rows = self.joiner.rows[0].convert_columns(chunk.batch.columns())?;
                let keys: Vec<[u8; 8]> = (0..chunk.num_rows())
                    .map(|_| {
                        self.progress.next_seq += 1;
                        self.progress.next_seq.to_be_bytes()
                    })
                    .collect();
                let changes: Vec<Change<'_>> =
                    (0..chunk.num_rows()).map(|i| (groups[i], &keys[i][..], Some(rows.row(i).data()))).collect();
                self.tables.write(self.waiting, &changes)
            }
        }
    }

    fn input_ended(&mut self, input: usize, out: &mut Vec<Message>) -> Result<()> {
        if input == 1 {
            self.release(out)?;
        }
        Ok(())
    }

    /// The end of the input: rows that waited for a table that never ended join now.
    fn fire(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        match watermark == Watermark::END_OF_TIME {
            true => self.release(out),
            false => Ok(()),
        }
    }

    fn state(&mut self) -> (&mut StateTables, &mut Progress) {
        (&mut self.tables, &mut self.progress)
    }

    fn progress(&self) -> &Progress {
        &self.progress
    }

    /// Whether the table was loaded: every task of a stage sees its table's input end at the
    /// same point of the stream.
    fn own(&self) -> bool {
        self.loaded
    }

    /// Loaded if every restored task had loaded its table.
    fn restore_own(&mut self, loaded: Vec<bool>) -> Result<()> {
        self.loaded = !loaded.is_empty() && loaded.iter().all(|l| *l);
        Ok(())
    }
}

const VERSIONED_TABLES: [TableDecl; 2] =
    [TableDecl { name: "versions", kind: TableKind::Sorted }, TableDecl { name: "waiting", kind: TableKind::Timed }];

pub struct VersionedJoin {
    joiner: Joiner,
    /// The time column of each input.
    times: [usize; 2],
    tables: StateTables,
    versions: Table,
    waiting: Table,
    progress: Progress,
}

impl VersionedJoin {
    pub fn new(spec: JoinSpec, times: [usize; 2], state: &StateContext) -> Result<Self> {
        let tables = state.open(&VERSIONED_TABLES)?;
        Ok(Self {
            joiner: Joiner::new(spec)?,
            times,
            versions: tables.table("versions")?,
            waiting: tables.table("waiting")?,
            tables,
            progress: Progress::default(),
        })
    }

    /// A new version per row of the table (a deletion is a version without a row).
    fn add_versions(&mut self, chunk: &Chunk) -> Result<()> {
        let (keys, groups) = self.joiner.keys_of(&chunk.batch, 1, self.tables.key_groups())?;
        let times: Vec<Option<i64>> = millis(chunk.batch.column(self.times[1]))?.iter().collect();
        let rows = self.joiner.rows[1].convert_columns(chunk.batch.columns())?;
        let ops = chunk.ops();
        let mut writes = Vec::new();
        for i in 0..chunk.num_rows() {
            let (Some(key), Some(time)) = (&keys[i], times[i]) else { continue };
            let value = match ops[i] {
                weir_core::Op::Insert | weir_core::Op::UpdateAfter => [&[1u8][..], rows.row(i).data()].concat(),
                weir_core::Op::Delete => vec![0u8],
                // The row that replaces it comes as the pair's +U.
                weir_core::Op::UpdateBefore => continue,
            };
            writes.push((groups[i], StateTables::entry_key(key, &ordered(time)), value));
        }
        let changes: Vec<Change<'_>> = writes.iter().map(|(g, k, v)| (*g, k.as_slice(), Some(v.as_slice()))).collect();
        self.tables.write(self.versions, &changes)
    }

    /// Stream rows wait for the watermark to pass their time; rows behind it are late.
    fn add_waiting(&mut self, chunk: &Chunk) -> Result<()> {
        if !chunk.is_append_only() {
            return Err(WeirError::not_supported("an event-time temporal join of an updating stream"));
        }
        let (_, groups) = self.joiner.keys_of(&chunk.batch, 0, self.tables.key_groups())?;
        let times: Vec<Option<i64>> = millis(chunk.batch.column(self.times[0]))?.iter().collect();
        let rows = self.joiner.rows[0].convert_columns(chunk.batch.columns())?;
        let mut keys = Vec::new();
        for (i, time) in times.iter().enumerate() {
            match time {
                Some(t) if *t > self.progress.watermark.0 => {
                    keys.push((i, [&ordered(*t)[..], &self.progress.next_seq.to_be_bytes()].concat()));
                    self.progress.next_seq += 1;
                }
                _ => self.progress.late += 1,
            }
        }
        let changes: Vec<Change<'_>> =
            keys.iter().map(|(i, k)| (groups[*i], k.as_slice(), Some(rows.row(*i).data()))).collect();
        self.tables.write(self.waiting, &changes)
    }

    /// Join every waiting row with a time at or before `watermark`, oldest first.
    fn release(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        let to = ordered(watermark.0.saturating_add(1));
        let due = self.tables.scan_times(self.waiting, &ordered(i64::MIN), &to)?;
        if due.is_empty() {
            return Ok(());
        }
        self.tables.delete_times(self.waiting, &ordered(i64::MIN), &to)?;
        let rows: Vec<Vec<u8>> = due.iter().map(|(_, _, v)| v.clone()).collect();
        let stream = self.joiner.decode(0, &rows)?;
        let (keys, groups) = self.joiner.keys_of(&stream, 0, self.tables.key_groups())?;
        let times: Vec<Option<i64>> = millis(stream.column(self.times[0]))?.iter().collect();
        // Each key's versions, read once.
        let mut index = interner::<Vec<u8>, usize>();
        let mut versions: Vec<(u16, Vec<u8>, Versions)> = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let Some(key) = key else { continue };
            if index.contains_key(key) {
                continue;
            }
            let mut of_key = Vec::new();
            for (time, value) in self.tables.entries(self.versions, groups[i], key)? {
                let time =
                    time.try_into().map(from_ordered).map_err(|_| WeirError::internal("version state is damaged"))?;
                of_key.push((time, (value.first() == Some(&1)).then(|| value[1..].to_vec())));
            }
            index.insert(key.clone(), versions.len());
            versions.push((groups[i], key.clone(), of_key));
        }
        // The version valid at each row's time.
        let mut table_rows = Vec::new();
        let mut candidates = Vec::with_capacity(stream.num_rows());
        for (i, key) in keys.iter().enumerate() {
            let valid = key.as_ref().and_then(|k| {
                let (_, _, of_key) = &versions[index[k]];
                let t = times[i]?;
                let at = of_key.partition_point(|(vt, _)| *vt <= t);
                at.checked_sub(1).and_then(|at| of_key[at].1.clone())
            });
            candidates.push(match valid {
                Some(row) => {
                    table_rows.push(row);
                    vec![(table_rows.len() as u32 - 1, 1)]
                }
                None => Vec::new(),
            });
        }
        let table = self.joiner.decode(1, &table_rows)?;
        if let Some(chunk) = self.joiner.join(&stream, &table, &candidates)? {
            out.push(Message::Chunk(chunk));
        }
        // Versions older than the one valid at the watermark serve no row to come.
        let mut gone = Vec::new();
        for (group, key, of_key) in &versions {
            let valid = of_key.partition_point(|(vt, _)| *vt <= watermark.0);
            for (time, _) in of_key.iter().take(valid.saturating_sub(1)) {
                gone.push((*group, StateTables::entry_key(key, &ordered(*time))));
            }
        }
        let changes: Vec<Change<'_>> = gone.iter().map(|(g, k)| (*g, k.as_slice(), None)).collect();
        self.tables.write(self.versions, &changes)
    }
}

impl KeyedLogic for VersionedJoin {
    type Own = ();

    fn name(&self) -> String {
        "VersionedJoin".into()
    }

    fn process(&mut self, input: usize, chunk: Chunk, _out: &mut Vec<Message>) -> Result<()> {
        match input {
            1 => self.add_versions(&chunk),
            _ => self.add_waiting(&chunk),
        }
    }

    fn fire(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        self.release(watermark, out)
    }

    fn state(&mut self) -> (&mut StateTables, &mut Progress) {
        (&mut self.tables, &mut self.progress)
    }

    fn progress(&self) -> &Progress {
        &self.progress
    }
}

/// A lookup join that asks a table (a database's) for each chunk's keys.
pub struct TableLookupJoin {
    joiner: Joiner,
    lookup: Box<dyn Lookup>,
}

impl TableLookupJoin {
    pub fn new(spec: JoinSpec, lookup: Box<dyn Lookup>) -> Result<Self> {
        Ok(Self { joiner: Joiner::new(spec)?, lookup })
    }
}

impl Operator for TableLookupJoin {
    fn name(&self) -> String {
        "TableLookupJoin".into()
    }

    fn process_chunk(&mut self, chunk: Chunk, out: &mut Vec<Message>) -> Result<()> {
        if !chunk.is_append_only() {
            return Err(WeirError::not_supported(
                "a lookup join of an updating stream (it looks rows up as they come)",
            ));
        }
        let batch = &chunk.batch;
        let columns: Vec<ArrayRef> = self.joiner.spec.keys[0].iter().map(|k| batch.column(*k).clone()).collect();
        let rows = self.joiner.keys.convert_columns(&columns)?;
        let mut valid = vec![true; batch.num_rows()];
        for c in &columns {
            if let Some(nulls) = c.logical_nulls() {
                valid.iter_mut().zip(nulls.iter()).for_each(|(v, ok)| *v &= ok);
            }
        }
        let mut index = interner::<&[u8], u32>();
        let mut firsts: Vec<u32> = Vec::new();
        let key_of: Vec<Option<u32>> = (0..batch.num_rows())
            .map(|i| {
                valid[i].then(|| {
                    *index.entry(rows.row(i).data()).or_insert_with(|| {
                        firsts.push(i as u32);
                        firsts.len() as u32 - 1
                    })
                })
            })
            .collect();
        let take = UInt32Array::from(firsts);
        let key_columns: Vec<ArrayRef> = columns
            .iter()
            .map(|c| datafusion::arrow::compute::take(c.as_ref(), &take, None))
            .collect::<std::result::Result<_, _>>()?;
        let key_fields: Vec<_> =
            self.joiner.spec.keys[1].iter().map(|k| self.joiner.spec.schemas[1].field(*k).clone()).collect();
        let key_schema = std::sync::Arc::new(datafusion::arrow::datatypes::Schema::new(key_fields));
        let options = RecordBatchOptions::new().with_row_count(Some(take.len()));
        let keys = RecordBatch::try_new_with_options(key_schema, key_columns, &options)?;
        let (table, owners) = if keys.num_rows() == 0 {
            (RecordBatch::new_empty(self.joiner.spec.schemas[1].clone()), Vec::new())
        } else {
            self.lookup.lookup(&keys)?
        };
        let mut of_key: Vec<Vec<(u32, u64)>> = vec![Vec::new(); keys.num_rows()];
        for (row, owner) in owners.iter().enumerate() {
            if let Some(o) = of_key.get_mut(*owner as usize) {
                o.push((row as u32, 1));
            }
        }
        let candidates: Vec<Vec<(u32, u64)>> =
            key_of.iter().map(|k| k.map(|k| of_key[k as usize].clone()).unwrap_or_default()).collect();
        if let Some(c) = self.joiner.join(batch, &table, &candidates)? {
            out.push(Message::Chunk(c));
        }
        Ok(())
    }
}

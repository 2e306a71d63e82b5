//! Session windows (`SESSION(TABLE t PARTITION BY k, DESCRIPTOR(ts), gap)`) aggregated per
//! key.
//!
//! Window assignment gives each row the window `[ts, ts + gap)`. Here, a whole batch at a
//! time: the batch's rows are grouped by key; each key's stored sessions are read once; rows
//! and stored sessions are merged where they overlap or touch (as Flink does); every
//! resulting session's accumulator state is computed with one vectorized update and one
//! merge over the batch; each touched key is written back once. A session is emitted when
//! the watermark passes its end (last event + gap), found through a timer index ordered by
//! end. State lives in state tables (memory or RocksDB, `state.backend`), each key under the
//! key group the exchange routed it by, so that a checkpoint restores at another parallelism.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, TimestampMillisecondArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::record_batch::RecordBatchOptions;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::logical_expr::EmitTo;
use weir_core::{Chunk, Message, Result, Watermark, WeirError};
use weir_state::tables::Change;
use weir_state::{StateTables, Table, TableDecl, TableKind};

use super::keyed::KeyedLogic;
use super::state::{ordered, Progress, StateContext};
use super::window::{millis, Evaluated, WindowSpec};

/// A session window aggregate as planned.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    /// Group expressions include `window_start` and `window_end` (`spec.window_end`).
    pub spec: WindowSpec,
    /// Which group expression is `window_start`, and `window_time` if grouped by.
    pub window_start: usize,
    pub window_time: Option<usize>,
    pub gap: i64,
}

impl SessionSpec {
    /// Group expressions that are keys, not window bounds.
    pub(crate) fn key_positions(&self) -> Vec<usize> {
        (0..self.spec.group_exprs.len())
            .filter(|p| *p != self.window_start && *p != self.spec.window_end && Some(*p) != self.window_time)
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Session {
    start: i64,
    end: i64,
    /// Accumulator states in Arrow's row format.
    state: Vec<u8>,
}

fn encode(sessions: &[Session]) -> Vec<u8> {
    let mut out = Vec::with_capacity(sessions.iter().map(|s| 20 + s.state.len()).sum());
    for s in sessions {
        out.extend_from_slice(&s.start.to_le_bytes());
        out.extend_from_slice(&s.end.to_le_bytes());
        out.extend_from_slice(&(s.state.len() as u32).to_le_bytes());
        out.extend_from_slice(&s.state);
    }
    out
}

fn damaged() -> WeirError {
    WeirError::internal("session window state is damaged")
}

fn read<const N: usize>(bytes: &[u8], at: &mut usize) -> Result<[u8; N]> {
    let b = bytes.get(*at..*at + N).ok_or_else(damaged)?;
    *at += N;
    b.try_into().map_err(|_| damaged())
}

fn read_bytes<'a>(bytes: &'a [u8], at: &mut usize) -> Result<&'a [u8]> {
    let len = u32::from_le_bytes(read::<4>(bytes, at)?) as usize;
    let b = bytes.get(*at..*at + len).ok_or_else(damaged)?;
    *at += len;
    Ok(b)
}

fn decode(bytes: &[u8]) -> Result<Vec<Session>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let start = i64::from_le_bytes(read::<8>(bytes, &mut at)?);
        let end = i64::from_le_bytes(read::<8>(bytes, &mut at)?);
        let state = read_bytes(bytes, &mut at)?.to_vec();
        out.push(Session { start, end, state });
    }
    Ok(out)
}

/// A key and its key group.
type Key = (u16, Vec<u8>);

/// `sessions`: key -> its encoded sessions. `timers`: ordered(end) ++ key -> nothing, to find
/// due sessions.
const TABLES: [TableDecl; 2] =
    [TableDecl { name: "sessions", kind: TableKind::Value }, TableDecl { name: "timers", kind: TableKind::Timed }];

/// Sessions by key, and timers (session end, key) to find due sessions.
struct Sessions {
    tables: StateTables,
    sessions: Table,
    timers: Table,
}

impl Sessions {
    fn load(&self, keys: &[Key]) -> Result<Vec<Vec<Session>>> {
        let lookups: Vec<(u16, &[u8])> = keys.iter().map(|(g, k)| (*g, k.as_slice())).collect();
        let stored = self.tables.get_many(self.sessions, &lookups)?;
        stored.into_iter().map(|v| v.map(|v| decode(&v)).unwrap_or(Ok(Vec::new()))).collect()
    }

    /// Replace each key's sessions `old` by `new`, timers included.
    fn store(&mut self, updates: Vec<(Key, Vec<Session>, Vec<Session>)>) -> Result<()> {
        let timer_key = |end: i64, key: &[u8]| [ordered(end).as_slice(), key].concat();
        let mut deletes = Vec::new();
        let mut puts = Vec::new();
        let mut values = Vec::with_capacity(updates.len());
        for ((g, key), old, new) in &updates {
            deletes.extend(old.iter().map(|s| (*g, timer_key(s.end, key))));
            puts.extend(new.iter().map(|s| (*g, timer_key(s.end, key))));
            values.push((!new.is_empty()).then(|| encode(new)));
        }
        // Deletes before puts: a session whose end did not change keeps its timer.
        let mut timer_changes: Vec<Change<'_>> = deletes.iter().map(|(g, k)| (*g, k.as_slice(), None)).collect();
        timer_changes.extend(puts.iter().map(|(g, k)| (*g, k.as_slice(), Some(&[][..]))));
        let session_changes: Vec<Change<'_>> =
            updates.iter().zip(&values).map(|(((g, k), _, _), v)| (*g, k.as_slice(), v.as_deref())).collect();
        self.tables.write(self.timers, &timer_changes)?;
        self.tables.write(self.sessions, &session_changes)
    }

    /// Keys with a session ending at or before `bound` (and after `fired`, the bound of the
    /// last fire: timers before it are deleted, and a scan from a group's start would step
    /// over every one of those deletes until RocksDB compacts them away).
    fn due(&self, fired: i64, bound: i64) -> Result<Vec<Key>> {
        let mut seen = std::collections::HashSet::new();
        let mut keys = Vec::new();
        let (from, to) = (ordered(fired.saturating_add(1)), ordered(bound.saturating_add(1)));
        for (g, k, _) in self.tables.scan_times(self.timers, &from, &to)? {
            let key = (g, k[8..].to_vec());
            if seen.insert(key.clone()) {
                keys.push(key);
            }
        }
        Ok(keys)
    }
}

pub struct SessionAggregate {
    spec: SessionSpec,
    key_positions: Vec<usize>,
    /// Key columns in Arrow's row format; `None` without PARTITION BY (one global key).
    keys: Option<RowConverter>,
    states: RowConverter,
    state_widths: Vec<usize>,
    sessions: Sessions,
    /// The watermark and the late count (sessions are found through timers, not open ends).
    progress: Progress,
    /// The bound of the last fire: no timer at or before it is left.
    fired_to: i64,
    late_rows: Vec<RecordBatch>,
}

/// Where a row or a stored session goes when a key's windows are merged.
#[derive(Clone, Copy)]
enum Item {
    Row(usize),
    Stored(usize),
}

impl SessionAggregate {
    /// Session state in the tables `state` opens.
    pub fn new(spec: SessionSpec, state: &StateContext) -> Result<Self> {
        let key_positions = spec.key_positions();
        let keys = if key_positions.is_empty() {
            None
        } else {
            let fields = key_positions
                .iter()
                .map(|p| SortField::new(spec.spec.group_schema.field(*p).data_type().clone()))
                .collect();
            Some(RowConverter::new(fields)?)
        };
        let mut state_fields = Vec::new();
        let mut state_widths = Vec::new();
        for agg in &spec.spec.aggregates {
            let fields = agg.state_fields()?;
            state_widths.push(fields.len());
            state_fields.extend(fields.iter().map(|f| SortField::new(f.data_type().clone())));
        }
        let tables = state.open(&TABLES)?;
        let sessions = Sessions { sessions: tables.table("sessions")?, timers: tables.table("timers")?, tables };
        Ok(Self {
            spec,
            key_positions,
            keys,
            states: RowConverter::new(state_fields)?,
            state_widths,
            sessions,
            progress: Progress::default(),
            fired_to: i64::MIN,
            late_rows: Vec::new(),
        })
    }

    fn split_states(&self, columns: Vec<ArrayRef>) -> Vec<Vec<ArrayRef>> {
        let mut it = columns.into_iter();
        self.state_widths.iter().map(|w| it.by_ref().take(*w).collect()).collect()
    }

    /// Accumulator state columns of stored sessions.
    fn state_columns(&self, states: &[&[u8]]) -> Result<Vec<Vec<ArrayRef>>> {
        if self.state_widths.is_empty() {
            return Ok(Vec::new());
        }
        let parser = self.states.parser();
        let columns = self.states.convert_rows(states.iter().map(|s| parser.parse(s)))?;
        Ok(self.split_states(columns))
    }

    fn add(&mut self, evaluated: Evaluated, batch: &RecordBatch) -> Result<()> {
        let Evaluated { keys: group_columns, args, filters, .. } = evaluated;
        let starts = millis(&group_columns[self.spec.window_start])?;
        let n = starts.len();
        // 1. The batch's rows by key, each key under the key group the exchange routed it by
        // (the hash of the same key columns; without keys, group 0).
        let mut distinct: Vec<Key> = Vec::new();
        let mut rows_of: Vec<Vec<usize>> = Vec::new();
        let key_columns: Vec<ArrayRef> = self.key_positions.iter().map(|p| group_columns[*p].clone()).collect();
        let groups = crate::exchange::key_groups_of_columns(&key_columns, n, self.sessions.tables.key_groups())?;
        match &self.keys {
            None => {
                distinct.push((0, Vec::new()));
                rows_of.push((0..n).collect());
            }
            Some(converter) => {
                let rows = converter.convert_columns(&key_columns)?;
                let mut index: HashMap<&[u8], usize> = HashMap::new();
                for (i, group) in groups.iter().enumerate() {
                    let k = rows.row(i).data();
                    let at = *index.entry(k).or_insert_with(|| {
                        distinct.push((*group, k.to_vec()));
                        rows_of.push(Vec::new());
                        distinct.len() - 1
                    });
                    rows_of[at].push(i);
                }
            }
        }
        // 2. Their stored sessions, in one read.
        let stored = self.sessions.load(&distinct)?;
        // 3. Merge rows and stored sessions into sessions, one group each.
        let mut row_group = vec![0usize; n];
        let mut stored_states: Vec<&[u8]> = Vec::new();
        let mut stored_group: Vec<usize> = Vec::new();
        let mut merged: Vec<(usize, i64, i64)> = Vec::new(); // (key, start, end) per group
        let mut items: Vec<(i64, i64, Item)> = Vec::new();
        for (k, rows) in rows_of.iter().enumerate() {
            items.clear();
            for (j, s) in stored[k].iter().enumerate() {
                items.push((s.start, s.end, Item::Stored(j)));
            }
            for &r in rows {
                let ts = starts.value(r);
                items.push((ts, ts.saturating_add(self.spec.gap), Item::Row(r)));
            }
            items.sort_unstable_by_key(|(s, e, _)| (*s, *e));
            let first_group = merged.len();
            for &(start, end, item) in items.iter() {
                let open = merged.len() > first_group;
                match merged.last_mut() {
                    Some((_, _, cur_end)) if open && start <= *cur_end => *cur_end = (*cur_end).max(end),
                    _ => merged.push((k, start, end)),
                }
                let g = merged.len() - 1;
                match item {
                    Item::Row(r) => row_group[r] = g,
                    Item::Stored(j) => {
                        stored_states.push(&stored[k][j].state);
                        stored_group.push(g);
                    }
                }
            }
        }
        let total = merged.len();
        let mut accs = self.spec.spec.accumulators()?;
        for ((acc, a), f) in accs.iter_mut().zip(&args).zip(&filters) {
            acc.update_batch(a, &row_group, f.as_ref(), total)?;
        }
        if !stored_states.is_empty() {
            for (acc, state) in accs.iter_mut().zip(self.state_columns(&stored_states)?) {
                acc.merge_batch(&state, &stored_group, total)?;
            }
        }
        let mut new_states = Vec::new();
        for acc in &mut accs {
            new_states.extend(acc.state(EmitTo::All)?);
        }
        // Without aggregates (GROUP BY only) there is no state: an empty value.
        let encoded = (!new_states.is_empty()).then(|| self.states.convert_columns(&new_states)).transpose()?;
        // 4. Each key's sessions written back once. A session already behind the watermark
        // holds late rows only (stored sessions behind it have fired): they are dropped.
        let bound = self.progress.watermark.0.saturating_add(1);
        let mut late_groups = vec![false; total];
        for (g, (_, _, end)) in merged.iter().enumerate() {
            late_groups[g] = *end <= bound;
        }
        if late_groups.iter().any(|l| *l) {
            let mask: datafusion::arrow::array::BooleanArray =
                row_group.iter().map(|g| Some(late_groups[*g])).collect();
            self.progress.late += mask.true_count() as u64;
            if let Some(output) = &self.spec.spec.late {
                self.late_rows.push(output.rows(batch, &mask)?);
            }
        }
        let mut per_key: Vec<Vec<Session>> = vec![Vec::new(); distinct.len()];
        for (g, (k, start, end)) in merged.iter().enumerate() {
            if late_groups[g] {
                continue;
            }
            per_key[*k].push(Session {
                start: *start,
                end: *end,
                state: encoded.as_ref().map_or(Vec::new(), |e| e.row(g).data().to_vec()),
            });
        }
        let updates = distinct.into_iter().zip(stored).zip(per_key).map(|((k, old), new)| (k, old, new)).collect();
        self.sessions.store(updates)
    }
}

impl KeyedLogic for SessionAggregate {
    type Own = ();

    fn name(&self) -> String {
        "SessionAggregate".into()
    }

    /// Like Flink, a row behind the watermark is late only if it does not merge into an
    /// open session: lateness is decided after merging, in [`SessionAggregate::add`].
    fn process(&mut self, _input: usize, chunk: Chunk, _out: &mut Vec<Message>) -> Result<()> {
        let (mut late, mut late_rows) = (0, Vec::new());
        match self.spec.spec.evaluate(&chunk, Watermark::MIN, &mut late, &mut late_rows)? {
            Some(evaluated) => self.add(evaluated, &chunk.batch),
            None => Ok(()),
        }
    }

    fn take_late_rows(&mut self) -> Vec<RecordBatch> {
        std::mem::take(&mut self.late_rows)
    }

    fn state(&mut self) -> (&mut weir_state::StateTables, &mut Progress) {
        (&mut self.sessions.tables, &mut self.progress)
    }

    fn progress(&self) -> &Progress {
        &self.progress
    }

    /// Emit every session that ends at or before `watermark` + 1 ms, by end then start.
    fn fire(&mut self, watermark: Watermark, out: &mut Vec<Message>) -> Result<()> {
        let bound = watermark.0.saturating_add(1);
        let keys = self.sessions.due(self.fired_to, bound)?;
        self.fired_to = self.fired_to.max(bound);
        if keys.is_empty() {
            return Ok(());
        }
        let stored = self.sessions.load(&keys)?;
        let mut due: Vec<(i64, i64, usize, &[u8])> = Vec::new(); // end, start, key, state
        let mut updates = Vec::with_capacity(keys.len());
        for (k, sessions) in stored.iter().enumerate() {
            let (fired, kept): (Vec<&Session>, Vec<&Session>) = sessions.iter().partition(|s| s.end <= bound);
            due.extend(fired.iter().map(|s| (s.end, s.start, k, s.state.as_slice())));
            updates.push((keys[k].clone(), sessions.clone(), kept.into_iter().cloned().collect()));
        }
        due.sort_unstable_by(|a, b| (a.0, a.1, &keys[a.2].1).cmp(&(b.0, b.1, &keys[b.2].1)));
        let m = due.len();
        let group_schema = &self.spec.spec.group_schema;
        let key_columns = match &self.keys {
            None => Vec::new(),
            Some(converter) => {
                let parser = converter.parser();
                converter.convert_rows(due.iter().map(|d| parser.parse(&keys[d.2].1)))?
            }
        };
        let timestamps = |values: Vec<i64>, p: usize| -> Result<ArrayRef> {
            let array: ArrayRef = Arc::new(TimestampMillisecondArray::from(values));
            Ok(cast(&array, group_schema.field(p).data_type())?)
        };
        let mut key_columns = key_columns.into_iter();
        let mut columns = Vec::with_capacity(self.spec.spec.schema.fields().len());
        for p in 0..group_schema.fields().len() {
            columns.push(if p == self.spec.window_start {
                timestamps(due.iter().map(|d| d.1).collect(), p)?
            } else if p == self.spec.spec.window_end {
                timestamps(due.iter().map(|d| d.0).collect(), p)?
            } else if Some(p) == self.spec.window_time {
                timestamps(due.iter().map(|d| d.0 - 1).collect(), p)?
            } else {
                key_columns.next().ok_or_else(|| WeirError::internal("session key column missing"))?
            });
        }
        let states: Vec<&[u8]> = due.iter().map(|d| d.3).collect();
        let all: Vec<usize> = (0..m).collect();
        let mut accs = self.spec.spec.accumulators()?;
        for (acc, state) in accs.iter_mut().zip(self.state_columns(&states)?) {
            acc.merge_batch(&state, &all, m)?;
            columns.push(acc.evaluate(EmitTo::All)?);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(m));
        let batch = RecordBatch::try_new_with_options(self.spec.spec.schema.clone(), columns, &options)?;
        drop(due);
        self.sessions.store(updates)?;
        if m > 0 {
            out.push(Message::Chunk(Chunk::inserts(batch)));
        }
        Ok(())
    }
}

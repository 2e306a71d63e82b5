//! Where an operator task's keyed state lives: chosen by the runtime (the job's state
//! backend, its key groups, the groups this task owns) and handed to the operator, which
//! declares its tables and opens them here.

use std::ops::Range;

use weir_core::Result;
use weir_state::{Backend, KeyGroups, StateTables, TableDecl};

#[derive(Debug, Clone)]
pub struct StateContext {
    pub backend: Backend,
    pub key_groups: KeyGroups,
    /// The key groups of the task.
    pub owned: Range<u16>,
}

impl StateContext {
    /// In memory, owning every key group: for tests and single-task use.
    pub fn memory() -> Self {
        let key_groups = KeyGroups::default();
        Self { backend: Backend::Memory, key_groups, owned: key_groups.range_of(0, 1) }
    }

    /// The operator's declared tables, empty.
    pub fn open(&self, decls: &[TableDecl]) -> Result<StateTables> {
        StateTables::open(decls, self.key_groups, self.owned.clone(), &self.backend)
    }
}

/// Interning keys of a chunk: a fast hasher (the keys are the chunk's, not an attacker's
/// choice of collisions against a long-lived table), seeded the same every time.
pub(crate) type Interner<K, V> = std::collections::HashMap<K, V, datafusion::common::hash_utils::RandomState>;

pub(crate) fn interner<K, V>() -> Interner<K, V> {
    Interner::with_hasher(datafusion::common::hash_utils::RandomState::with_seed(0x5745_4952))
}

/// Keys that sort like the numbers: an i64 as 8 big-endian bytes with the sign bit flipped.
pub(crate) fn ordered(n: i64) -> [u8; 8] {
    ((n as u64) ^ (1 << 63)).to_be_bytes()
}

/// The number [`ordered`] encoded.
pub(crate) fn from_ordered(bytes: [u8; 8]) -> i64 {
    (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64
}

/// Fired entries (key, value) by window end.
pub(crate) type Due = std::collections::BTreeMap<i64, Vec<(Vec<u8>, Vec<u8>)>>;

/// Take every entry of timed `table` whose window end is at or before `bound`, over every
/// key group: returned by window end, and deleted with one range delete. Read from the oldest
/// open window on, so that what earlier fires deleted is not stepped over.
pub(crate) fn take_due(
    tables: &mut StateTables,
    table: weir_state::Table,
    open: &std::collections::BTreeSet<i64>,
    bound: i64,
) -> Result<Due> {
    let mut due = Due::default();
    let Some(&first) = open.first() else { return Ok(due) };
    let (from, to) = (ordered(first), ordered(bound.saturating_add(1)));
    for (_, k, v) in tables.scan_times(table, &from, &to)? {
        let end = k.get(..8).and_then(|b| b.try_into().ok()).map(from_ordered);
        let end = end.ok_or_else(|| weir_core::WeirError::internal("a window state key is damaged"))?;
        due.entry(end).or_default().push((k, v));
    }
    tables.delete_times(table, &from, &to)?;
    Ok(due)
}

/// What the snapshots of a keyed operator's tasks say beside its tables (one snapshot, or
/// several at another parallelism): the watermark (the same in every task of a stage before
/// a barrier), the late rows (each counted by one task) and the next arrival number (above
/// every restored one, so that no two entries of a key meet).
#[derive(Debug)]
pub(crate) struct Clock {
    pub watermark: weir_core::Watermark,
    pub late: u64,
    pub next_seq: u64,
}

impl Clock {
    pub fn meta(&self) -> serde_json::Value {
        serde_json::json!({ "watermark": self.watermark.0, "late": self.late, "next_seq": self.next_seq })
    }

    pub fn restore(metas: &[weir_state::RestoredMeta], what: &str) -> Result<Self> {
        let damaged = || weir_core::WeirError::internal(format!("{what} state in a checkpoint is damaged"));
        let mut clock = Clock { watermark: weir_core::Watermark::MIN, late: 0, next_seq: 0 };
        for m in metas {
            let w = m.meta["watermark"].as_i64().ok_or_else(damaged)?;
            clock.watermark = clock.watermark.max(weir_core::Watermark(w));
            if m.primary {
                clock.late += m.meta["late"].as_u64().ok_or_else(damaged)?;
            }
            clock.next_seq = clock.next_seq.max(m.meta["next_seq"].as_u64().ok_or_else(damaged)?);
        }
        Ok(clock)
    }
}

/// What a window operator keeps beside its tables: the watermark, the late rows counted, the
/// window ends that have state.
#[derive(Debug)]
pub(crate) struct Progress {
    pub watermark: weir_core::Watermark,
    pub late: u64,
    pub open: std::collections::BTreeSet<i64>,
    /// Numbers rows kept by arrival (window joins, window Top-N).
    pub next_seq: u64,
}

impl Default for Progress {
    fn default() -> Self {
        Self { watermark: weir_core::Watermark::MIN, late: 0, open: Default::default(), next_seq: 0 }
    }
}

impl Progress {
    /// Window `end` has state.
    pub fn opened(&mut self, end: i64) {
        self.open.insert(end);
    }

    /// The windows up to `bound` have fired.
    pub fn fired(&mut self, bound: i64) {
        self.open = self.open.split_off(&bound.saturating_add(1));
    }

    pub fn meta(&self) -> serde_json::Value {
        serde_json::json!({
            "open": self.open.iter().collect::<Vec<_>>(),
            "watermark": self.watermark.0,
            "late": self.late,
            "next_seq": self.next_seq,
        })
    }

    /// From the snapshots of one or more tasks (another parallelism): the watermark is the
    /// same in all of them (every task of a stage sees the same watermarks before a
    /// barrier); the open windows are their union (a window without rows here costs
    /// nothing); each late count is kept by one task.
    pub fn restore(metas: &[weir_state::RestoredMeta]) -> Result<Self> {
        let damaged = || weir_core::WeirError::internal("window operator state in a checkpoint is damaged");
        let mut p = Progress::default();
        for m in metas {
            p.watermark = p.watermark.max(weir_core::Watermark(m.meta["watermark"].as_i64().ok_or_else(damaged)?));
            if m.primary {
                p.late += m.meta["late"].as_u64().ok_or_else(damaged)?;
            }
            p.open.extend(m.meta["open"].as_array().into_iter().flatten().filter_map(|v| v.as_i64()));
            // Arrival numbers go on above every restored one.
            p.next_seq = p.next_seq.max(m.meta["next_seq"].as_u64().unwrap_or(0));
        }
        Ok(p)
    }
}

/// A batch of rows kept in state as Arrow row bytes (by `converter`), with `extra` columns
/// after them (a rank), in `schema`: how every keyed operator emits what it kept.
pub(crate) fn rows_batch<'a>(
    converter: &datafusion::arrow::row::RowConverter,
    rows: impl ExactSizeIterator<Item = &'a [u8]>,
    extra: Vec<datafusion::arrow::array::ArrayRef>,
    schema: &datafusion::arrow::datatypes::SchemaRef,
) -> Result<datafusion::arrow::array::RecordBatch> {
    use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
    let count = rows.len();
    let parser = converter.parser();
    let mut columns = converter.convert_rows(rows.map(|r| parser.parse(r)))?;
    columns.extend(extra);
    let options = RecordBatchOptions::new().with_row_count(Some(count));
    Ok(RecordBatch::try_new_with_options(schema.clone(), columns, &options)?)
}

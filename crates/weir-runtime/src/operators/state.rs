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

/// What every keyed operator keeps beside its tables, the same way for all: the watermark,
/// the rows it found late, the next arrival number (rows kept by arrival: joins, Top-N,
/// window joins) and the windows that have state (window operators). Snapshot and restore
/// go through [`snapshot`] and [`restore`] alone, so that damaged state is one error
/// everywhere, never a silent default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Progress {
    pub watermark: weir_core::Watermark,
    pub late: u64,
    pub next_seq: u64,
    pub open: std::collections::BTreeSet<i64>,
}

impl Default for Progress {
    fn default() -> Self {
        Self { watermark: weir_core::Watermark::MIN, late: 0, next_seq: 0, open: Default::default() }
    }
}

/// The version of a keyed operator's snapshot: its metadata (progress and the operator's
/// own) and how its tables' values are encoded. A Weir reads every version up to its own and
/// refuses a newer one with both named.
/// - 1: the first.
/// - 2: a group aggregate's DISTINCT entries over an append-only input may be a bit per
///   aggregate (`group_aggregate.rs`, `push_flags`) rather than a count of eight bytes. A
///   Weir of version 1 would read those as no count, and count each value again: the version
///   makes it refuse instead. Version 1's counts still read back.
const META_VERSION: u32 = 2;

#[derive(serde::Serialize, serde::Deserialize)]
struct Meta<E> {
    version: u32,
    watermark: i64,
    late: u64,
    next_seq: u64,
    open: Vec<i64>,
    /// The operator's own fields (`()` for most).
    operator: E,
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
}

/// A keyed operator's snapshot: its tables, its progress and its own fields.
pub(crate) fn snapshot<E: serde::Serialize>(
    tables: &mut weir_state::StateTables,
    progress: &Progress,
    operator: E,
) -> Result<weir_core::OperatorSnapshot> {
    let meta = Meta {
        version: META_VERSION,
        watermark: progress.watermark.0,
        late: progress.late,
        next_seq: progress.next_seq,
        open: progress.open.iter().copied().collect(),
        operator,
    };
    let meta =
        serde_json::to_value(meta).map_err(|e| weir_core::WeirError::internal(format!("encoding state: {e}")))?;
    tables.snapshot(meta)
}

/// Restore a keyed operator from one snapshot or, at another parallelism, several: the
/// tables, then the progress, merged (the watermark is the same in every task of a stage
/// before a barrier; each late row was counted by one task, kept by the one new task that
/// takes its first key group; arrival numbers go on above every restored one; the open
/// windows are the union), and each snapshot's own fields for the operator to merge.
/// `operator` names it in the error for a damaged or foreign snapshot.
pub(crate) fn restore<E: serde::de::DeserializeOwned>(
    tables: &mut weir_state::StateTables,
    states: &[&[u8]],
    operator: &str,
) -> Result<(Progress, Vec<E>)> {
    let mut progress = Progress::default();
    let mut own = Vec::new();
    for m in tables.restore_from(states)? {
        let meta: Meta<E> = serde_json::from_value(m.meta).map_err(|e| {
            weir_core::WeirError::internal(format!("the state of {operator} in the checkpoint is damaged: {e}"))
        })?;
        if meta.version > META_VERSION {
            return Err(weir_core::WeirError::not_supported(format!(
                "the state of {operator} in the checkpoint has version {}; this Weir reads version {META_VERSION} and older",
                meta.version
            )));
        }
        progress.watermark = progress.watermark.max(weir_core::Watermark(meta.watermark));
        if m.primary {
            progress.late += meta.late;
        }
        progress.next_seq = progress.next_seq.max(meta.next_seq);
        progress.open.extend(meta.open);
        own.push(meta.operator);
    }
    Ok((progress, own))
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

#[cfg(test)]
mod tests {
    use weir_core::Watermark;
    use weir_state::{TableDecl, TableKind};

    use super::*;

    const DECLS: [TableDecl; 1] = [TableDecl { name: "t", kind: TableKind::Value }];

    #[test]
    fn progress_merges_over_tasks_and_damaged_state_names_the_operator() {
        let ctx = StateContext::memory();
        let mut tables = ctx.open(&DECLS).expect("tables");
        let a = Progress { watermark: Watermark(10), late: 3, next_seq: 7, open: [5, 9].into() };
        let b = Progress { watermark: Watermark(10), late: 2, next_seq: 11, open: [9, 12].into() };
        let sa = snapshot(&mut tables, &a, true).expect("snapshot").state;
        let sb = snapshot(&mut tables, &b, false).expect("snapshot").state;
        let (p, own) = restore::<bool>(&mut tables, &[&sa], "Op").expect("one snapshot");
        assert_eq!((p, own), (a.clone(), vec![true]));
        // Both snapshots cover every key group: the first is primary (its late rows count).
        let (p, own) = restore::<bool>(&mut tables, &[&sa, &sb], "Op").expect("two snapshots");
        assert_eq!(p.watermark, Watermark(10));
        assert_eq!(p.next_seq, 11, "arrival numbers go on above every restored one");
        assert_eq!(p.open, [5, 9, 12].into());
        assert_eq!(own.len(), 2);

        let damaged = tables.snapshot(serde_json::json!({ "watermark": "ten" })).expect("snapshot").state;
        let e = restore::<()>(&mut tables, &[&damaged], "GroupAggregate(k)").expect_err("damaged");
        assert!(e.to_string().contains("GroupAggregate(k)") && e.to_string().contains("damaged"), "{e}");
        let mut at = |version: u32| {
            let meta = serde_json::json!({ "version": version, "watermark": 0, "late": 0, "next_seq": 0, "open": [], "operator": null });
            tables.snapshot(meta).expect("snapshot").state
        };
        let (older, newer) = (at(1), at(META_VERSION + 1));
        restore::<()>(&mut tables, &[&older], "Op").expect("an older version restores");
        let e = restore::<()>(&mut tables, &[&newer], "Op").expect_err("a newer version");
        let (theirs, ours) = (format!("version {}", META_VERSION + 1), format!("version {META_VERSION}"));
        assert!(e.to_string().contains(&theirs) && e.to_string().contains(&ours), "{e}");
    }
}

//! State tables: the keyed state of one operator task, owned by the runtime, over memory or
//! RocksDB behind one interface, and partitioned into key groups so that a checkpoint
//! restores at another parallelism.
//!
//! An operator declares its tables by name ([`TableDecl`]); the runtime opens them
//! ([`StateTables::open`]), snapshots them at a barrier ([`StateTables::snapshot`]) and
//! restores them ([`StateTables::restore`]) from the snapshots of one or more tasks of an
//! earlier run. Two kinds of table:
//! - [`TableKind::Value`]: one value per key (a group aggregate's accumulators);
//! - [`TableKind::Sorted`]: per key, entries ordered by a sort key (a join side's rows as a
//!   multiset, a Top-N partition, MIN/MAX values under retraction), read with one prefix scan;
//! - [`TableKind::Timed`]: keys that start with a time (8 ordered bytes: a window end, a
//!   timer), read and dropped by time range across all key groups at once (a fired window is
//!   one scan and one range delete).
//!
//! Every key belongs to a key group ([`KeyGroups`]), given by the caller from the hash the
//! exchange routed the row by. Stored keys are `table (2 bytes) | key group (2 bytes) | key`,
//! so a key group of a table is one contiguous key range: a restore at another parallelism
//! takes whole ranges, and a store restored whole drops the ranges it no longer owns with one
//! range delete each. A timed table stores `table | time | key group | rest`: time ranges
//! are contiguous instead, and a restore at another parallelism filters it key by key.
//!
//! Keys and values are the operator's bytes (Arrow's row format, which sorts like the values);
//! the layer adds no encoding of its own beyond the prefix above.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use weir_core::{OperatorSnapshot, Result, WeirError};
use weir_storage::Storage;

use crate::pending::Pending;
use crate::StateStore;

/// Default `'pipeline.max-parallelism'`, as Flink's.
pub const DEFAULT_MAX_PARALLELISM: u16 = 128;

/// The version of a snapshot's encoding (its header, and the keys and values of every table
/// kind). Bumped with any change to them.
pub const SNAPSHOT_VERSION: u64 = 1;

/// The version of a RocksDB snapshot that is a log checkpoint (`log.rs`): the same encoding,
/// plus write logs to replay, which a reader of version 1 alone would not, and lose them.
/// A full checkpoint stays version 1, readable by Weir before log checkpoints.
pub const LOG_SNAPSHOT_VERSION: u64 = 2;

/// How keyed state is cut into key groups: a key's group is fixed by its hash and the maximum
/// parallelism, and task `i` of `p` owns a contiguous range of groups (Flink's assignment),
/// so a change of parallelism moves whole groups between tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyGroups {
    max: u16,
}

impl Default for KeyGroups {
    fn default() -> Self {
        Self { max: DEFAULT_MAX_PARALLELISM }
    }
}

impl KeyGroups {
    /// `max` key groups: the highest parallelism a job's checkpoints can be restored at.
    pub fn new(max: u16) -> Result<Self> {
        if max == 0 || max > 1 << 15 {
            return Err(WeirError::user(format!("'pipeline.max-parallelism' must be between 1 and 32768, not {max}")));
        }
        Ok(Self { max })
    }

    pub fn max(&self) -> u16 {
        self.max
    }

    /// The group of a key whose hash is `hash`.
    pub fn of_hash(&self, hash: u64) -> u16 {
        (hash % self.max as u64) as u16
    }

    /// The task of `parallelism` that owns `group`.
    pub fn task_of(&self, group: u16, parallelism: usize) -> usize {
        group as usize * parallelism / self.max as usize
    }

    /// The groups task `task` of `parallelism` owns: every group `task_of` gives it.
    pub fn range_of(&self, task: usize, parallelism: usize) -> Range<u16> {
        let max = self.max as usize;
        let start = (task * max).div_ceil(parallelism);
        let end = ((task + 1) * max).div_ceil(parallelism);
        start.min(max) as u16..end.min(max) as u16
    }

    /// A job may not run wider than its key groups.
    pub fn check_parallelism(&self, parallelism: usize) -> Result<()> {
        if parallelism > self.max as usize {
            return Err(WeirError::user(format!(
                "parallelism {parallelism} is above 'pipeline.max-parallelism' ({}): keyed state has only that many \
                 key groups to spread over tasks",
                self.max
            )));
        }
        Ok(())
    }
}

/// What an operator keeps per key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableKind {
    /// One value per key.
    Value,
    /// Per key, entries ordered by a sort key ([`StateTables::entry_key`]).
    Sorted,
    /// Keys start with 8 bytes of ordered time; read by time range over every key group
    /// ([`StateTables::scan_times`], [`StateTables::delete_times`]).
    Timed,
}

/// A table an operator declares: its name (checked on restore) and kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableDecl {
    pub name: &'static str,
    pub kind: TableKind,
}

/// A declared table, by its place in the declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Table(u16);

/// Where a task's tables live.
#[derive(Debug, Clone)]
pub enum Backend {
    Memory,
    /// A RocksDB store in `local` (scratch, rebuilt from checkpoints); checkpoints upload its
    /// SST files once to `shared`.
    RocksDb {
        local: PathBuf,
        shared: Arc<dyn Storage>,
    },
}

// One per operator task: the size of the larger variant does not matter.
#[allow(clippy::large_enum_variant)]
enum Inner {
    Memory(BTreeMap<Vec<u8>, Vec<u8>>),
    /// `pending`: writes not in the store yet ([`Pending`]); every read but a point lookup
    /// first moves them there ([`StateTables::drain`]).
    Rocks {
        store: StateStore,
        local: PathBuf,
        shared: Arc<dyn Storage>,
        pending: RefCell<Pending>,
    },
}

/// The state tables of one operator task.
pub struct StateTables {
    decls: Vec<TableDecl>,
    groups: KeyGroups,
    /// The key groups this task owns.
    owned: Range<u16>,
    backend: Backend,
    inner: Inner,
}

/// What an operator keeps beside its keyed tables (a watermark, a count), as one snapshot of
/// an earlier task gave it back on restore.
#[derive(Debug, Clone, PartialEq)]
pub struct RestoredMeta {
    pub meta: serde_json::Value,
    /// Whether this task takes the old task's first key group: exactly one new task does,
    /// so a count summed over tasks is restored once.
    pub primary: bool,
}

/// An entry of a timed table: its key group, key and value.
pub type TimedEntry = (u16, Vec<u8>, Vec<u8>);

/// A change to one key: a put or (`None`) a delete.
pub type Change<'a> = (u16, &'a [u8], Option<&'a [u8]>);

fn damaged(what: &str) -> WeirError {
    WeirError::internal(format!("state tables in a checkpoint are damaged ({what})"))
}

fn prefix(table: Table, group: u16) -> [u8; 4] {
    let [a, b] = table.0.to_be_bytes();
    let [c, d] = group.to_be_bytes();
    [a, b, c, d]
}

fn full_key(table: Table, group: u16, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + key.len());
    k.extend_from_slice(&prefix(table, group));
    k.extend_from_slice(key);
    k
}

/// The key group of a stored key, by its table's kind.
fn group_of_stored(decls: &[TableDecl], key: &[u8]) -> Option<u16> {
    let table = u16::from_be_bytes([*key.first()?, *key.get(1)?]) as usize;
    let at = if decls.get(table)?.kind == TableKind::Timed { 10 } else { 2 };
    Some(u16::from_be_bytes([*key.get(at)?, *key.get(at + 1)?]))
}

/// The first stored key after every key of `table`'s group `group` (groups end at 0xFFFF,
/// so the next group's prefix, or the next table's).
fn group_end(table: Table, group: u16) -> Vec<u8> {
    match group.checked_add(1) {
        Some(g) => prefix(table, g).to_vec(),
        None => prefix(Table(table.0 + 1), 0).to_vec(),
    }
}

impl StateTables {
    /// Empty tables for a task owning `owned` key groups.
    pub fn open(decls: &[TableDecl], groups: KeyGroups, owned: Range<u16>, backend: &Backend) -> Result<Self> {
        let inner = match backend {
            Backend::Memory => Inner::Memory(BTreeMap::new()),
            Backend::RocksDb { local, shared } => Inner::Rocks {
                store: StateStore::open(local.join("db"))?,
                local: local.clone(),
                shared: shared.clone(),
                pending: RefCell::default(),
            },
        };
        Ok(Self { decls: decls.to_vec(), groups, owned, backend: backend.clone(), inner })
    }

    /// The table declared under `name`.
    pub fn table(&self, name: &str) -> Result<Table> {
        self.decls
            .iter()
            .position(|d| d.name == name)
            .map(|i| Table(i as u16))
            .ok_or_else(|| WeirError::internal(format!("state table '{name}' was not declared")))
    }

    pub fn owned(&self) -> Range<u16> {
        self.owned.clone()
    }

    pub fn key_groups(&self) -> KeyGroups {
        self.groups
    }

    /// The stored key of entry `sort` under `key` in a [`TableKind::Sorted`] table: the key's
    /// length first, so that no key's entries run into another key's.
    pub fn entry_key(key: &[u8], sort: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(4 + key.len() + sort.len());
        Self::push_entry_key(&mut k, key, sort);
        k
    }

    /// [`Self::entry_key`], appended to `out` (many keys in one buffer).
    pub fn push_entry_key(out: &mut Vec<u8>, key: &[u8], sort: &[u8]) {
        out.extend_from_slice(&(key.len() as u32).to_be_bytes());
        out.extend_from_slice(key);
        out.extend_from_slice(sort);
    }

    fn timed(&self, table: Table) -> bool {
        self.decls.get(table.0 as usize).is_some_and(|d| d.kind == TableKind::Timed)
    }

    /// Where a key is stored: `table | group | key`, or for a timed table
    /// `table | time | group | rest`.
    fn stored_key(&self, table: Table, group: u16, key: &[u8]) -> Result<Vec<u8>> {
        let mut k = Vec::with_capacity(4 + key.len());
        self.stored_key_into(table, group, key, &mut k)?;
        Ok(k)
    }

    /// [`Self::stored_key`], appended to `out`.
    fn stored_key_into(&self, table: Table, group: u16, key: &[u8], out: &mut Vec<u8>) -> Result<()> {
        if !self.timed(table) {
            out.extend_from_slice(&prefix(table, group));
            out.extend_from_slice(key);
            return Ok(());
        }
        let (time, rest) = key
            .split_at_checked(8)
            .ok_or_else(|| WeirError::internal("a key of a timed state table does not start with its time"))?;
        out.extend_from_slice(&table.0.to_be_bytes());
        out.extend_from_slice(time);
        out.extend_from_slice(&group.to_be_bytes());
        out.extend_from_slice(rest);
        Ok(())
    }

    fn not_timed(&self, table: Table) -> Result<()> {
        if self.timed(table) {
            return Err(WeirError::internal("a timed state table is read by time (scan_times)"));
        }
        Ok(())
    }

    fn check_group(&self, group: u16) -> Result<()> {
        if self.owned.contains(&group) {
            Ok(())
        } else {
            Err(WeirError::internal(format!(
                "key group {group} is not this task's ({}..{})",
                self.owned.start, self.owned.end
            )))
        }
    }

    /// The values of many keys (`(group, key)`) in one call.
    pub fn get_many(&self, table: Table, keys: &[(u16, &[u8])]) -> Result<Vec<Option<Vec<u8>>>> {
        for (g, _) in keys {
            self.check_group(*g)?;
        }
        match &self.inner {
            Inner::Memory(map) => {
                keys.iter().map(|(g, k)| Ok(map.get(&self.stored_key(table, *g, k)?).cloned())).collect()
            }
            Inner::Rocks { store, pending, .. } => {
                // Keys written since the last drain are answered here; the store reads the
                // rest. One buffer holds every key (a lookup per distinct key and value of a
                // chunk: an allocation each would be a good part of it).
                let pending = pending.borrow();
                let mut key = Vec::new();
                let mut joined = Vec::new();
                let mut ends = Vec::new();
                let mut found: Vec<Option<Option<Vec<u8>>>> = Vec::with_capacity(keys.len());
                for (g, k) in keys {
                    key.clear();
                    self.stored_key_into(table, *g, k, &mut key)?;
                    let hit = pending.get(&key).map(|v| v.map(<[u8]>::to_vec));
                    if hit.is_none() {
                        joined.extend_from_slice(&key);
                        ends.push(joined.len());
                    }
                    found.push(hit);
                }
                let missing = crate::pieces(&joined, &ends);
                if !missing.is_empty() {
                    let mut read = store.table(0).multi_get(&missing)?.into_iter();
                    for f in found.iter_mut().filter(|f| f.is_none()) {
                        *f = Some(read.next().flatten());
                    }
                }
                Ok(found.into_iter().map(Option::flatten).collect())
            }
        }
    }

    /// Apply puts and deletes, atomically.
    pub fn write(&mut self, table: Table, changes: &[Change<'_>]) -> Result<()> {
        for (g, _, _) in changes {
            self.check_group(*g)?;
        }
        // Every key is checked before any is written (a held write cannot be taken back).
        if self.timed(table) && changes.iter().any(|(_, k, _)| k.len() < 8) {
            return Err(WeirError::internal("a key of a timed state table does not start with its time"));
        }
        if let Inner::Rocks { pending, .. } = &self.inner {
            let full_buffer = {
                let mut pending = pending.borrow_mut();
                let mut key = Vec::new();
                for (g, k, v) in changes {
                    key.clear();
                    self.stored_key_into(table, *g, k, &mut key)?;
                    pending.put(&key, *v);
                }
                pending.is_full()
            };
            if full_buffer {
                self.drain()?;
            }
            return Ok(());
        }
        let full: Vec<(Vec<u8>, Option<&[u8]>)> =
            changes.iter().map(|(g, k, v)| Ok((self.stored_key(table, *g, k)?, *v))).collect::<Result<_>>()?;
        if let Inner::Memory(map) = &mut self.inner {
            for (key, v) in full {
                match v {
                    Some(v) => {
                        map.insert(key, v.to_vec());
                    }
                    None => {
                        map.remove(&key);
                    }
                }
            }
        }
        Ok(())
    }

    /// Move the writes held in memory into the store, in key order. Called before every
    /// read that is not a point lookup, and before a snapshot.
    fn drain(&self) -> Result<()> {
        let Inner::Rocks { store, pending, .. } = &self.inner else {
            return Ok(());
        };
        if pending.borrow().is_empty() {
            return Ok(());
        }
        let mut pending = pending.borrow_mut();
        store.table(0).write(&pending.sorted())?;
        pending.clear();
        Ok(())
    }

    /// Keys of `group` in `[from, to)` (`to: None`: to the group's end), in key order.
    pub fn scan(&self, table: Table, group: u16, from: &[u8], to: Option<&[u8]>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.not_timed(table)?;
        self.check_group(group)?;
        let start = full_key(table, group, from);
        let end = match to {
            Some(to) => full_key(table, group, to),
            None => group_end(table, group),
        };
        self.drain()?;
        let rows = match &self.inner {
            Inner::Memory(map) => map.range(start..end).map(|(k, v)| (k.clone(), v.clone())).collect(),
            Inner::Rocks { store, .. } => store.table(0).scan(&start, &end)?,
        };
        Ok(rows.into_iter().map(|(k, v)| (k[4..].to_vec(), v)).collect())
    }

    /// Every entry under `key` of a [`TableKind::Sorted`] table, by sort key (returned
    /// without the key).
    pub fn entries(&self, table: Table, group: u16, key: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let from = Self::entry_key(key, &[]);
        let mut to = from.clone();
        // The next key of the same length sorts after every entry of this one; a key of
        // all 0xFF bytes runs to the group's end.
        let open_end = !increment(&mut to);
        let rows = self.scan(table, group, &from, if open_end { None } else { Some(&to) })?;
        let skip = from.len();
        Ok(rows.into_iter().filter(|(k, _)| k.starts_with(&from)).map(|(k, v)| (k[skip..].to_vec(), v)).collect())
    }

    /// Delete every entry under `key` of a [`TableKind::Sorted`] table.
    pub fn delete_entries(&mut self, table: Table, group: u16, key: &[u8]) -> Result<()> {
        let from = Self::entry_key(key, &[]);
        let mut to = from.clone();
        if increment(&mut to) {
            return self.delete_range(table, group, &from, Some(&to));
        }
        // A key of all 0xFF bytes: its entries one by one (a range would run into longer keys).
        let keys: Vec<Vec<u8>> =
            self.entries(table, group, key)?.into_iter().map(|(sort, _)| Self::entry_key(key, &sort)).collect();
        let changes: Vec<Change<'_>> = keys.iter().map(|k| (group, k.as_slice(), None)).collect();
        self.write(table, &changes)
    }

    /// [`StateTables::entries`] of many keys (`(group, key)`) in one call.
    pub fn entries_many(&self, table: Table, keys: &[(u16, &[u8])]) -> Result<Vec<crate::Entries>> {
        self.not_timed(table)?;
        let mut ranges = Vec::with_capacity(keys.len());
        for (group, key) in keys {
            self.check_group(*group)?;
            let from = Self::entry_key(key, &[]);
            let mut to = from.clone();
            let end = if increment(&mut to) { full_key(table, *group, &to) } else { group_end(table, *group) };
            ranges.push((full_key(table, *group, &from), end));
        }
        self.drain()?;
        let found = match &self.inner {
            Inner::Memory(map) => ranges
                .iter()
                .map(|(start, end)| {
                    map.range(start.clone()..end.clone()).map(|(k, v)| (k.clone(), v.clone())).collect()
                })
                .collect(),
            Inner::Rocks { store, .. } => store.table(0).scan_many(&ranges)?,
        };
        // Stored keys are `table | group | entry key`: what follows the key is the sort key.
        Ok(found
            .into_iter()
            .zip(&ranges)
            .map(|(rows, (start, _))| {
                rows.into_iter()
                    .filter(|(k, _)| k.starts_with(start))
                    .map(|(k, v)| (k[start.len()..].to_vec(), v))
                    .collect()
            })
            .collect())
    }

    /// Delete the keys of `group` in `[from, to)` (`to: None`: to the group's end).
    pub fn delete_range(&mut self, table: Table, group: u16, from: &[u8], to: Option<&[u8]>) -> Result<()> {
        self.not_timed(table)?;
        self.check_group(group)?;
        let start = full_key(table, group, from);
        let end = match to {
            Some(to) => full_key(table, group, to),
            None => group_end(table, group),
        };
        self.delete_stored(start, end)
    }

    /// Every entry of timed `table` with a time in `[from, to)` (8 ordered bytes each), in
    /// time order, over every key group: `(group, key, value)` with the key as written.
    pub fn scan_times(&self, table: Table, from: &[u8; 8], to: &[u8; 8]) -> Result<Vec<TimedEntry>> {
        let (start, end) = self.time_range(table, from, to)?;
        self.drain()?;
        let rows = match &self.inner {
            Inner::Memory(map) => map.range(start..end).map(|(k, v)| (k.clone(), v.clone())).collect(),
            Inner::Rocks { store, .. } => store.table(0).scan(&start, &end)?,
        };
        rows.into_iter()
            .map(|(k, v)| {
                let group = k.get(10..12).map(|g| u16::from_be_bytes([g[0], g[1]]));
                let group = group.ok_or_else(|| WeirError::internal("a timed state key is damaged"))?;
                let mut key = k[2..10].to_vec();
                key.extend_from_slice(&k[12..]);
                Ok((group, key, v))
            })
            .collect()
    }

    /// Delete every entry of timed `table` with a time in `[from, to)`: one range delete.
    pub fn delete_times(&mut self, table: Table, from: &[u8; 8], to: &[u8; 8]) -> Result<()> {
        let (start, end) = self.time_range(table, from, to)?;
        self.delete_stored(start, end)
    }

    /// Delete the stored keys in `[start, end)`.
    fn delete_stored(&mut self, start: Vec<u8>, end: Vec<u8>) -> Result<()> {
        // The store's range delete must also cover the keys still in memory.
        self.drain()?;
        match &mut self.inner {
            Inner::Memory(map) => {
                let doomed: Vec<Vec<u8>> = map.range(start..end).map(|(k, _)| k.clone()).collect();
                for k in doomed {
                    map.remove(&k);
                }
                Ok(())
            }
            Inner::Rocks { store, .. } => store.table(0).delete_range(&start, &end),
        }
    }

    fn time_range(&self, table: Table, from: &[u8; 8], to: &[u8; 8]) -> Result<(Vec<u8>, Vec<u8>)> {
        if !self.timed(table) {
            return Err(WeirError::internal("scan_times reads timed state tables only"));
        }
        let at = |time: &[u8; 8]| [table.0.to_be_bytes().as_slice(), time].concat();
        Ok((at(from), at(to)))
    }

    /// The tables at a barrier, with the operator's `meta`. In memory: every entry. In
    /// RocksDB: the store's incremental checkpoint, whose new SST files the snapshot's upload
    /// copies.
    pub fn snapshot(&mut self, meta: serde_json::Value) -> Result<OperatorSnapshot> {
        let names: Vec<&str> = self.decls.iter().map(|d| d.name).collect();
        let mut header = serde_json::json!({
            "version": SNAPSHOT_VERSION,
            "tables": names,
            "max": self.groups.max,
            "owned": [self.owned.start, self.owned.end],
            "meta": meta,
        });
        let mut payload = Vec::new();
        self.drain()?;
        let snapshot = match &mut self.inner {
            Inner::Memory(map) => {
                header["backend"] = "memory".into();
                for (k, v) in map.iter() {
                    payload.extend_from_slice(&(k.len() as u32).to_le_bytes());
                    payload.extend_from_slice(k);
                    payload.extend_from_slice(&(v.len() as u32).to_le_bytes());
                    payload.extend_from_slice(v);
                }
                None
            }
            Inner::Rocks { store, shared, .. } => {
                let (snap, own, upload) = store.begin_checkpoint(shared)?;
                if !snap.logs.is_empty() {
                    header["version"] = LOG_SNAPSHOT_VERSION.into();
                }
                header["backend"] = "rocksdb".into();
                header["store"] = snap.to_json().into();
                header["sizes"] = own.iter().map(|(_, f)| f.len()).collect::<Vec<_>>().into();
                for (_, f) in own {
                    payload.extend_from_slice(&f);
                }
                Some((snap, upload))
            }
        };
        let header = header.to_string();
        let mut state = (header.len() as u64).to_le_bytes().to_vec();
        state.extend_from_slice(header.as_bytes());
        state.extend_from_slice(&payload);
        Ok(match snapshot {
            None => OperatorSnapshot::bytes(state),
            Some((snap, upload)) => OperatorSnapshot {
                state,
                shared_files: snap.shared.values().cloned().collect(),
                bytes_copied: snap.bytes_copied,
                bytes_referenced: snap.bytes_referenced,
                upload: Some(Box::new(move || upload.run())),
            },
        })
    }

    /// Replace the tables with those of the snapshots of an earlier run's tasks (any
    /// parallelism, the same key groups), keeping only the groups this task owns; returns
    /// the operator meta of each snapshot that overlaps them.
    pub fn restore_from(&mut self, snapshots: &[&[u8]]) -> Result<Vec<RestoredMeta>> {
        let (decls, groups, owned, backend) =
            (self.decls.clone(), self.groups, self.owned.clone(), self.backend.clone());
        // The open store holds its directory's lock: let it go first.
        self.inner = Inner::Memory(BTreeMap::new());
        let (tables, metas) = Self::restore(&decls, groups, owned, &backend, snapshots)?;
        *self = tables;
        Ok(metas)
    }
}

/// The next byte string of the same length (`false` if there is none: all 0xFF).
fn increment(bytes: &mut [u8]) -> bool {
    for b in bytes.iter_mut().rev() {
        if *b == 0xFF {
            *b = 0;
        } else {
            *b += 1;
            return true;
        }
    }
    false
}

mod restore;

#[cfg(test)]
#[path = "tables_tests.rs"]
mod tests;

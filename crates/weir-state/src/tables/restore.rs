//! Restoring state tables from the snapshots of an earlier run's tasks, at the same or another
//! parallelism: each snapshot's header checked, then its groups this task owns kept.

use std::ops::Range;
use std::path::Path;

use weir_core::{Result, WeirError};
use weir_storage::Storage;

use super::{
    damaged, group_end, group_of_stored, prefix, Backend, Inner, KeyGroups, RestoredMeta, StateTables, Table,
    TableDecl, TableKind, LOG_SNAPSHOT_VERSION, SNAPSHOT_VERSION,
};
use crate::{StateStore, StoreSnapshot};

impl StateTables {
    /// Tables for a task owning `owned`, from the snapshots of the tasks of an earlier run
    /// (any parallelism, the same key groups): only the groups in `owned` are kept. Returns
    /// the operator meta of each snapshot that overlaps them.
    pub fn restore(
        decls: &[TableDecl],
        groups: KeyGroups,
        owned: Range<u16>,
        backend: &Backend,
        snapshots: &[&[u8]],
    ) -> Result<(Self, Vec<RestoredMeta>)> {
        let mut tables = Self::open(decls, groups, owned.clone(), backend)?;
        let mut parsed = Vec::new();
        let mut metas = Vec::new();
        for bytes in snapshots {
            let (header, payload) = split(bytes)?;
            let version = header["version"].as_u64().unwrap_or(0);
            if version != SNAPSHOT_VERSION && version != LOG_SNAPSHOT_VERSION {
                return Err(WeirError::not_supported(format!(
                    "the checkpoint's operator state has format version {version}; this Weir reads versions \
                     {SNAPSHOT_VERSION} and {LOG_SNAPSHOT_VERSION}"
                )));
            }
            let names: Vec<&str> = header["tables"]
                .as_array()
                .ok_or_else(|| damaged("no table list"))?
                .iter()
                .filter_map(|n| n.as_str())
                .collect();
            let declared: Vec<&str> = decls.iter().map(|d| d.name).collect();
            if names != declared {
                return Err(WeirError::user(format!(
                    "the checkpoint's operator state has tables {names:?}, this operator declares {declared:?}: \
                     the job changed since it was taken; start with --from-scratch"
                )));
            }
            if header["max"].as_u64() != Some(groups.max as u64) {
                return Err(WeirError::user(format!(
                    "the checkpoint was taken with 'pipeline.max-parallelism' = {}, the job now has {}: keyed state \
                     cannot be regrouped; set it back, or start with --from-scratch",
                    header["max"], groups.max
                )));
            }
            let range = header["owned"].as_array().ok_or_else(|| damaged("no key group range"))?;
            let (start, end) = match (range.first().and_then(|v| v.as_u64()), range.get(1).and_then(|v| v.as_u64())) {
                (Some(s), Some(e)) if s <= e => (s as u16, e as u16),
                _ => return Err(damaged("key group range")),
            };
            if start < owned.end && owned.start < end {
                metas.push(RestoredMeta { meta: header["meta"].clone(), primary: owned.contains(&start) });
                parsed.push((header, payload));
            }
        }
        let tables_count = decls.len() as u16;
        match &mut tables.inner {
            Inner::Memory(map) => {
                for (header, payload) in &parsed {
                    if header["backend"].as_str() != Some("memory") {
                        return Err(WeirError::user(
                            "the checkpoint's state is not in memory state: same backend only",
                        ));
                    }
                    let mut at = 0;
                    while at < payload.len() {
                        let key = read_bytes(payload, &mut at)?;
                        let value = read_bytes(payload, &mut at)?;
                        let group = group_of_stored(decls, key).ok_or_else(|| damaged("key"))?;
                        if owned.contains(&group) {
                            map.insert(key.to_vec(), value.to_vec());
                        }
                    }
                }
            }
            Inner::Rocks { store, local, shared, .. } => {
                let mut stores = Vec::with_capacity(parsed.len());
                for (i, (header, payload)) in parsed.iter().enumerate() {
                    if header["backend"].as_str() != Some("rocksdb") {
                        return Err(WeirError::user("the checkpoint's state is not in RocksDB: same backend only"));
                    }
                    let dir = if i == 0 { local.join("db") } else { local.join(format!("rescale-{i}")) };
                    if i == 0 {
                        // The empty store opened above holds the directory's lock.
                        *store = StateStore::open(local.join("empty"))?;
                    }
                    stores.push((dir.clone(), restore_store(header, payload, &dir, shared.as_ref(), local)?));
                }
                let mut stores = stores.into_iter();
                if let Some((_, first)) = stores.next() {
                    *store = first;
                    let _ = std::fs::remove_dir_all(local.join("empty"));
                    // Restored whole: drop the groups this task does not own (a range each; in a
                    // timed table, key by key).
                    for t in 0..tables_count {
                        let t = Table(t);
                        let table = store.table(0);
                        if decls[t.0 as usize].kind == TableKind::Timed {
                            let rows = table.scan(&prefix(t, 0), &prefix(Table(t.0 + 1), 0))?;
                            let doomed: Vec<(&[u8], Option<&[u8]>)> = rows
                                .iter()
                                .filter(|(k, _)| group_of_stored(decls, k).is_none_or(|g| !owned.contains(&g)))
                                .map(|(k, _)| (k.as_slice(), None))
                                .collect();
                            table.write(&doomed)?;
                            continue;
                        }
                        table.delete_range(&prefix(t, 0), &prefix(t, owned.start))?;
                        table.delete_range(&prefix(t, owned.end), &prefix(Table(t.0 + 1), 0))?;
                    }
                }
                // The others: their groups in `owned` copied in, a batch per group (a timed
                // table whole, filtered).
                for (dir, other) in stores {
                    for t in 0..tables_count {
                        if decls[t as usize].kind == TableKind::Timed {
                            let rows = other.table(0).scan(&prefix(Table(t), 0), &prefix(Table(t + 1), 0))?;
                            let mine: Vec<(&[u8], Option<&[u8]>)> = rows
                                .iter()
                                .filter(|(k, _)| group_of_stored(decls, k).is_some_and(|g| owned.contains(&g)))
                                .map(|(k, v)| (k.as_slice(), Some(v.as_slice())))
                                .collect();
                            store.table(0).write(&mine)?;
                            continue;
                        }
                        for g in owned.clone() {
                            let rows = other.table(0).scan(&prefix(Table(t), g), &group_end(Table(t), g))?;
                            if rows.is_empty() {
                                continue;
                            }
                            let refs: Vec<(&[u8], Option<&[u8]>)> =
                                rows.iter().map(|(k, v)| (k.as_slice(), Some(v.as_slice()))).collect();
                            store.table(0).write(&refs)?;
                        }
                    }
                    drop(other);
                    let _ = std::fs::remove_dir_all(&dir);
                }
            }
        }
        Ok((tables, metas))
    }
}

fn split(bytes: &[u8]) -> Result<(serde_json::Value, &[u8])> {
    let len =
        bytes.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes).ok_or_else(|| damaged("length"))?;
    let len = usize::try_from(len).map_err(|_| damaged("length"))?;
    let header = bytes.get(8..8 + len).ok_or_else(|| damaged("header"))?;
    let header = serde_json::from_slice(header).map_err(|_| damaged("header"))?;
    Ok((header, &bytes[8 + len..]))
}

fn read_bytes<'a>(bytes: &'a [u8], at: &mut usize) -> Result<&'a [u8]> {
    let len = bytes
        .get(*at..*at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| damaged("entry"))?;
    let from = *at + 4;
    let value = bytes.get(from..from + len as usize).ok_or_else(|| damaged("entry"))?;
    *at = from + len as usize;
    Ok(value)
}

/// A RocksDB store rebuilt in `dir` from a snapshot: its small files from the payload, its
/// SST files from `shared`.
fn restore_store(
    header: &serde_json::Value,
    payload: &[u8],
    dir: &Path,
    shared: &dyn Storage,
    local: &Path,
) -> Result<StateStore> {
    let snap = StoreSnapshot::from_json(header["store"].as_str().ok_or_else(|| damaged("store"))?)?;
    let sizes = header["sizes"].as_array().ok_or_else(|| damaged("sizes"))?;
    let own = local.join(format!("restore-own-{}", dir.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()));
    let _ = std::fs::remove_dir_all(&own);
    std::fs::create_dir_all(&own)
        .map_err(|e| WeirError::external(format!("cannot create '{}': {e}", own.display())))?;
    let mut at = 0;
    for (name, size) in snap.own.iter().zip(sizes) {
        let size = size.as_u64().ok_or_else(|| damaged("sizes"))? as usize;
        let bytes = payload.get(at..at + size).ok_or_else(|| damaged("store files"))?;
        std::fs::write(own.join(name), bytes)
            .map_err(|e| WeirError::external(format!("cannot write state file: {e}")))?;
        at += size;
    }
    let store = StateStore::restore(dir, &snap, shared, &own)?;
    let _ = std::fs::remove_dir_all(&own);
    Ok(store)
}

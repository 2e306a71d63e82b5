//! An operator's RocksDB store and its part in checkpoints, shared by every operator that
//! keeps state in RocksDB.
//!
//! On a barrier the store is checkpointed: SST files that no earlier checkpoint holds are
//! copied to the job's shared directory; the operator's snapshot bytes carry a JSON header
//! (the store's file list plus whatever the operator adds) followed by the store's small
//! per-checkpoint files (manifest, options), so restoring needs the shared files only.

use std::path::PathBuf;

use weir_core::{OperatorSnapshot, Result, WeirError};
use weir_state::{StateStore, StoreSnapshot};

/// Where a task's RocksDB lives and where checkpoints keep SST files.
#[derive(Debug, Clone)]
pub struct StateDirs {
    /// Local working copy (scratch: rebuilt from checkpoints on restart).
    pub local: PathBuf,
    /// Shared SST files of the job's checkpoints.
    pub shared: PathBuf,
}

pub(crate) struct RocksState {
    dirs: StateDirs,
    /// `None` only while being replaced by a restored store.
    store: Option<StateStore>,
}

fn damaged() -> WeirError {
    WeirError::internal("RocksDB operator state in a checkpoint is damaged")
}

impl RocksState {
    pub fn open(dirs: StateDirs) -> Result<Self> {
        let store = StateStore::open(dirs.local.join("db"))?;
        Ok(Self { dirs, store: Some(store) })
    }

    pub fn store(&self) -> Result<&StateStore> {
        self.store.as_ref().ok_or_else(|| WeirError::internal("operator state store is closed"))
    }

    /// Checkpoint the store; `header` is the operator's own metadata, given back by
    /// [`RocksState::restore`]. The new SST files are copied by the snapshot's upload.
    pub fn snapshot(&mut self, header: serde_json::Value) -> Result<OperatorSnapshot> {
        let shared = self.dirs.shared.clone();
        let store = self.store.as_mut().ok_or_else(|| WeirError::internal("operator state store is closed"))?;
        let (snap, own, upload) = store.begin_checkpoint(&shared)?;
        let header = serde_json::json!({
            "store": snap.to_json(),
            "sizes": own.iter().map(|(_, f)| f.len()).collect::<Vec<_>>(),
            "operator": header,
        })
        .to_string();
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        for (_, f) in own {
            bytes.extend_from_slice(&f);
        }
        Ok(OperatorSnapshot {
            state: bytes,
            shared_files: snap.shared.values().cloned().collect(),
            bytes_copied: snap.bytes_copied,
            bytes_referenced: snap.bytes_referenced,
            upload: Some(Box::new(move || upload.run())),
        })
    }

    /// Replace the store with the one in `state`; returns the operator's header.
    pub fn restore(&mut self, state: &[u8]) -> Result<serde_json::Value> {
        let len = u64::from_le_bytes(state.get(..8).and_then(|b| b.try_into().ok()).ok_or_else(damaged)?) as usize;
        let mut header: serde_json::Value =
            serde_json::from_slice(state.get(8..8 + len).ok_or_else(damaged)?).map_err(|_| damaged())?;
        let snap = StoreSnapshot::from_json(header["store"].as_str().ok_or_else(damaged)?)?;
        let own = self.dirs.local.join("restore-own");
        let _ = std::fs::remove_dir_all(&own);
        std::fs::create_dir_all(&own)
            .map_err(|e| WeirError::external(format!("cannot create '{}': {e}", own.display())))?;
        let mut at = 8 + len;
        for (name, size) in snap.own.iter().zip(header["sizes"].as_array().ok_or_else(damaged)?) {
            let size = size.as_u64().ok_or_else(damaged)? as usize;
            let bytes = state.get(at..at + size).ok_or_else(damaged)?;
            std::fs::write(own.join(name), bytes)
                .map_err(|e| WeirError::external(format!("cannot write state file: {e}")))?;
            at += size;
        }
        // The empty store opened at start holds the directory's lock: close it first.
        self.store = None;
        self.store = Some(StateStore::restore(self.dirs.local.join("db"), &snap, &self.dirs.shared, &own)?);
        let _ = std::fs::remove_dir_all(&own);
        Ok(header["operator"].take())
    }
}

/// Operator metadata fields read back from a snapshot header.
pub(crate) fn header_i64(header: &serde_json::Value, key: &str) -> Result<i64> {
    header[key].as_i64().ok_or_else(damaged)
}

pub(crate) fn header_u64(header: &serde_json::Value, key: &str) -> Result<u64> {
    header[key].as_u64().ok_or_else(damaged)
}

pub(crate) use super::state::ordered;

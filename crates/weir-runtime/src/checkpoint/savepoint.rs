//! Savepoints: a job's last checkpoint copied out of its checkpoint storage, with every file it
//! needs, and never pruned. A savepoint has the layout of a checkpoint storage holding one
//! checkpoint (`chk-<n>/` and the `shared/` files it names), plus `chk-<n>/savepoint.json`: so
//! it can be moved to another directory or object store, and a job started from it takes a
//! copy into its own checkpoint storage, whose later checkpoints then never refer outside it.

use std::sync::Arc;

use weir_core::{Result, WeirError};
use weir_storage::Storage;

use super::{Checkpoints, SAVEPOINT};

/// Written into a job's checkpoint storage when it starts from a savepoint: a restart of the
/// same command resumes from its own later checkpoints instead of from the savepoint again
/// (which would write the output since the savepoint a second time).
const STARTED_FROM: &str = "started-from-savepoint";

impl Checkpoints {
    /// Copy the newest complete checkpoint into `to`, marked as a savepoint of `job`: its
    /// sinks have published its pre-commits (the job stopped after it). Returns its number.
    pub fn export(&self, to: &Arc<dyn Storage>, job: &str) -> Result<u64> {
        let epoch = self.newest_complete()?.ok_or_else(|| {
            WeirError::user(format!("job '{job}' has no complete checkpoint in '{}' to make a savepoint of", self.at()))
        })?;
        if !to.list("")?.dirs.is_empty() {
            return Err(WeirError::user(format!("savepoint directory '{}' is not empty", to.describe())));
        }
        copy_checkpoint(self.storage(), to, epoch)?;
        let marker = serde_json::json!({
            "job": job, "checkpoint": epoch, "taken_from": self.at(), "weir": env!("CARGO_PKG_VERSION"),
        });
        to.put(&format!("{}/{SAVEPOINT}", Self::chk(epoch)), marker.to_string().into_bytes())?;
        Ok(epoch)
    }

    /// Replace this job's checkpoints by the newest checkpoint in `from` (a savepoint, or
    /// another job's retained checkpoints), unless this storage already started from it; the
    /// next restore then takes it, or this job's later checkpoints.
    pub fn import(&self, from: &Arc<dyn Storage>) -> Result<()> {
        let source = Checkpoints::new(from.clone());
        let epoch = source.newest_complete()?.ok_or_else(|| {
            WeirError::user(format!("'{}' holds no complete checkpoint or savepoint to start from", from.describe()))
        })?;
        if from.describe() == self.at() {
            return Err(WeirError::user(format!(
                "'{}' is this job's own checkpoint storage: a savepoint is started from its own directory",
                from.describe()
            )));
        }
        let tag = format!("{} {epoch}", from.describe());
        if self.storage().get(STARTED_FROM)?.is_some_and(|t| t == tag.as_bytes()) {
            log::info!("started from savepoint '{}' before: resuming from this job's own checkpoints", from.describe());
            return Ok(());
        }
        use super::CheckpointStore;
        self.clear()?;
        copy_checkpoint(from, self.storage(), epoch)?;
        self.storage().put(STARTED_FROM, tag.into_bytes())
    }

    /// The newest checkpoint with a manifest.
    pub fn newest_complete(&self) -> Result<Option<u64>> {
        for epoch in self.epochs()? {
            if self.storage().get(&format!("{}/manifest.json", Self::chk(epoch)))?.is_some() {
                return Ok(Some(epoch));
            }
        }
        Ok(None)
    }
}

/// Checkpoint `epoch` of `from` and the shared files its manifest names, into `to`; the
/// manifest last, so that an interrupted copy is no checkpoint.
fn copy_checkpoint(from: &Arc<dyn Storage>, to: &Arc<dyn Storage>, epoch: u64) -> Result<()> {
    let dir = Checkpoints::chk(epoch);
    let manifest_name = format!("{dir}/manifest.json");
    let manifest = from.get(&manifest_name)?.ok_or_else(|| WeirError::user(format!("{manifest_name}: missing")))?;
    let value: serde_json::Value = serde_json::from_slice(&manifest)
        .map_err(|e| WeirError::user(format!("'{}': {manifest_name} unreadable: {e}", from.describe())))?;
    let mut names: Vec<String> = value["shared"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(|s| format!("shared/{s}")))
        .collect();
    names.extend(
        from.list(&dir)?.files.into_iter().filter(|f| f.name != "manifest.json").map(|f| format!("{dir}/{}", f.name)),
    );
    // A few at a time: shared files may be large.
    for chunk in names.chunks(16) {
        let mut files = Vec::with_capacity(chunk.len());
        for name in chunk {
            let bytes =
                from.get(name)?.ok_or_else(|| WeirError::user(format!("'{}': {name} is missing", from.describe())))?;
            files.push((name.clone(), bytes));
        }
        to.put_all(files)?;
    }
    to.put(&manifest_name, manifest)
}

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
        // Started from it before, and its checkpoints since are there (not cleared by
        // --from-scratch): those are where it resumes.
        let started = self.storage().get(STARTED_FROM)?.is_some_and(|t| t == tag.as_bytes());
        if started && self.newest_complete()?.is_some() {
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::checkpoint::{CheckpointStore, OperatorState, PlanState, TaskState};

    fn scratch(name: &str) -> (std::path::PathBuf, Arc<dyn Storage>) {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("weir-savepoint-{name}-{nanos}-{}", std::process::id()));
        (dir.clone(), Arc::new(weir_storage::LocalDir::new(&dir)))
    }

    /// A task whose operator needs shared file `sst`, with `bytes` of its own state.
    fn tasks(bytes: &[u8], sst: &str) -> BTreeMap<String, TaskState> {
        let op = OperatorState { state: bytes.to_vec(), shared_files: vec![sst.to_string()], ..Default::default() };
        let task = TaskState { operators: BTreeMap::from([("op".to_string(), op)]), ..Default::default() };
        BTreeMap::from([("stage1-task0".to_string(), task)])
    }

    fn state_of(store: &Checkpoints) -> Vec<u8> {
        let restored = store.latest(&PlanState::default()).expect("latest").expect("a checkpoint");
        restored.tasks["stage1-task0"].operators["op"].state.clone()
    }

    #[test]
    fn a_savepoint_holds_what_it_needs_and_a_job_takes_it_once() {
        let (job_dir, job) = scratch("job");
        let store = Checkpoints::new(job.clone());
        job.put("shared/old.sst", b"old".to_vec()).expect("sst");
        job.put("shared/a.sst", b"a".to_vec()).expect("sst");
        store.write(1, &PlanState::default(), &tasks(b"one", "old.sst")).expect("write 1");
        store.write(2, &PlanState::default(), &tasks(b"two", "a.sst")).expect("write 2");

        // The newest checkpoint and only the shared files it names.
        let (sp_dir, savepoint) = scratch("savepoint");
        assert_eq!(store.export(&savepoint, "job").expect("export"), 2);
        assert!(sp_dir.join("chk-0000000002").join(SAVEPOINT).exists());
        assert!(sp_dir.join("shared/a.sst").exists() && !sp_dir.join("shared/old.sst").exists());
        assert!(!sp_dir.join("chk-0000000001").exists());
        let err = store.export(&savepoint, "job").expect_err("not empty");
        assert!(err.message.contains("not empty"), "{}", err.message);

        // Moved, then taken by another job's storage.
        let moved = sp_dir.with_extension("moved");
        std::fs::rename(&sp_dir, &moved).expect("move");
        let from: Arc<dyn Storage> = Arc::new(weir_storage::LocalDir::new(&moved));
        let (next_dir, next) = scratch("next");
        let taker = Checkpoints::new(next.clone());
        taker.import(&from).expect("import");
        assert_eq!(state_of(&taker), b"two");
        assert!(next_dir.join("shared/a.sst").exists());

        // A checkpoint of its own since: a second start resumes there, not from the savepoint.
        next.put("shared/b.sst", b"b".to_vec()).expect("sst");
        taker.write(3, &PlanState::default(), &tasks(b"three", "b.sst")).expect("write 3");
        taker.import(&from).expect("again");
        assert_eq!(state_of(&taker), b"three");
        // Its checkpoints deleted (--from-scratch): the savepoint again.
        taker.clear().expect("clear");
        taker.import(&from).expect("after clearing");
        assert_eq!(state_of(&taker), b"two");

        // Nothing to start from; its own directory.
        let (empty_dir, empty) = scratch("empty");
        let err = taker.import(&empty).expect_err("empty");
        assert!(err.message.contains("holds no complete checkpoint"), "{}", err.message);
        let err = taker.import(&next).expect_err("its own");
        assert!(err.message.contains("own checkpoint storage"), "{}", err.message);
        for d in [job_dir, moved, next_dir, empty_dir] {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

//! Checkpoints in a [`Storage`]: a local directory or an object store.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use weir_core::{Result, WeirError};
use weir_storage::Storage;

use super::*;
use crate::upgrade::{OldPart, Taken, Upgrade, Verdict};

/// Why a checkpoint is not restored.
enum Unusable {
    /// It has no manifest: it was never completed, so it does not exist.
    Absent,
    /// Its files are missing or damaged: an older one may do.
    Damaged(String),
    /// It does not fit this plan (or this Weir).
    OtherPlan(String),
}

fn other_plan(epoch: u64, at: &str, why: &str) -> WeirError {
    WeirError::user(format!(
        "checkpoint {epoch} in '{at}' cannot be restored into this job: {why}; start with --from-scratch to discard \
         its state"
    ))
}

const MANIFEST: &str = "manifest.json";

/// The largest task state part written into the manifest rather than into a file of its own
/// (format version 3). Sources' positions, sinks' pre-commits and RocksDB snapshots that
/// name their files are a few hundred bytes to a few KiB, and a RocksDB operator's write logs
/// since its last full checkpoint up to 256 KiB (`weir-state`'s `LOG_BYTES`); each file of
/// its own cost a create, a sync, a rename and a sync of its directory, which at a checkpoint
/// every 100 ms were the largest part of what a checkpoint cost. Larger parts (an in-memory
/// operator's whole state) keep their files. Pruning does not read the manifests this
/// instance wrote ([`Checkpoints::shared_of`]), so a larger manifest is read once, on restore.
const INLINE_MAX: usize = 320 * 1024;

/// A part's checksum as its manifest's format version computes it: FNV-1a up to version 2,
/// XXH64 from version 3. FNV takes a byte at a time, and a RocksDB part with its write logs
/// (up to a few hundred KiB) is hashed at every checkpoint.
fn part_checksum(version: u64, bytes: &[u8]) -> u64 {
    if version >= 3 {
        twox_hash::XxHash64::oneshot(0, bytes)
    } else {
        checksum(bytes)
    }
}

/// Checkpoints in a storage: `chk-<n>/` holds a `manifest.json` listing the task state parts
/// with sizes and checksums, small parts inside it (base64) and the others in files of their
/// own beside it; `shared/` holds RocksDB's SST files, each written once and referenced by
/// every checkpoint that needs it. The manifest is written last, and only if it does not
/// exist yet: a checkpoint without it does not exist, and no two instances of a job both
/// complete the same one.
pub struct Checkpoints {
    storage: Arc<dyn Storage>,
    /// This instance, as written to the `owner` file by `claim`.
    instance: String,
    /// The shared files each manifest this instance wrote lists, by checkpoint: pruning
    /// needs them at every checkpoint, and reading the manifests again (with their inline
    /// parts) would cost more than writing them.
    shared_of: std::sync::Mutex<BTreeMap<u64, Vec<String>>>,
}

impl Checkpoints {
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        Self { storage, instance: format!("{}-{nanos}", std::process::id()), shared_of: Default::default() }
    }

    pub(super) fn at(&self) -> String {
        self.storage.describe()
    }

    pub(super) fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// Refuse to complete a checkpoint if another instance has claimed the storage since.
    fn check_owner(&self) -> Result<()> {
        match self.storage.get("owner")? {
            Some(owner) if String::from_utf8_lossy(&owner).trim() != self.instance => Err(WeirError::fenced(format!(
                "checkpoint storage '{}' was taken over by another instance of this job ({}); this one stops",
                self.at(),
                String::from_utf8_lossy(&owner).trim()
            ))),
            _ => Ok(()),
        }
    }

    pub(super) fn chk(epoch: u64) -> String {
        format!("chk-{epoch:010}")
    }

    /// Checkpoint directories, newest first.
    pub(super) fn epochs(&self) -> Result<Vec<u64>> {
        let mut epochs: Vec<u64> = self
            .storage
            .list("")?
            .dirs
            .iter()
            .filter_map(|n| n.strip_prefix("chk-").and_then(|n| n.parse().ok()))
            .collect();
        epochs.sort_unstable_by(|a, b| b.cmp(a));
        Ok(epochs)
    }

    /// When checkpoint `epoch`'s manifest was written, if it was.
    fn completed_at(&self, epoch: u64) -> Result<Option<std::time::SystemTime>> {
        let listing = self.storage.list(&Self::chk(epoch))?;
        Ok(listing.files.iter().find(|f| f.name == MANIFEST).map(|f| f.modified))
    }

    /// Checkpoint `epoch`, which something outside the store (a task's Kafka commit) names
    /// as the one to restore.
    pub fn load(&self, epoch: u64, plan: &PlanState) -> Result<Restored> {
        self.read(epoch, plan).map_err(|why| match why {
            Unusable::OtherPlan(why) => other_plan(epoch, &self.at(), &why),
            Unusable::Absent => WeirError::user(format!(
                "checkpoint {epoch} in '{}' cannot be restored (it has no manifest): is the checkpoint storage \
                 shared by every worker?",
                self.at()
            )),
            Unusable::Damaged(why) => WeirError::user(format!(
                "checkpoint {epoch} in '{}' cannot be restored ({why}): is the checkpoint storage shared by every \
                 worker?",
                self.at()
            )),
        })
    }

    /// Checkpoint `epoch`'s manifest and format version, if this Weir reads it and its state
    /// is laid out as `plan`'s.
    fn manifest(&self, epoch: u64, plan: &PlanState) -> std::result::Result<(serde_json::Value, u64), Unusable> {
        let dir = Self::chk(epoch);
        let text = match self.storage.get(&format!("{dir}/{MANIFEST}")) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Err(Unusable::Absent),
            Err(e) => return Err(Unusable::Damaged(format!("manifest unreadable: {e}"))),
        };
        let manifest: serde_json::Value =
            serde_json::from_slice(&text).map_err(|e| Unusable::Damaged(format!("manifest unreadable: {e}")))?;
        // A layout this Weir does not know is refused by its version, before anything in it
        // is read the wrong way.
        let version = manifest["version"].as_u64().unwrap_or(0);
        if !(1..=MANIFEST_VERSION).contains(&version) {
            return Err(Unusable::OtherPlan(format!(
                "its manifest has format version {version}, and this Weir reads versions 1 to {MANIFEST_VERSION}"
            )));
        }
        // Keys in another hash's groups would not meet their state: said by name.
        let hash = manifest["key_hash"].as_str().unwrap_or("DataFusion's ahash (Weir before weir-xxh64-v1)");
        if hash != crate::KEY_HASH {
            return Err(Unusable::OtherPlan(format!(
                "its keys were put in key groups by {hash}, and this Weir puts them by {}: a key's state would \
                 be in another group",
                crate::KEY_HASH
            )));
        }
        if version == 1 && manifest["fingerprint"].as_str() != Some(plan.fingerprint.as_str()) {
            return Err(Unusable::OtherPlan(
                "it has format version 1, which restores only into the plan that wrote it, and was taken by a \
                 plan that keeps other state (another query, state backend or max-parallelism)"
                    .into(),
            ));
        }
        if version >= 2 {
            let layout = manifest["layout"].as_str().unwrap_or("?");
            if layout != plan.layout {
                return Err(Unusable::OtherPlan(format!(
                    "its state is laid out for {layout}, and this job's for {}",
                    plan.layout
                )));
            }
        }
        Ok((manifest, version))
    }

    /// What becomes of each part of checkpoint `epoch` (format version 2) in `plan`.
    fn verdicts(
        &self,
        epoch: u64,
        manifest: &serde_json::Value,
        plan: &PlanState,
    ) -> std::result::Result<Upgrade, Unusable> {
        let parts = manifest["parts"].as_array().ok_or(Unusable::Damaged("manifest lists no parts".into()))?;
        let old: Vec<OldPart> = parts.iter().map(OldPart::of_manifest).collect();
        let marker = self.storage.get(&format!("{}/{}", Self::chk(epoch), super::SAVEPOINT));
        let published = marker.map_err(|e| Unusable::Damaged(format!("savepoint marker unreadable: {e}")))?.is_some();
        Ok(crate::upgrade::verdicts(&old, plan, Taken { published }))
    }

    /// The checkpoint a restore would take and what becomes of each of its parts in `plan`
    /// (`weir upgrade --check`): the newest whose manifest is readable, as for a restore
    /// (whose state files are then read too).
    pub fn check(&self, plan: &PlanState) -> Result<Option<(u64, Upgrade)>> {
        for epoch in self.epochs()? {
            let verdicts = self.manifest(epoch, plan).and_then(|(manifest, version)| match version {
                // It fits, or `manifest` would have said: every part restores as it was.
                1 => Ok(Upgrade::all_kept(plan)),
                _ => self.verdicts(epoch, &manifest, plan),
            });
            match verdicts {
                Ok(up) => return Ok(Some((epoch, up))),
                Err(Unusable::Absent) => continue,
                Err(Unusable::OtherPlan(why)) => return Err(other_plan(epoch, &self.at(), &why)),
                Err(Unusable::Damaged(why)) => {
                    log::warn!("checkpoint {epoch} in '{}' is not usable ({why}); checking the one before", self.at())
                }
            }
        }
        Ok(None)
    }

    fn read(&self, epoch: u64, plan: &PlanState) -> std::result::Result<Restored, Unusable> {
        let (manifest, version) = self.manifest(epoch, plan)?;
        let upgrade = match version {
            1 => None,
            _ => {
                let up = self.verdicts(epoch, &manifest, plan)?;
                if let Some(why) = up.refusal() {
                    return Err(Unusable::OtherPlan(why));
                }
                if up.entries.iter().any(|e| e.verdict != Verdict::Kept) {
                    log::info!("checkpoint {epoch} restores into another plan ({}):\n{}", up.summary(), up.describe());
                }
                Some(up)
            }
        };
        let mut restored = self
            .read_parts(&Self::chk(epoch), &manifest)
            .map_err(Unusable::Damaged)
            .map(|tasks| Restored { epoch, version, tasks, ..Default::default() })?;
        if let Some(up) = upgrade {
            up.apply(&mut restored);
        }
        Ok(restored)
    }

    /// The state files a manifest lists, checked, by task.
    fn read_parts(
        &self,
        dir: &str,
        manifest: &serde_json::Value,
    ) -> std::result::Result<BTreeMap<String, TaskState>, String> {
        let mut tasks: BTreeMap<String, TaskState> = BTreeMap::new();
        let version = manifest["version"].as_u64().unwrap_or(0);
        let files = manifest["files"].as_array().ok_or("manifest lists no files")?;
        for f in files {
            let (Some(task), Some(part)) = (f["task"].as_str(), f["part"].as_str()) else {
                return Err("manifest entry incomplete".into());
            };
            let state = tasks.entry(task.to_string()).or_default();
            if part == "none" {
                continue;
            }
            let Some(sum) = f["checksum"].as_str() else { return Err("manifest entry incomplete".into()) };
            let (name, bytes) = match (f["inline"].as_str(), f["file"].as_str()) {
                (Some(text), _) => {
                    let name = format!("the {part} part of {task} in the manifest");
                    let bytes = BASE64.decode(text).map_err(|e| format!("{name}: {e}"))?;
                    (name, bytes)
                }
                (None, Some(name)) => match self.storage.get(&format!("{dir}/{name}")) {
                    Ok(Some(bytes)) => (name.to_string(), bytes),
                    Ok(None) => return Err(format!("{name}: missing")),
                    Err(e) => return Err(format!("{name}: {e}")),
                },
                (None, None) => return Err("manifest entry incomplete".into()),
            };
            if format!("{:016x}", part_checksum(version, &bytes)) != sum {
                return Err(format!("{name}: checksum mismatch"));
            }
            match part {
                "source" | "sink" => {
                    state.owner = f["id"].as_str().map(String::from);
                    *if part == "source" { &mut state.source } else { &mut state.sink } = Some(bytes);
                }
                "operator" => {
                    // Version 1: the operator's place in its chain; version 2: its identity.
                    let op = match &f["operator"] {
                        serde_json::Value::Number(n) => n.to_string(),
                        serde_json::Value::String(id) => id.clone(),
                        _ => return Err("manifest entry without its operator".into()),
                    };
                    let shared_files = f["shared"]
                        .as_array()
                        .ok_or("manifest entry without its shared files")?
                        .iter()
                        .map(|s| s.as_str().map(String::from).ok_or("a shared file name is not text"))
                        .collect::<std::result::Result<Vec<_>, _>>()?;
                    let o = OperatorState {
                        state: bytes,
                        shared_files,
                        bytes_copied: f["bytes_copied"].as_u64().unwrap_or(0),
                        bytes_referenced: f["bytes_referenced"].as_u64().unwrap_or(0),
                    };
                    state.operators.insert(op, o);
                }
                other => return Err(format!("manifest names an unknown part '{other}'")),
            }
        }
        Ok(tasks)
    }
}

impl CheckpointStore for Checkpoints {
    fn claim(&self) -> Result<()> {
        self.storage.put("owner", self.instance.as_bytes().to_vec())
    }

    fn write(&self, epoch: u64, plan: &PlanState, tasks: &BTreeMap<String, TaskState>) -> Result<CheckpointStats> {
        let started = Instant::now();
        let dir = Self::chk(epoch);
        // Part names of this instance's own: an instance that writes the same checkpoint
        // number (a fenced one, not stopped yet) never overwrites another's parts.
        let tag = &self.instance;
        let mut files = Vec::new();
        let mut parts: Vec<(String, Vec<u8>)> = Vec::new();
        let mut bytes_written = 0u64;
        let mut bytes_referenced = 0u64;
        let mut shared = std::collections::BTreeSet::new();
        // RocksDB files copied for (and referenced by) the operators' states.
        let (mut files_copied, mut files_referenced) = (0u64, 0u64);
        let mut stateless = Vec::new();
        let mut write_part = |name: String, bytes: &[u8], entry: serde_json::Value| {
            bytes_written += bytes.len() as u64;
            bytes_referenced += bytes.len() as u64;
            let mut entry = entry;
            entry["bytes"] = bytes.len().into();
            entry["checksum"] = format!("{:016x}", part_checksum(MANIFEST_VERSION, bytes)).into();
            if bytes.len() <= INLINE_MAX {
                entry["inline"] = BASE64.encode(bytes).into();
            } else {
                entry["file"] = name.clone().into();
                parts.push((format!("{dir}/{name}"), bytes.to_vec()));
            }
            files.push(entry);
        };
        for (i, (task, state)) in tasks.iter().enumerate() {
            if let Some(bytes) = &state.source {
                write_part(
                    format!("state-{tag}-{i}-source.bin"),
                    bytes,
                    serde_json::json!({ "task": task, "part": "source", "id": state.owner }),
                );
            }
            for (op, o) in &state.operators {
                files_copied += o.bytes_copied;
                files_referenced += o.bytes_referenced;
                shared.extend(o.shared_files.iter().cloned());
                let entry = serde_json::json!({
                    "task": task, "part": "operator", "operator": op, "shared": o.shared_files,
                    "bytes_copied": o.bytes_copied, "bytes_referenced": o.bytes_referenced,
                });
                write_part(format!("state-{tag}-{i}-op{op}.bin"), &o.state, entry);
            }
            if let Some(bytes) = &state.sink {
                let entry = serde_json::json!({ "task": task, "part": "sink", "id": state.owner });
                write_part(format!("state-{tag}-{i}-sink.bin"), bytes, entry);
            }
            if state.source.is_none() && state.operators.is_empty() && state.sink.is_none() {
                // A stateless task is listed all the same: its acknowledgement is part of
                // the checkpoint.
                stateless.push(serde_json::json!({ "task": task, "part": "none" }));
            }
        }
        // Parts left by an attempt that died before its manifest are overwritten.
        if !parts.is_empty() {
            self.storage.put_all(parts)?;
        }
        files.extend(stateless);
        let shared: Vec<String> = shared.into_iter().collect();
        bytes_written += files_copied;
        bytes_referenced += files_referenced;
        // Fault injection: the checkpoint held open (state written, no manifest), so that a
        // test (or `weir verify`) kills the process in the middle of the asynchronous write.
        weir_core::fault::pause("manifest");
        self.check_owner()?;
        // Every part of the plan, and whether this checkpoint holds state of it: a part that
        // changed is refused on restore only if it has state to lose.
        let held: std::collections::BTreeSet<&str> =
            tasks.values().flat_map(|t| t.operators.keys().map(String::as_str).chain(t.owner.as_deref())).collect();
        let plan_parts: Vec<serde_json::Value> = plan
            .parts
            .iter()
            .map(|p| {
                let has_state = held.contains(p.id.as_str());
                serde_json::json!({
                    "id": p.id, "slot": p.slot, "name": p.name, "has_state": has_state, "shape": p.shape,
                    "output": p.output,
                })
            })
            .collect();
        let manifest = serde_json::json!({
            "version": MANIFEST_VERSION, "epoch": epoch, "fingerprint": plan.fingerprint, "layout": plan.layout,
            "key_hash": crate::KEY_HASH, "parts": plan_parts, "files": files, "shared": shared,
        });
        let manifest = manifest.to_string().into_bytes();
        if !self.storage.put_new(&format!("{dir}/{MANIFEST}"), manifest.clone())? {
            // An earlier instance completed this checkpoint and died before anything used it
            // (a worker's task restores the checkpoint its Kafka commit names, which may be
            // older): this instance, if it still owns the checkpoints, replaces it. One that
            // no longer does stops.
            self.check_owner()?;
            self.storage.put(&format!("{dir}/{MANIFEST}"), manifest)?;
        }
        if let Ok(mut known) = self.shared_of.lock() {
            known.insert(epoch, shared);
        }
        Ok(CheckpointStats {
            id: epoch,
            duration_ms: started.elapsed().as_millis() as u64,
            bytes_written,
            bytes_referenced,
            completed_at_ms: 0,
        })
    }

    fn latest(&self, plan: &PlanState) -> Result<Option<Restored>> {
        let mut refused = Vec::new();
        for epoch in self.epochs()? {
            match self.read(epoch, plan) {
                Ok(r) => return Ok(Some(r)),
                // Never completed: it does not exist.
                Err(Unusable::Absent) => continue,
                // An older checkpoint of the same job would not fit either, and restoring it
                // would write its output again.
                Err(Unusable::OtherPlan(why)) => return Err(other_plan(epoch, &self.at(), &why)),
                Err(Unusable::Damaged(why)) => {
                    log::warn!("checkpoint {epoch} in '{}' is not usable ({why}); trying the one before", self.at());
                    refused.push(format!("{epoch}: {why}"));
                }
            }
        }
        if refused.is_empty() {
            return Ok(None);
        }
        // Starting over silently could write the output twice.
        Err(WeirError::user(format!(
            "no usable checkpoint in '{}' ({}); start with --from-scratch to discard them",
            self.at(),
            refused.join("; ")
        )))
    }

    fn prune(&self, retained: usize, keep: &[String]) -> Result<()> {
        let (complete, second_newest) = self.prune_checkpoints(retained)?;
        self.prune_shared(&complete, second_newest, keep)
    }

    fn clear(&self) -> Result<()> {
        for epoch in self.epochs()? {
            self.storage.delete_dir(&Self::chk(epoch))?;
        }
        self.storage.delete_dir("shared")
    }
}

impl Checkpoints {
    /// The storage of the checkpoints' shared files (RocksDB's SST files).
    pub fn shared(storage: &Arc<dyn Storage>) -> Arc<dyn Storage> {
        storage.scoped("shared")
    }

    /// Delete shared files no retained checkpoint refers to, nor `also`. Only files older than
    /// the second newest manifest go: newer ones may belong to a checkpoint being taken (one
    /// runs at a time, and the next is triggered after the last manifest was written). A task
    /// that ends takes its final snapshot outside that order, while a checkpoint may be in
    /// flight: its files come in `also` until a manifest lists them. `complete`: the retained
    /// checkpoints with the times of their manifests, newest first; `second_newest`: the time
    /// of the second newest complete checkpoint's manifest, retained or just deleted (with
    /// `checkpoint.retained` = 1 it is never retained, and shared files must still go).
    fn prune_shared(
        &self,
        complete: &[(u64, std::time::SystemTime)],
        second_newest: Option<std::time::SystemTime>,
        also: &[String],
    ) -> Result<()> {
        // The second newest manifest's time: a task that ended may have uploaded its final
        // files just before the newest one while its acknowledgement was still on the way;
        // by the next checkpoint the coordinator has it and passes its files in `also`.
        let Some(newest) = second_newest else { return Ok(()) };
        let mut keep: std::collections::BTreeSet<String> = also.iter().cloned().collect();
        let mut known = self.shared_of.lock().map_err(|_| WeirError::internal("checkpoint bookkeeping poisoned"))?;
        known.retain(|epoch, _| complete.iter().any(|(e, _)| e == epoch));
        for (epoch, _) in complete {
            if let Some(files) = known.get(epoch) {
                keep.extend(files.iter().cloned());
                continue;
            }
            let Some(text) = self.storage.get(&format!("{}/{MANIFEST}", Self::chk(*epoch)))? else { continue };
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&text) {
                keep.extend(v["shared"].as_array().into_iter().flatten().filter_map(|s| s.as_str().map(String::from)));
            }
        }
        drop(known);
        let doomed: Vec<String> = self
            .storage
            .list("shared")?
            .files
            .into_iter()
            .filter(|f| f.modified < newest && !keep.contains(&f.name))
            .map(|f| format!("shared/{}", f.name))
            .collect();
        self.storage.delete(&doomed)
    }

    /// Keep the newest `retained` complete checkpoints and any newer incomplete one (it may
    /// be being written); returns the kept complete ones with their manifests' times, and the
    /// time of the second newest complete one's manifest (kept or not).
    #[allow(clippy::type_complexity)]
    fn prune_checkpoints(
        &self,
        retained: usize,
    ) -> Result<(Vec<(u64, std::time::SystemTime)>, Option<std::time::SystemTime>)> {
        let mut complete = Vec::new();
        let (mut completes, mut second_newest) = (0, None);
        for epoch in self.epochs()? {
            let completed_at = self.completed_at(epoch)?;
            if let Some(at) = completed_at {
                completes += 1;
                if completes == 2 {
                    second_newest = Some(at);
                }
            }
            match completed_at {
                Some(at) if complete.len() < retained => {
                    complete.push((epoch, at));
                    continue;
                }
                // Newer than every complete one: may still be being written.
                None if complete.is_empty() => continue,
                _ => {}
            }
            self.storage.delete_dir(&Self::chk(epoch))?;
        }
        Ok((complete, second_newest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn plan(layout: &str) -> PlanState {
        PlanState { layout: layout.into(), ..Default::default() }
    }

    fn state(bytes: &[u8]) -> BTreeMap<String, TaskState> {
        BTreeMap::from([("stage0-task0".to_string(), TaskState { source: Some(bytes.to_vec()), ..Default::default() })])
    }

    /// One task's state whose operator refers to shared `files`.
    fn with_files(files: &[&str]) -> BTreeMap<String, TaskState> {
        let op = OperatorState {
            state: b"s".to_vec(),
            shared_files: files.iter().map(|f| f.to_string()).collect(),
            ..Default::default()
        };
        let task = TaskState { operators: BTreeMap::from([("0".to_string(), op)]), ..Default::default() };
        BTreeMap::from([("stage1-task0".to_string(), task)])
    }

    fn scratch() -> PathBuf {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        std::env::temp_dir().join(format!("weir-checkpoints-{nanos}-{}", std::process::id()))
    }

    #[test]
    fn a_damaged_or_unfinished_latest_checkpoint_falls_back_to_the_one_before() {
        let dir = scratch();
        let store = Checkpoints::new(Arc::new(weir_storage::LocalDir::new(&dir)));
        assert!(store.latest(&plan("plan")).expect("empty store").is_none());
        store.write(1, &plan("plan"), &state(b"one")).expect("write 1");
        store.write(2, &plan("plan"), &state(b"two")).expect("write 2");
        assert_eq!(store.latest(&plan("plan")).expect("latest").map(|r| r.epoch), Some(2));

        // A checkpoint that died before its manifest does not exist.
        std::fs::create_dir_all(dir.join("chk-0000000003")).expect("unfinished dir");
        assert_eq!(store.latest(&plan("plan")).expect("latest").map(|r| r.epoch), Some(2));

        // A part too large for the manifest has a file of its own; damaged, the one before
        // is used; missing, too.
        let large = vec![7u8; INLINE_MAX + 1];
        store.write(3, &plan("plan"), &state(&large)).expect("write 3");
        assert_eq!(store.latest(&plan("plan")).expect("latest").expect("3").tasks["stage0-task0"].source, Some(large));
        let part = std::fs::read_dir(dir.join("chk-0000000003"))
            .expect("checkpoint 3")
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().ends_with("-0-source.bin"))
            .expect("checkpoint 3's source part");
        std::fs::write(&part, b"damaged").expect("damage");
        assert_eq!(store.latest(&plan("plan")).expect("latest").map(|r| r.epoch), Some(2));
        std::fs::remove_file(&part).expect("remove");
        assert_eq!(store.latest(&plan("plan")).expect("latest").map(|r| r.epoch), Some(2));
        std::fs::remove_dir_all(dir.join("chk-0000000003")).expect("remove checkpoint 3");

        // A damaged part in the manifest: checksum mismatch, the one before is used.
        let manifest_2 = dir.join("chk-0000000002").join(MANIFEST);
        let text = std::fs::read_to_string(&manifest_2).expect("manifest 2");
        let inline = format!("\"inline\":\"{}\"", BASE64.encode(b"two"));
        assert!(text.contains(&inline), "a small part is in the manifest: {text}");
        std::fs::write(&manifest_2, text.replace(&inline, &format!("\"inline\":\"{}\"", BASE64.encode(b"tw0"))))
            .expect("damage");
        let restored = store.latest(&plan("plan")).expect("latest").expect("a checkpoint");
        assert_eq!(restored.epoch, 1);
        assert_eq!(restored.tasks["stage0-task0"].source, Some(b"one".to_vec()));

        // Checkpoints of another plan are refused loudly, not skipped into a fresh start.
        let err = store.latest(&plan("other plan")).expect_err("another plan");
        assert!(err.message.contains("start with --from-scratch"), "{}", err.message);

        // One whose keys another hash grouped (no name: DataFusion's ahash) says so.
        let manifest = dir.join("chk-0000000001").join("manifest.json");
        let text = std::fs::read_to_string(&manifest).expect("manifest");
        let mut unversioned: serde_json::Value = serde_json::from_str(&text).expect("a manifest");
        assert_eq!(unversioned["version"], MANIFEST_VERSION, "the manifest has its version");
        unversioned.as_object_mut().map(|m| m.remove("version"));
        std::fs::write(&manifest, unversioned.to_string()).expect("an unversioned manifest");
        let err = store.latest(&plan("plan")).expect_err("another layout");
        assert!(err.message.contains("format version 0"), "{}", err.message);
        let old = text.replace(&format!(",\"key_hash\":\"{}\"", crate::KEY_HASH), "");
        assert_ne!(old, text, "the manifest names its key hash");
        std::fs::write(&manifest, old).expect("an older manifest");
        let err = store.latest(&plan("plan")).expect_err("another key hash");
        assert!(err.message.contains("key groups by DataFusion's ahash"), "{}", err.message);
        std::fs::write(&manifest, text).expect("manifest back");

        // Retention keeps the newest complete ones; clear removes everything.
        store.write(4, &plan("plan"), &state(b"four")).expect("write 4");
        store.prune(1, &[]).expect("prune");
        assert!(!dir.join("chk-0000000001").exists() && dir.join("chk-0000000004").exists());
        store.clear().expect("clear");
        assert!(store.latest(&plan("plan")).expect("cleared").is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A worker's task restores the checkpoint its Kafka commit names, which may be older than
    /// one its dead predecessor completed: the new owner writes that number again, replacing
    /// it; the predecessor, fenced, can complete no checkpoint, that one or any other.
    #[test]
    fn the_owner_replaces_a_checkpoint_an_earlier_instance_completed_and_the_earlier_one_is_fenced() {
        let dir = scratch();
        let storage: Arc<dyn weir_storage::Storage> = Arc::new(weir_storage::LocalDir::new(&dir));
        let old = Checkpoints::new(storage.clone());
        old.claim().expect("claim");
        old.write(1, &plan("plan"), &state(b"old 1")).expect("write 1");
        old.write(2, &plan("plan"), &state(b"old 2")).expect("write 2");
        std::thread::sleep(Duration::from_millis(2));
        let new = Checkpoints::new(storage.clone());
        new.claim().expect("claim");
        new.write(2, &plan("plan"), &state(b"new 2")).expect("the owner replaces checkpoint 2");
        let restored = new.latest(&plan("plan")).expect("latest").expect("a checkpoint");
        assert_eq!((restored.epoch, restored.tasks["stage0-task0"].source.clone()), (2, Some(b"new 2".to_vec())));
        for epoch in [2, 3] {
            let err = old.write(epoch, &plan("plan"), &state(b"zombie")).expect_err("fenced");
            assert_eq!(err.kind, weir_core::ErrorKind::Fenced, "{}", err.message);
        }
        let restored = new.latest(&plan("plan")).expect("latest").expect("a checkpoint");
        assert_eq!(restored.tasks["stage0-task0"].source, Some(b"new 2".to_vec()), "the zombie changed nothing");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A task that ended uploads its final state's files while a checkpoint is in flight;
    /// that checkpoint's pruning must keep them though no manifest lists them yet (the final
    /// checkpoint will). They were deleted, and the final checkpoint could not be restored.
    #[test]
    fn pruning_keeps_the_files_of_tasks_that_have_ended() {
        let dir = scratch();
        let store = Checkpoints::new(Arc::new(weir_storage::LocalDir::new(&dir)));
        let shared = dir.join("shared");
        std::fs::create_dir_all(&shared).expect("shared dir");
        std::fs::write(shared.join("a.sst"), b"a").expect("a");
        store.write(1, &plan("plan"), &with_files(&["a.sst"])).expect("write 1");
        // The ended task's final file, copied while checkpoint 2 is being written.
        std::fs::write(shared.join("final.sst"), b"f").expect("final");
        store.write(2, &plan("plan"), &with_files(&["a.sst"])).expect("write 2");
        // Older than the newest manifest, whatever the clock's resolution.
        let older = std::time::SystemTime::now() - Duration::from_secs(60);
        for f in ["a.sst", "final.sst"] {
            let file = std::fs::File::options().write(true).open(shared.join(f)).expect("open");
            file.set_modified(older).expect("set mtime");
        }
        store.prune(3, &["final.sst".to_string()]).expect("prune");
        assert!(shared.join("final.sst").exists(), "an ended task's file was pruned");
        store.prune(3, &[]).expect("prune");
        assert!(!shared.join("final.sst").exists() && shared.join("a.sst").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Pruning takes the shared files a manifest lists from memory when this instance wrote
    /// it, and from the manifest when another did (a restarted job prunes its predecessor's
    /// checkpoints): either way a listed file stays and an unlisted old one goes.
    #[test]
    fn pruning_keeps_the_files_of_manifests_another_instance_wrote() {
        let dir = scratch();
        let shared = dir.join("shared");
        std::fs::create_dir_all(&shared).expect("shared dir");
        let older = std::time::SystemTime::now() - Duration::from_secs(60);
        for f in ["a.sst", "stray.sst"] {
            std::fs::write(shared.join(f), b"x").expect("file");
            let file = std::fs::File::options().write(true).open(shared.join(f)).expect("open");
            file.set_modified(older).expect("mtime");
        }
        let first = Checkpoints::new(Arc::new(weir_storage::LocalDir::new(&dir)));
        first.write(1, &plan("plan"), &with_files(&["a.sst"])).expect("write 1");
        first.write(2, &plan("plan"), &with_files(&["a.sst"])).expect("write 2");
        let second = Checkpoints::new(Arc::new(weir_storage::LocalDir::new(&dir)));
        second.prune(3, &[]).expect("prune");
        assert!(shared.join("a.sst").exists(), "a file the earlier instance's manifests list was deleted");
        assert!(!shared.join("stray.sst").exists(), "a file no manifest lists was kept");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `weir upgrade --check` looks at the checkpoint a restore would take: past a damaged
    /// newest manifest, and never at an unfinished one.
    #[test]
    fn the_upgrade_check_takes_the_checkpoint_a_restore_would() {
        let dir = scratch();
        let store = Checkpoints::new(Arc::new(weir_storage::LocalDir::new(&dir)));
        assert!(store.check(&plan("p")).expect("check").is_none(), "no checkpoint yet");
        store.write(1, &plan("p"), &state(b"one")).expect("write 1");
        store.write(2, &plan("p"), &state(b"two")).expect("write 2");
        std::fs::write(dir.join("chk-0000000002").join(MANIFEST), b"{ damaged").expect("damage");
        std::fs::create_dir_all(dir.join("chk-0000000003")).expect("unfinished");
        let (epoch, up) = store.check(&plan("p")).expect("check").expect("a checkpoint");
        assert_eq!((epoch, up.refusal()), (1, None));
        let err = store.check(&plan("other")).expect_err("another layout");
        assert!(err.message.contains("laid out for p"), "{}", err.message);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// With one checkpoint retained, the shared files only older ones used are deleted too
    /// (they were kept forever: a bucket that only grew).
    #[test]
    fn pruning_with_one_checkpoint_retained_deletes_the_files_only_older_ones_used() {
        let dir = scratch();
        let store = Checkpoints::new(Arc::new(weir_storage::LocalDir::new(&dir)));
        let shared = dir.join("shared");
        std::fs::create_dir_all(&shared).expect("shared dir");
        let older = std::time::SystemTime::now() - Duration::from_secs(60);
        for f in ["old.sst", "both.sst"] {
            std::fs::write(shared.join(f), b"x").expect("file");
            std::fs::File::options()
                .write(true)
                .open(shared.join(f))
                .expect("open")
                .set_modified(older)
                .expect("mtime");
        }
        store.write(1, &plan("plan"), &with_files(&["old.sst", "both.sst"])).expect("write 1");
        store.prune(1, &[]).expect("prune");
        assert!(shared.join("old.sst").exists(), "one checkpoint: nothing to compare with yet");
        std::thread::sleep(Duration::from_millis(20));
        store.write(2, &plan("plan"), &with_files(&["both.sst"])).expect("write 2");
        store.prune(1, &[]).expect("prune");
        assert!(!dir.join("chk-0000000001").exists(), "checkpoint 1 is not retained");
        assert!(!shared.join("old.sst").exists(), "a file only checkpoint 1 used was kept");
        assert!(shared.join("both.sst").exists(), "a file checkpoint 2 uses was deleted");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

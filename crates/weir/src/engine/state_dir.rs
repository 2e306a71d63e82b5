//! Where each job keeps its local RocksDB state: a directory of its own under `state.dir`,
//! and those of processes that are gone cleaned away.

use super::State;

/// The options of the session's next job, named `name`: its RocksDB state in a directory of
/// its own (`<job>-<pid>-<n>`, `n` counted in the process), apart from every other job's, of
/// any engine or process (two processes' queries once opened the same one).
pub(super) fn job_options(state: &State, name: &str) -> weir_runtime::JobOptions {
    static STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut options = state.settings.job_options();
    if let Some(root) = options.rocksdb.take() {
        remove_dead_state(&root);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        options.rocksdb = Some(root.join(format!("{name}-{}-{n}", std::process::id())));
    }
    options
}

/// Delete the local RocksDB copies (`<job>-<pid>-<n>` in the state directory) of processes
/// that are gone: a killed process leaves them behind, and they are scratch (the
/// checkpoints hold the state). Only where `/proc` tells which processes live.
fn remove_dead_state(root: &std::path::Path) {
    if !std::path::Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(root) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let mut parts = name.rsplit('-');
        let (Some(_n), Some(pid)) = (parts.next(), parts.next()) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

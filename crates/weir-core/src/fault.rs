//! Fault injection for tests that kill processes at chosen moments: with
//! `WEIR_FAULT_<NAME>_MS` set, [`pause`] marks the moment (a file named `<name>` in
//! `WEIR_FAULT_DIR`, if set, while it lasts) and waits that long, so that a test can see the
//! process in that phase and kill it there. Without the variables it does nothing.
//!
//! The moments: `manifest` (a checkpoint's state written, its manifest not yet), `upload`
//! (RocksDB files of a checkpoint not yet copied, the job going on), and each sink's
//! `<kind>_commit` / `<kind>_restore` (from `two_phase`) and its own (`kafka_begin`,
//! `postgres_committed`, `worker_commit`…). Tests wait for the marker file, so a kill lands in
//! the phase every time the phase is reached, whatever the machine's speed.

/// Pause at the named moment if the environment asks for it.
pub fn pause(name: &str) {
    let Some(ms) =
        std::env::var(format!("WEIR_FAULT_{}_MS", name.to_uppercase())).ok().and_then(|v| v.parse::<u64>().ok())
    else {
        return;
    };
    let marker = std::env::var_os("WEIR_FAULT_DIR").map(|d| std::path::PathBuf::from(d).join(name));
    if let Some(m) = &marker {
        let _ = std::fs::write(m, std::process::id().to_string());
    }
    std::thread::sleep(std::time::Duration::from_millis(ms));
    if let Some(m) = &marker {
        let _ = std::fs::remove_file(m);
    }
}

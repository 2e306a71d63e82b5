//! Weir's integration tests: one binary (links once), one module per concern.

mod crash;
mod parallel;
mod quickstart;
mod repl;
mod restart;
mod slt;
mod stop;
mod windows;

use std::path::PathBuf;

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

/// The `weir` binary built for these tests.
pub fn weir_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_weir"))
}

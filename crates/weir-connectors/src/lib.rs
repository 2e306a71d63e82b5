//! Weir's connectors: the sources and sinks that a table's `'connector'` option names.
//!
//! | connector | source | sink |
//! |---|---|---|
//! | `filesystem` (`format` = `csv`, `json`, `parquet`) | yes | yes |
//! | `kafka` (`format` = `json`, `csv`, `raw`) | yes | yes (exactly-once, at-least-once, none) |
//! | `jdbc` (PostgreSQL; upserts by `PRIMARY KEY`) | | yes (exactly-once by prepared transactions, at-least-once, none) |
//! | `print` | | yes |
//! | `blackhole` | | yes |
//! | `nexmark` (`table` = `bid`, `auction`, `person`) | yes | |
//! | `datagen` (Flink's options; deterministic, rewindable) | yes | |

mod blackhole;
#[cfg(any(test, feature = "contract-tests"))]
pub mod committer_contract;
mod datagen;
mod delivery;
mod filesystem;
mod format;
mod generator;
mod iceberg;
pub mod jdbc;
pub mod kafka;
mod nexmark;
mod print;
mod registry;

pub use format::{Format, ParsePolicy, Portion};
pub use print::format_rows;
pub use registry::Connectors;

/// Rows per batch a source produces.
pub const DEFAULT_BATCH_SIZE: usize = 8192;

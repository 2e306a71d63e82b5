//! Weir's connectors: the sources and sinks that a table's `'connector'` option names.
//!
//! | connector | source | sink |
//! |---|---|---|
//! | `filesystem` (`format` = `csv`, `json`, `parquet`) | yes | yes |
//! | `print` | | yes |
//! | `blackhole` | | yes |

mod blackhole;
mod filesystem;
mod format;
mod print;
mod registry;

pub use format::{Format, ParsePolicy};
pub use registry::Connectors;

/// Rows per batch a source produces.
pub const DEFAULT_BATCH_SIZE: usize = 8192;

//! Weir embedded: run continuous SQL over streams from a Rust program.
//!
//! ```no_run
//! # async fn demo() -> weir::Result<()> {
//! use futures::StreamExt;
//!
//! let engine = weir::Engine::new();
//! engine.execute_all("CREATE TABLE bids (auction BIGINT, price BIGINT) \
//!     WITH ('connector' = 'filesystem', 'path' = 'bids.csv', 'format' = 'csv')").await?;
//! let mut rows = engine.query("SELECT auction, price * 2 AS doubled FROM bids WHERE price > 10").await?;
//! // Changelog chunks: an Arrow batch and each row's op (+I, -U, +U, -D). `collect()`
//! // instead gives the rows the changelog leaves once a bounded query ends.
//! while let Some(chunk) = rows.next().await {
//!     println!("{} rows", chunk?.num_rows());
//! }
//! # Ok(()) }
//! ```

mod determinism;
mod engine;
pub mod guarantees;
mod query;
pub mod scratch;
mod settings;

pub use engine::{Engine, JobUpgrade, Outcome, PlannedInsert, PreparedJob};
pub use query::QueryStream;
pub use weir_core::{display_options, Changelog, Chunk, ErrorKind, Location, Materialized, Op, Result, WeirError};
pub use weir_runtime::{JobHandle, JobState, JobStatus, CHANNEL_CAPACITY};
pub use weir_sql::parser::ends_statement;
pub use weir_sql::ParsedStatement;
/// Whether a location names an object store rather than a local path.
pub use weir_storage::is_remote as storage_is_remote;
/// The web endpoint's pieces, for programs that show jobs of their own on it.
pub use weir_web as web;

/// What an embedding program implements to bring its own connectors
/// ([`Engine::with_connectors`]), and the built-in ones to fall back on.
pub mod connector {
    pub use weir_connectors::Connectors;
    pub use weir_core::{ConnectorFactory, Options, Sink, SinkGuarantee, Source, Split, TableDef};
}

/// The arrow crate Weir's batches come from.
pub use datafusion::arrow;

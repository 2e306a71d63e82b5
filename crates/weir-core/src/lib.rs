//! Weir's stream data model.
//!
//! Every edge of a Weir dataflow carries [`Message`]s in order: changelog [`Chunk`]s of Arrow
//! data, event-time [`Watermark`]s, checkpoint [`Barrier`]s and a final `End`. Operators,
//! sources and sinks are driven by these messages; a bounded source is simply a stream that
//! ends. This crate holds that model, the [`WeirError`] type every crate returns, and the
//! [`Source`], [`Operator`] and [`Sink`] traits that connectors and the runtime meet on.

pub mod changelog;
pub mod chunk;
pub mod civil;
pub mod error;
pub mod fault;
pub mod message;
pub mod metrics;
mod pretty;
mod sql_type;
pub mod table;
pub mod traits;
pub mod two_phase;

pub use changelog::{Changelog, Materialized};
pub use chunk::{Chunk, Op};
pub use error::{ErrorKind, Location, Result, WeirError};
pub use message::{Barrier, BarrierKind, Message, Watermark};
pub use metrics::OperatorMetrics;
pub use sql_type::sql_type_name;
pub use table::{
    is_relative_path, is_secret_option, mask_secrets, parse_duration, ComputedColumn, Options, TableDef, WatermarkDef,
    LATE_DATA_TABLE,
};
pub use traits::{
    single_state, ConnectorFactory, Delivered, Lookup, LookupFactory, Operator, OperatorSnapshot, Sink, SinkGuarantee,
    SnapshotUpload, Source, Split,
};

/// Re-exported so that every Weir crate names the one arrow that DataFusion uses.
pub use datafusion::arrow;

/// How Weir shows values everywhere (console, print sink, test results): NULL as `NULL`,
/// timestamps and dates in SQL style (`2023-01-01 00:00:01.5`), not ISO 8601 with a `T`.
pub fn display_options() -> datafusion::arrow::util::display::FormatOptions<'static> {
    datafusion::arrow::util::display::FormatOptions::default()
        .with_null("NULL")
        .with_timestamp_format(Some("%Y-%m-%d %H:%M:%S%.f"))
        .with_timestamp_tz_format(Some("%Y-%m-%d %H:%M:%S%.f %Z"))
}

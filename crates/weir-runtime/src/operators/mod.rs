//! Operators. Each works on whole batches with DataFusion physical expressions and
//! Arrow kernels; nothing here touches a single row.

mod aggregates;
mod current_watermark;
mod filter;
mod first_row;
mod group_aggregate;
mod join;
mod limit;
mod processing_time;
mod project;
mod session;
mod state;
mod temporal_join;
mod time_sort;
mod top_n;
mod unnest;
mod upsert;
mod upsert_materialize;
mod watermark;
mod window;
mod window_aggregate;
mod window_join;
mod window_rank;

pub use aggregates::{AggKind, AggregateDef, Lane};
pub use current_watermark::AppendWatermark;
pub use filter::Filter;
pub use first_row::FirstRow;
pub use group_aggregate::{GroupAggregate, GroupSpec};
pub use join::{Interval, JoinKind, JoinSpec, StreamJoin};
pub use limit::Limit;
pub use processing_time::ProcessingTimeWatermark;
pub use project::{Project, Select};
pub use session::{SessionAggregate, SessionSpec};
pub use state::StateContext;
pub use temporal_join::{LookupJoin, TableLookupJoin, VersionedJoin};
pub use time_sort::{TimeSort, TimeSortSpec};
pub use top_n::{RankKind, TopN, TopNSpec};
pub use unnest::{Unnest, UnnestSpec};
pub use upsert::{UpsertNormalize, UpsertSpec};
pub use upsert_materialize::{MaterializeSpec, UpsertMaterialize};
pub use watermark::WatermarkGenerator;
pub use window::{millis, LateOutput, WindowAssign, WindowKind, WindowSpec};
pub use window_aggregate::WindowAggregate;
pub use window_join::WindowJoin;
pub use window_rank::WindowTopN;

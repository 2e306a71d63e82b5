//! Weir's SQL front end: Flink-dialect statements ([`parser`]), the [`Catalog`] of tables and
//! views, and the [`Planner`] that turns a query into a streaming operator graph
//! ([`weir_runtime::StreamPlan`]) through DataFusion's logical planner.

pub mod catalog;
mod collections;
pub mod date_format;
pub mod flink_functions;
pub mod hints;
pub mod json_functions;
pub mod legacy_windows;
pub mod parser;
pub mod planner;
mod select_walk;
mod statement_set;
pub mod temporal;
pub mod time_functions;
pub mod types;
mod unnest;
pub mod windows;

pub use catalog::Catalog;
pub use parser::{parse_script, AlterTable, ObjectKind, ParsedStatement, Statement};
pub use planner::Planner;

//! Weir's SQL front end: Flink-dialect statements ([`parser`]), the [`Catalog`] of tables and
//! views, and the [`Planner`] that turns a query into a streaming operator graph
//! ([`weir_runtime::StreamPlan`]) through DataFusion's logical planner.

pub mod catalog;
mod collections;
pub mod date_format;
pub mod flink_functions;
pub mod hints;
pub mod json_aggregates;
pub mod json_construct;
pub mod json_functions;
pub mod legacy_windows;
pub mod match_recognize;
mod moments;
mod named_args;
pub mod parser;
pub mod planner;
mod predicates;
mod regexp_extract;
mod select_walk;
mod set_ops;
mod statement_set;
pub mod temporal;
mod text_functions;
pub mod time_functions;
pub mod types;
mod udf;
mod unnest;
mod value_functions;
pub mod windows;

pub use catalog::Catalog;
pub use parser::{parse_script, AlterTable, ObjectKind, ParsedStatement, Statement};
pub use planner::Planner;

//! Stateless operators. Each works on whole batches with DataFusion physical expressions and
//! Arrow kernels; nothing here touches a single row.

mod filter;
mod limit;
mod project;
mod watermark;
mod window;
mod window_rocks;

pub use filter::Filter;
pub use limit::Limit;
pub use project::{Project, Select};
pub use watermark::WatermarkGenerator;
pub use window::{millis, WindowAggregate, WindowAssign, WindowKind, WindowSpec};
pub use window_rocks::{RocksWindowAggregate, StateDirs};

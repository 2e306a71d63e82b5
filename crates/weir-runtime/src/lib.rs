//! Weir's streaming runtime.
//!
//! A [`StreamPlan`] (built by the planner) is a tree of nodes ending in a sink. The runtime
//! turns it into tasks: each source with the chain of single-input operators above it runs as
//! one task (operators are fused, no channel hop between them); a union merges its inputs'
//! channels in its own task; the sink runs in the last task. Bounded channels between tasks
//! give backpressure. Every edge carries [`weir_core::Message`]s in order.

pub mod checkpoint;
mod exchange;
pub mod identity;
mod job;
mod key_hash;
mod merge;
pub mod operators;
mod plan;
mod shared_scan;
mod state_shape;
mod unique_keys;
pub mod upgrade;
mod values;

#[cfg(test)]
mod bag_tests;
#[cfg(test)]
mod changelog_tests;
#[cfg(test)]
mod join_tests;
#[cfg(test)]
mod match_tests;
#[cfg(test)]
mod materialize_tests;
#[cfg(test)]
mod over_tests;
#[cfg(test)]
mod runtime_tests;
#[cfg(test)]
mod semi_join_tests;
#[cfg(test)]
mod sort_tests;

pub use exchange::{check_keyed_inputs, hash_partition, Partitioning};
pub use job::{
    identities, sink_task_kind, spawn_job, Edge, JobException, JobGraph, JobHandle, JobOptions, JobState, JobStatus,
    SinkSpec, Vertex,
};
pub use key_hash::KEY_HASH;
pub use merge::InputMerger;
pub use plan::{LookupOf, Node, OperatorSpec, SinkTarget, StreamPlan};
pub use shared_scan::{share_scans, SharedScan};
pub use values::ValuesSource;
pub use weir_state::KeyGroups;

/// Messages buffered on each edge between tasks. Small, so memory stays bounded and a slow
/// sink slows its sources down.
pub const CHANNEL_CAPACITY: usize = 16;

//! What flows on every edge, in order.

use crate::Chunk;

/// Event time in milliseconds since the Unix epoch, Flink's watermark precision.
/// A watermark `w` promises that no later row has an event time `<= w`... except late ones,
/// which operators drop or divert by their policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Watermark(pub i64);

impl Watermark {
    /// Sent when a bounded input ends so that every pending window fires.
    pub const END_OF_TIME: Watermark = Watermark(i64::MAX);
    pub const MIN: Watermark = Watermark(i64::MIN);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierKind {
    /// Snapshot state and go on.
    Checkpoint,
    /// Snapshot state, then stop: the job resumes exactly here next time.
    StopWithCheckpoint,
}

/// Checkpoint barrier `epoch`, injected at every source task by the coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    pub epoch: u64,
    pub kind: BarrierKind,
}

#[derive(Debug, Clone)]
pub enum Message {
    Chunk(Chunk),
    Watermark(Watermark),
    Barrier(Barrier),
    /// This input has had no data for its idle timeout: until its next chunk or watermark it
    /// does not hold back the watermark of operators that merge it with other inputs.
    Idle,
    /// The input has ended; nothing follows on this edge.
    End,
}

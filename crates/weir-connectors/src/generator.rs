//! What the generating sources (`nexmark`, `datagen`) share: which blocks of the one global
//! row sequence a task generates, pacing by wall-clock time, and the position that makes them
//! rewindable, at the same or another parallelism.
//!
//! Row `n`'s values are pure functions of (seed, `n`, field) ([`mix`]), so the rows are the
//! same whatever the parallelism and however often a block is generated again. Blocks are
//! dealt round robin: task `i` of `count` generates blocks `i`, `i + count`, …

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, StringArray};
use datafusion::arrow::buffer::{Buffer, OffsetBuffer};
use weir_core::{Result, Split, WeirError};

/// splitmix64's finalizer: a well-mixed 64-bit hash.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The blocks one source task has still to generate.
pub(crate) struct Blocks {
    split: Split,
    /// Blocks to generate before `next_block`: left by the tasks of an earlier run at another
    /// parallelism (ascending).
    pending: VecDeque<u64>,
    /// The next of this task's blocks: `split.index`, then every `split.count`-th.
    next_block: u64,
    /// Rows per second for this task, if paced.
    rate: Option<f64>,
    started: Option<Instant>,
    generated: u64,
    /// Replaying: `pending` holds the blocks of this task's share that the run being
    /// replayed had generated, and nothing follows them.
    replaying: bool,
}

impl Blocks {
    /// `rate`: rows per second of the whole table, shared by its tasks.
    pub(crate) fn new(split: Split, rate: Option<u64>) -> Self {
        Self {
            split,
            pending: VecDeque::new(),
            next_block: split.index as u64,
            rate: rate.map(|r| r as f64 / split.count as f64),
            started: None,
            generated: 0,
            replaying: false,
        }
    }

    /// The next block to generate, `None` past the end (`past_end(block)`); it waits first
    /// until the pace allows it. Cancel-safe: nothing changes before the wait is over.
    pub(crate) async fn next(&mut self, past_end: impl Fn(u64) -> bool) -> Option<u64> {
        while self.pending.front().is_some_and(|b| past_end(*b)) {
            self.pending.pop_front();
        }
        if self.replaying && self.pending.is_empty() {
            return None;
        }
        let block = self.pending.front().copied().unwrap_or(self.next_block);
        if past_end(block) {
            return None;
        }
        if let Some(rate) = self.rate {
            // Pace by wall-clock time; the values do not depend on it.
            let started = *self.started.get_or_insert_with(Instant::now);
            let due = started + Duration::from_secs_f64(self.generated as f64 / rate);
            tokio::time::sleep_until(due.into()).await;
        }
        if self.pending.pop_front().is_none() {
            self.next_block += self.split.count as u64;
        }
        Some(block)
    }

    /// `rows` were generated: the pace counts them.
    pub(crate) fn generated(&mut self, rows: u64) {
        self.generated += rows;
    }

    /// The blocks this task has still to generate: `pending`, then every `step`-th from
    /// `from`.
    pub(crate) fn position(&self) -> Vec<u8> {
        let json = serde_json::json!({
            "pending": self.pending.iter().collect::<Vec<_>>(),
            "from": self.next_block,
            "step": self.split.count,
        });
        json.to_string().into_bytes()
    }

    pub(crate) fn seek(&mut self, position: &[u8]) -> Result<()> {
        let (pending, from, step) = unread(position)?;
        if step != self.split.count as u64 || from % step != self.split.index as u64 % step {
            return Err(WeirError::internal("a generator position of another task"));
        }
        self.pending = pending.into();
        self.next_block = from;
        Ok(())
    }

    /// Every block no earlier task generated, split anew: the blocks below the highest
    /// frontier that some task had still to generate are listed, and from there on every
    /// block is left, so this task takes its share of both.
    pub(crate) fn seek_rescaled(&mut self, positions: &[&[u8]]) -> Result<()> {
        let (left, frontier) = left_by(positions)?;
        let (index, count) = (self.split.index as u64, self.split.count as u64);
        self.replaying = false;
        self.pending = left.into_iter().filter(|b| b % count == index).collect();
        self.next_block = frontier + (index + count - frontier % count) % count;
        Ok(())
    }

    /// Replay: this task's share of the blocks the earlier tasks at `positions` generated,
    /// and nothing after them.
    pub(crate) fn replay_to(&mut self, positions: &[&[u8]]) -> Result<()> {
        let (left, frontier) = left_by(positions)?;
        let (index, count) = (self.split.index as u64, self.split.count as u64);
        let left: std::collections::BTreeSet<u64> = left.into_iter().collect();
        self.pending = (index..frontier).step_by(count as usize).filter(|b| !left.contains(b)).collect();
        self.replaying = true;
        Ok(())
    }

    pub(crate) fn replayed(&self) -> bool {
        !self.replaying || self.pending.is_empty()
    }
}

/// The blocks no task at `positions` generated below the highest frontier among them
/// (ascending), and that frontier: every block from it on is left too.
fn left_by(positions: &[&[u8]]) -> Result<(Vec<u64>, u64)> {
    let tasks = positions.iter().map(|p| unread(p)).collect::<Result<Vec<_>>>()?;
    let frontier = tasks.iter().map(|(_, from, _)| *from).max().unwrap_or(0);
    let mut left: Vec<u64> = Vec::new();
    for (pending, from, step) in &tasks {
        left.extend(pending.iter().copied().filter(|b| *b < frontier));
        left.extend((*from..frontier).step_by(*step as usize));
    }
    left.sort_unstable();
    left.dedup();
    Ok((left, frontier))
}

/// The `Source` methods of a generator whose `blocks` field is its [`Blocks`]: cancel-safe
/// (paced by a sleep before anything is generated, so a read dropped while it waits loses
/// nothing), and rewound by its blocks.
macro_rules! rewind_by_blocks {
    () => {
        fn cancel_safe(&self) -> bool {
            true
        }

        fn position(&self) -> Option<Vec<u8>> {
            Some(self.blocks.position())
        }

        fn seek(&mut self, position: &[u8]) -> weir_core::Result<()> {
            self.blocks.seek(position)
        }

        fn seek_rescaled(&mut self, positions: &[&[u8]]) -> weir_core::Result<()> {
            self.blocks.seek_rescaled(positions)
        }

        fn replay_to(&mut self, positions: &[&[u8]]) -> weir_core::Result<()> {
            self.blocks.replay_to(positions)
        }

        fn replayed(&self) -> bool {
            self.blocks.replayed()
        }
    };
}
pub(crate) use rewind_by_blocks;

/// A task's position: its pending blocks, its frontier and its step.
fn unread(position: &[u8]) -> Result<(Vec<u64>, u64, u64)> {
    let damaged = || WeirError::internal("a generator position in a checkpoint is damaged");
    let v: serde_json::Value = serde_json::from_slice(position).map_err(|_| damaged())?;
    let pending = v["pending"]
        .as_array()
        .ok_or_else(damaged)?
        .iter()
        .map(|b| b.as_u64().ok_or_else(damaged))
        .collect::<Result<_>>()?;
    let from = v["from"].as_u64().ok_or_else(damaged)?;
    let step = v["step"].as_u64().filter(|s| *s > 0).ok_or_else(damaged)?;
    Ok((pending, from, step))
}

/// A string column built in one buffer: no allocation per value.
pub(crate) fn strings(ns: &[u64], mut write: impl FnMut(u64, &mut Vec<u8>)) -> ArrayRef {
    let mut values = Vec::with_capacity(ns.len() * 16);
    let mut offsets: Vec<i32> = Vec::with_capacity(ns.len() + 1);
    offsets.push(0);
    for &n in ns {
        write(n, &mut values);
        offsets.push(values.len() as i32);
    }
    // Every byte the generators write is ASCII, so the values are valid UTF-8.
    let offsets = OffsetBuffer::new(offsets.into());
    match StringArray::try_new(offsets, Buffer::from_vec(values), None) {
        Ok(a) => Arc::new(a),
        Err(_) => Arc::new(StringArray::from(vec![None::<&str>; ns.len()])),
    }
}

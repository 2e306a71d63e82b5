//! The chains one source task feeds.
//!
//! A job of one INSERT has one chain above each source task. In a statement set, the INSERTs
//! that read the same table through the same scan share it: the source is read once and each
//! message goes to every INSERT's chain, fused in the same task (no channel, no copy: a chunk's
//! columns are shared). Each chain keeps its own checkpoint key, as if it were a task of its
//! own, so a chain's state and acknowledgements do not depend on the others.

use weir_core::{Message, Result};

use super::*;

pub(super) struct Branches {
    /// The chains still running, in the order of the job's INSERTs.
    live: Vec<Chain>,
}

impl Branches {
    pub(super) fn new(chains: Vec<Chain>) -> Self {
        Self { live: chains }
    }

    /// Every chain's operators, to tell them the source's partitions.
    pub(super) fn chains_mut(&mut self) -> impl Iterator<Item = &mut Chain> {
        self.live.iter_mut()
    }

    /// Push `msg` through every chain. A chain that has ended (a satisfied `LIMIT`, or its
    /// downstream gone) acknowledges its final state and leaves; `false` once none is left.
    pub(super) async fn push(&mut self, msg: Message) -> Result<bool> {
        let mut i = 0;
        while i < self.live.len() {
            // A clone shares the chunk's columns.
            let more = self.live[i].push(msg.clone()).await?;
            i = self.keep_or_finish(i, more).await?;
        }
        Ok(!self.live.is_empty())
    }

    /// The earliest timer any chain wants called.
    pub(super) fn next_timer(&self) -> Option<tokio::time::Instant> {
        self.live.iter().filter_map(Chain::next_timer).min()
    }

    /// Call the timers that are due, in every chain; `false` once no chain is left.
    pub(super) async fn on_timer(&mut self) -> Result<bool> {
        let mut i = 0;
        while i < self.live.len() {
            let more = self.live[i].on_timer().await?;
            i = self.keep_or_finish(i, more).await?;
        }
        Ok(!self.live.is_empty())
    }

    /// The source's position, for the next acknowledgement of every chain: each chain's
    /// checkpoint can restore the source on its own.
    pub(super) fn set_source_position(&mut self, position: Vec<u8>) {
        for chain in &mut self.live {
            chain.extra.source = Some(position.clone());
        }
    }

    /// The source has ended: every chain's final state stands for every later checkpoint.
    pub(super) async fn finished(&mut self) -> Result<()> {
        for chain in &mut self.live {
            chain.finished().await?;
        }
        Ok(())
    }

    /// The index of the next chain to visit: `i + 1` if chain `i` goes on, else `i` once it
    /// has finished and left.
    async fn keep_or_finish(&mut self, i: usize, more: bool) -> Result<usize> {
        if more {
            return Ok(i + 1);
        }
        let mut done = self.live.remove(i);
        done.finished().await?;
        Ok(i)
    }
}

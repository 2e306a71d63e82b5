//! Two-phase commit with the checkpoints, in one place. A sink that publishes its output only
//! when a checkpoint completes (files renamed into place, Kafka transactions, PostgreSQL
//! prepared transactions) implements [`Committer`]: how to write, pre-commit, commit and
//! recover. [`TwoPhaseCommitSink`] does the rest of the protocol, the same for every one:
//! - the pre-commits waiting for their checkpoint, by checkpoint, and which of them a
//!   completed checkpoint makes due (every one up to it: a checkpoint given up leaves its
//!   pre-commit to the next one that completes);
//! - the state in the checkpoint: the pre-commits and the committer's own recovery data,
//!   typed and versioned, with one error for a damaged or foreign state naming the sink;
//! - the restore, at the same or another parallelism: the pre-commits of the checkpoint
//!   restored, of every earlier task that falls to this one, handed to [`Committer::recover`];
//! - the final pre-commit at the end of the input, and whether it waits for the checkpoint
//!   in flight;
//! - the fault-injection moments tests kill at (`<kind>_commit`, `<kind>_restore`).
//!
//! The model is Arroyo's `TwoPhaseCommitter`.

use std::collections::BTreeMap;
use std::time::Instant;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::{Chunk, Result, Sink, Watermark, WeirError};

/// What a two-phase-commit sink does itself; [`TwoPhaseCommitSink`] drives it.
#[async_trait]
pub trait Committer: Send {
    /// What one checkpoint's pre-commit leaves to publish (file names, a transaction's id).
    /// It goes into the checkpoint: keep its encoding, or bump [`Committer::VERSION`].
    type PreCommit: Serialize + DeserializeOwned + Send + Sync;
    /// What the task keeps beside its pre-commits for a restore (the Kafka sink's next
    /// transaction number). In the checkpoint too.
    type Recovery: Serialize + DeserializeOwned + Send + Sync + Default;
    /// Names the state's format and the fault-injection moments: `file`, `kafka`, `postgres`.
    const KIND: &'static str;
    /// The version of the encodings of `PreCommit` and `Recovery`. A checkpoint of another
    /// version is refused, naming both, rather than misread.
    const VERSION: u32;
    /// The final pre-commit waits for the checkpoint in flight to complete (a database
    /// transaction would wait on the rows the earlier one holds locked).
    const WAITS_FOR_COMMIT: bool = false;
    /// A restore at another parallelism is possible (each earlier task's pre-commits are
    /// recovered by exactly one task of the new run).
    const RESCALES: bool = true;

    /// "the Kafka sink of table 't' (task 0)", for errors.
    fn describe(&self) -> String;

    async fn write(&mut self, chunk: Chunk) -> Result<()>;

    async fn on_watermark(&mut self, _watermark: Watermark) -> Result<()> {
        Ok(())
    }

    /// When [`Committer::on_timer`] is wanted if nothing comes first. `None`: never.
    fn next_timer(&self) -> Option<Instant> {
        None
    }

    async fn on_timer(&mut self) -> Result<()> {
        Ok(())
    }

    /// Barrier `epoch`: make what was written since the last pre-commit durable but not
    /// visible. `None`: nothing to publish for this checkpoint.
    async fn pre_commit(&mut self, epoch: u64) -> Result<Option<Self::PreCommit>>;

    /// The recovery data as of the pre-commit just taken.
    fn recovery(&self) -> Self::Recovery {
        Self::Recovery::default()
    }

    /// Checkpoint `epoch` (or a later one) completed: publish this pre-commit. Called in
    /// checkpoint order, once per pre-commit of this run.
    async fn commit(&mut self, epoch: u64, pre_commit: &Self::PreCommit) -> Result<()>;

    /// At a barrier, pre-commits of earlier checkpoints still wait: those checkpoints were
    /// given up (a sink sees each completion before the next barrier). By default they stay
    /// and are published with the next checkpoint that completes. `true`: this committer
    /// has taken them back (rolled back, their rows written again in the pre-commit that
    /// follows), and they are forgotten.
    async fn given_up(&mut self, _pending: &[(u64, &Self::PreCommit)]) -> Result<bool> {
        Ok(false)
    }

    /// Before any row, after a restart from checkpoint `epoch`: publish the pre-commits of
    /// `earlier` tasks (this task's own, or at another parallelism those that fall to it;
    /// only those of `epoch` and before), and discard whatever attempts after `epoch` left.
    /// Must be idempotent: a restore can be cut short and run again.
    async fn recover(&mut self, epoch: u64, earlier: Vec<Earlier<Self::PreCommit, Self::Recovery>>) -> Result<()>;

    /// The end of the input. Without checkpoints, publish everything; with them the final
    /// checkpoint has.
    async fn finish(&mut self) -> Result<()>;
}

/// What an earlier task left in the checkpoint a run restores.
pub struct Earlier<P, R> {
    pub task: usize,
    pub recovery: R,
    /// By checkpoint, oldest first; only those up to the one restored.
    pub pre_commits: Vec<(u64, P)>,
}

/// The state a [`TwoPhaseCommitSink`] puts in a checkpoint.
#[derive(Serialize, Deserialize)]
struct Encoded<P, R> {
    format: String,
    version: u32,
    recovery: R,
    pending: Vec<EncodedPreCommit<P>>,
}

#[derive(Serialize, Deserialize)]
struct EncodedPreCommit<P> {
    checkpoint: u64,
    pre_commit: P,
}

/// Only the header, read first: a foreign state is named as such, not as damaged.
#[derive(Deserialize)]
struct Header {
    format: Option<String>,
    version: Option<u32>,
}

fn format_name<C: Committer>() -> String {
    format!("weir-{}-sink", C::KIND)
}

/// A [`crate::Sink`] made of a [`Committer`].
pub struct TwoPhaseCommitSink<C: Committer> {
    committer: C,
    /// This task's index: its own state is that of the earlier task of the same index.
    task: usize,
    /// Pre-committed, waiting for a checkpoint up to theirs to complete.
    pending: BTreeMap<u64, C::PreCommit>,
    /// The checkpoint the rows written now belong to: the final pre-commit's.
    next_epoch: u64,
}

impl<C: Committer> TwoPhaseCommitSink<C> {
    pub fn new(committer: C, task: usize) -> Self {
        Self { committer, task, pending: BTreeMap::new(), next_epoch: 1 }
    }

    pub fn committer(&self) -> &C {
        &self.committer
    }

    fn encode(&self) -> Result<Vec<u8>> {
        let encoded = Encoded {
            format: format_name::<C>(),
            version: C::VERSION,
            recovery: self.committer.recovery(),
            pending: self
                .pending
                .iter()
                .map(|(e, p)| EncodedPreCommit { checkpoint: *e, pre_commit: p })
                .collect::<Vec<_>>(),
        };
        serde_json::to_vec(&encoded)
            .map_err(|e| WeirError::internal(format!("encoding the state of {}: {e}", self.committer.describe())))
    }

    /// The state of earlier task `task` in checkpoint `epoch`.
    fn decode(&self, epoch: u64, task: usize, state: Option<&[u8]>) -> Result<Earlier<C::PreCommit, C::Recovery>> {
        let Some(state) = state else {
            return Ok(Earlier { task, recovery: C::Recovery::default(), pre_commits: Vec::new() });
        };
        let whose = || format!("checkpoint {epoch}: the state of {} (from task {task})", self.committer.describe());
        let header: Header =
            serde_json::from_slice(state).map_err(|e| WeirError::internal(format!("{} is damaged: {e}", whose())))?;
        let expected = format_name::<C>();
        match (header.format, header.version) {
            (Some(f), Some(v)) if f == expected && v == C::VERSION => {}
            (Some(f), Some(v)) if f == expected => {
                return Err(WeirError::not_supported(format!(
                    "{} has format version {v}; this Weir reads version {} of '{expected}'",
                    whose(),
                    C::VERSION
                )))
            }
            (f, _) => {
                return Err(WeirError::internal(format!(
                    "{} is not a '{expected}' state (it says {})",
                    whose(),
                    f.map_or("nothing".to_string(), |f| format!("'{f}'"))
                )))
            }
        }
        let decoded: Encoded<C::PreCommit, C::Recovery> =
            serde_json::from_slice(state).map_err(|e| WeirError::internal(format!("{} is damaged: {e}", whose())))?;
        let pre_commits = decoded
            .pending
            .into_iter()
            .filter(|p| p.checkpoint <= epoch)
            .map(|p| (p.checkpoint, p.pre_commit))
            .collect();
        Ok(Earlier { task, recovery: decoded.recovery, pre_commits })
    }

    async fn recover(&mut self, epoch: u64, old: &[(usize, Option<&[u8]>)], rescaled: bool) -> Result<()> {
        if rescaled && !C::RESCALES && old.iter().any(|(_, s)| s.is_some()) {
            return Err(WeirError::not_supported(format!(
                "restoring {} from a checkpoint taken at another parallelism",
                self.committer.describe()
            )));
        }
        let earlier = old.iter().map(|(task, state)| self.decode(epoch, *task, *state)).collect::<Result<Vec<_>>>()?;
        crate::fault::pause(&format!("{}_restore", C::KIND));
        self.committer.recover(epoch, earlier).await?;
        self.pending.clear();
        self.next_epoch = epoch + 1;
        Ok(())
    }
}

#[async_trait]
impl<C: Committer> Sink for TwoPhaseCommitSink<C> {
    async fn write_chunk(&mut self, chunk: Chunk) -> Result<()> {
        self.committer.write(chunk).await
    }

    async fn on_watermark(&mut self, watermark: Watermark) -> Result<()> {
        self.committer.on_watermark(watermark).await
    }

    fn next_timer(&self) -> Option<Instant> {
        self.committer.next_timer()
    }

    async fn on_timer(&mut self) -> Result<()> {
        self.committer.on_timer().await
    }

    async fn pre_commit(&mut self, epoch: u64) -> Result<Option<Vec<u8>>> {
        if !self.pending.is_empty() {
            let given_up: Vec<(u64, &C::PreCommit)> = self.pending.iter().map(|(e, p)| (*e, p)).collect();
            if self.committer.given_up(&given_up).await? {
                self.pending.clear();
            }
        }
        if let Some(p) = self.committer.pre_commit(epoch).await? {
            self.pending.insert(epoch, p);
        }
        self.next_epoch = epoch + 1;
        Ok(Some(self.encode()?))
    }

    fn awaiting_commit(&self) -> Option<u64> {
        match C::WAITS_FOR_COMMIT {
            true => self.pending.keys().next_back().copied(),
            false => None,
        }
    }

    async fn commit(&mut self, epoch: u64) -> Result<()> {
        if self.pending.keys().next().is_some_and(|e| *e <= epoch) {
            crate::fault::pause(&format!("{}_commit", C::KIND));
        }
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() > epoch {
                break;
            }
            self.committer.commit(*entry.key(), entry.get()).await?;
            entry.remove();
        }
        Ok(())
    }

    async fn pre_commit_final(&mut self) -> Result<Option<Vec<u8>>> {
        let epoch = self.next_epoch;
        self.pre_commit(epoch).await
    }

    async fn restore(&mut self, epoch: u64, state: Option<&[u8]>) -> Result<()> {
        let task = self.task;
        self.recover(epoch, &[(task, state)], false).await
    }

    async fn restore_rescaled(&mut self, epoch: u64, old: &[(usize, Option<&[u8]>)]) -> Result<()> {
        self.recover(epoch, old, true).await
    }

    async fn finish(&mut self) -> Result<()> {
        self.committer.finish().await
    }
}

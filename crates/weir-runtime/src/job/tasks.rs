//! The loops of the three kinds of task: a source, a merge of several inputs (union, exchange,
//! join), a sink.

use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use weir_core::{Chunk, Message, OperatorMetrics, Result, Sink, Source, Watermark, WeirError};

use crate::checkpoint::{TaskCheckpoint, TaskState, Trigger};
use crate::merge::InputMerger;

use super::*;

/// What a sink task restores: the pre-commits of the earlier tasks that fall to it.
pub(super) struct SinkRestore {
    pub(super) epoch: u64,
    /// The checkpoint had another number of sink tasks.
    pub(super) rescaled: bool,
    /// Earlier task index and its pre-commit.
    pub(super) old: Vec<(usize, Option<Vec<u8>>)>,
}

impl SinkRestore {
    /// For sink task `index` of `count`: its own state, or at another parallelism those of
    /// every earlier task whose index falls to it (`k % count == index`).
    pub(super) fn new(epoch: u64, restoring: Restoring, index: usize, count: usize) -> Self {
        let (rescaled, old) = match restoring {
            Restoring::Nothing => (false, vec![(index, None)]),
            Restoring::Same(s) => (false, vec![(index, s.sink)]),
            Restoring::Rescaled(old) => {
                (true, old.into_iter().filter(|(k, _)| k % count == index).map(|(k, s)| (k, s.sink)).collect())
            }
        };
        Self { epoch, rescaled, old }
    }
}

/// A source task that replays ([`crate::upgrade`]): the positions it reads again up to, and
/// the count of tasks still replaying, which it takes itself off once it has.
pub(super) struct Replay {
    pub(super) positions: Vec<Vec<u8>>,
    pub(super) left: Arc<watch::Sender<usize>>,
}

pub(super) async fn run_source(
    mut source: Box<dyn Source>,
    metrics: Arc<OperatorMetrics>,
    mut chains: Branches,
    idle_timeout: Option<Duration>,
    checkpoints: Option<(watch::Receiver<Trigger>, watch::Receiver<u64>)>,
    mut replay: Option<Replay>,
) -> Result<()> {
    let (mut trigger, mut committed) = checkpoints.unzip();
    if replay.is_some() && trigger.is_none() {
        return Err(WeirError::internal("a replay in a job without checkpoints"));
    }
    // Caught up with the replay, at the checkpoint's positions: nothing is read until the
    // barrier of the cut-over has gone out before what follows.
    let mut at_cut_over = false;
    // A cancel-safe read is given up when a barrier is asked for while it waits, so that a
    // quiet source still takes part in checkpoints (and exactly-once output is committed).
    let interruptible = source.cancel_safe();
    let mut last_data = tokio::time::Instant::now();
    let mut idle = false;
    let mut sent_watermark = Watermark::MIN;
    let mut lag_sampled: Option<tokio::time::Instant> = None;
    loop {
        if let Some(committed) = &mut committed {
            if committed.has_changed().unwrap_or(false) {
                let n = *committed.borrow_and_update();
                source.checkpoint_complete(n)?;
            }
        }
        // A checkpoint asked for: between two batches, the position is exact.
        if let Some(t) = &mut trigger {
            if t.has_changed().unwrap_or(false) {
                let Trigger { epoch, stop } = *t.borrow_and_update();
                let position = source
                    .position()
                    .ok_or_else(|| WeirError::not_supported("checkpoints of a job with a source that cannot rewind"))?;
                source.checkpoint_taken(epoch);
                chains.set_source_position(position);
                let kind =
                    if stop { weir_core::BarrierKind::StopWithCheckpoint } else { weir_core::BarrierKind::Checkpoint };
                if !chains.push(Message::Barrier(weir_core::Barrier { epoch, kind })).await? {
                    return Ok(());
                }
                at_cut_over = false;
                if stop {
                    // Nothing after the last barrier: wait to be shut down.
                    std::future::pending::<()>().await;
                }
            }
        }
        if replay.as_ref().is_some_and(|_| source.replayed()) {
            end_replay(source.as_mut(), &mut replay)?;
            at_cut_over = true;
        }
        if at_cut_over {
            tokio::select! {
                () = sleep_until(chains.next_timer()) => {
                    if !chains.on_timer().await? {
                        return Ok(());
                    }
                }
                () = changed(trigger.as_ref()) => {}
            }
            continue;
        }
        let next = {
            // Keep the same read going while reporting idleness: dropping a read that is not
            // cancel-safe could lose data.
            let read = source.next_batch();
            tokio::pin!(read);
            loop {
                let idle_at = idle_timeout.filter(|_| !idle).map(|t| last_data + t);
                let timer = chains.next_timer();
                tokio::select! {
                    r = &mut read => break Some(r),
                    () = sleep_until(timer) => {
                        if !chains.on_timer().await? {
                            return Ok(());
                        }
                    }
                    () = sleep_until(idle_at) => {
                        idle = true;
                        if !chains.push(Message::Idle).await? {
                            return Ok(());
                        }
                    }
                    // Seen here without being marked seen: taken at the top of the loop.
                    () = changed(trigger.as_ref()), if interruptible => break None,
                    // A quiet source's lag is sampled too (it reaches 0 once caught up).
                    () = sleep_until(lag_sampled.map(|at| at + Duration::from_secs(1))), if interruptible => break None,
                    () = changed(committed.as_ref()), if interruptible => break None,
                }
            }
        };
        // Partition lag for watchers, about once a second (it takes the client's locks).
        if lag_sampled.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
            lag_sampled = Some(tokio::time::Instant::now());
            let lag = source.partition_lag();
            if let Ok(mut p) = metrics.partitions.lock() {
                *p = lag;
            }
        }
        let Some(next) = next else { continue };
        metrics.records_skipped.store(source.records_skipped(), std::sync::atomic::Ordering::Relaxed);
        match next? {
            Some(batch) => {
                if batch.num_rows() > 0 {
                    last_data = tokio::time::Instant::now();
                    idle = false;
                    metrics.record_out(batch.num_rows());
                    if let Some((done, total)) = source.progress() {
                        metrics.input_done.store(done, std::sync::atomic::Ordering::Relaxed);
                        metrics.input_total.store(total, std::sync::atomic::Ordering::Relaxed);
                    }
                    let chunk = match source.batch_ops() {
                        Some(ops) => Chunk::changes(batch, &ops),
                        None => Chunk::inserts(batch),
                    };
                    let chunk = chunk.from_partition(source.batch_partition());
                    if !chains.push(Message::Chunk(chunk)).await? {
                        return Ok(());
                    }
                }
                if let Some(w) = source.watermark().filter(|w| *w > sent_watermark) {
                    sent_watermark = w;
                    if !chains.push(Message::Watermark(w)).await? {
                        return Ok(());
                    }
                }
            }
            // Nothing more to replay, though not at the bound it was given: what there was
            // has been read again.
            None if replay.is_some() => {
                end_replay(source.as_mut(), &mut replay)?;
                at_cut_over = true;
            }
            None => {
                // A bounded input ended: every pending window may fire.
                if chains.push(Message::Watermark(Watermark::END_OF_TIME)).await? {
                    chains.push(Message::End).await?;
                }
                if let Some(position) = source.position() {
                    chains.set_source_position(position);
                }
                chains.finished().await?;
                return Ok(());
            }
        }
    }
}

/// The replay is over: the source goes on from the checkpoint's positions, and the task is
/// no longer one the cut-over waits for.
fn end_replay(source: &mut dyn Source, replay: &mut Option<Replay>) -> Result<()> {
    let Some(r) = replay.take() else { return Ok(()) };
    let positions: Vec<&[u8]> = r.positions.iter().map(Vec::as_slice).collect();
    source.seek_rescaled(&positions)?;
    r.left.send_modify(|n| *n = n.saturating_sub(1));
    Ok(())
}

/// Sleep until `at`; never without it.
pub(super) async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Until the watched value has a version not yet seen, leaving it unseen (a clone waits, so
/// that the caller's `has_changed` still tells); never without a channel, or once it closed.
pub(super) async fn changed<T>(rx: Option<&watch::Receiver<T>>) {
    let Some(rx) = rx else { return std::future::pending().await };
    let mut probe = rx.clone();
    if probe.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Merge several inputs (a union, parallel tasks feeding one sink, or a join's two inputs)
/// into one chain. Inputs from `left_inputs` on are a join's right input: their chunks go to
/// the first operator as input 1.
pub(super) async fn run_merge(
    mut inputs: Vec<mpsc::Receiver<Message>>,
    mut chain: Chain,
    aligned: bool,
    left_inputs: usize,
) -> Result<()> {
    if inputs.is_empty() {
        // A task no input feeds (a union task beyond its inputs' tasks, as over literal rows):
        // it has nothing to wait for, and ends at once.
        if chain.push_from(Message::End, 0).await? {
            chain.finished().await?;
        }
        return Ok(());
    }
    let mut merger = InputMerger::new(inputs.len()).aligned(aligned);
    let mut next_first = 0;
    // Of each side of a join, the inputs still open.
    let left_inputs = left_inputs.min(inputs.len());
    let mut open = [left_inputs, inputs.len() - left_inputs];
    let mut aligning: Option<std::time::Instant> = None;
    loop {
        // Poll the readable inputs, starting after the last one served so none starves.
        let timer = chain.next_timer();
        let polled = std::future::poll_fn(|cx| {
            let n = inputs.len();
            for k in 0..n {
                let i = (next_first + k) % n;
                if !merger.readable(i) {
                    continue;
                }
                if let Poll::Ready(msg) = inputs[i].poll_recv(cx) {
                    return Poll::Ready((i, msg));
                }
            }
            Poll::Pending
        });
        let (i, msg) = tokio::select! {
            next = polled => next,
            () = sleep_until(timer) => {
                if !chain.on_timer().await? {
                    return Ok(());
                }
                continue;
            }
        };
        next_first = (i + 1) % inputs.len();
        // A closed channel without `End` means that input's task stopped; the supervisor
        // reports its error, if it had one.
        let msg = msg.unwrap_or(Message::End);
        let side = usize::from(i >= left_inputs);
        if matches!(msg, Message::End) && left_inputs < inputs.len() {
            open[side] -= 1;
            if open[side] == 0 && open[1 - side] > 0 && !chain.input_ended(side).await? {
                return Ok(());
            }
        }
        // Alignment: from the first input's barrier to the barrier going on.
        if matches!(msg, Message::Barrier(_)) && aligning.is_none() {
            aligning = Some(std::time::Instant::now());
        }
        let mut out = Vec::new();
        merger.on_message(i, msg, &mut out);
        for msg in out {
            if matches!(msg, Message::Barrier(_)) {
                if let (Some(began), Some(m)) = (aligning.take(), &chain.metrics) {
                    m.alignment_nanos.store(began.elapsed().as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
                }
            }
            let is_end = matches!(msg, Message::End);
            if !chain.push_from(msg, side).await? {
                return Ok(());
            }
            if is_end {
                chain.finished().await?;
                return Ok(());
            }
        }
    }
}

pub(super) async fn run_sink(
    mut input: mpsc::Receiver<Message>,
    mut sink: Box<dyn Sink>,
    metrics: Arc<OperatorMetrics>,
    checkpoint: Option<TaskCheckpoint>,
    restored: Option<SinkRestore>,
    mut committed: Option<watch::Receiver<u64>>,
    mut suppress: bool,
) -> Result<()> {
    let mut suppressed = 0usize;
    if let Some(r) = &restored {
        let old: Vec<(usize, Option<&[u8]>)> = r.old.iter().map(|(i, s)| (*i, s.as_deref())).collect();
        match &old[..] {
            [(_, state)] if !r.rescaled => sink.restore(r.epoch, *state).await?,
            _ => sink.restore_rescaled(r.epoch, &old).await?,
        }
    }
    let mut stopping_at: Option<u64> = None;
    loop {
        let timer = sink.next_timer();
        let msg = tokio::select! {
            // A checkpoint's completion before the next message: a sink sees checkpoint n
            // complete before barrier n + 1 (one checkpoint runs at a time), so what it still
            // holds pre-committed at a barrier belongs to a checkpoint that was given up.
            biased;
            // Checkpoint n complete everywhere: publish what was pre-committed for it.
            Some(n) = async {
                match &mut committed {
                    Some(c) => c.changed().await.ok().map(|_| *c.borrow_and_update()),
                    None => std::future::pending().await,
                }
            } => {
                commit(sink.as_mut(), n, &metrics).await?;
                if stopping_at.is_some_and(|s| n >= s) {
                    // Stopped with a checkpoint: everything before it is published.
                    return Ok(());
                }
                continue;
            }
            msg = input.recv() => msg,
            // A buffer to flush by age while nothing comes.
            () = async move {
                match timer {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            } => {
                sink.on_timer().await?;
                continue;
            }
        };
        let Some(msg) = msg else { break };
        match msg {
            // What a replay yields before the cut-over: the rows of the new SQL over input
            // whose output the sink had from the old one.
            Message::Chunk(chunk) if suppress => suppressed += chunk.num_rows(),
            Message::Watermark(_) if suppress => {}
            Message::Chunk(chunk) => {
                metrics.record_in(chunk.num_rows());
                let began = std::time::Instant::now();
                sink.write_chunk(chunk).await?;
                metrics.add_busy(began);
            }
            Message::Watermark(w) => {
                metrics.watermark.store(w.0, std::sync::atomic::Ordering::Relaxed);
                sink.on_watermark(w).await?;
            }
            Message::Barrier(b) => {
                if suppress {
                    log::info!(
                        "the replay is over at checkpoint {}: {suppressed} rows of it were not written",
                        b.epoch
                    );
                    suppress = false;
                }
                if b.kind == weir_core::BarrierKind::StopWithCheckpoint {
                    stopping_at = Some(b.epoch);
                }
                let state = sink.pre_commit(b.epoch).await?;
                if let Some(cp) = &checkpoint {
                    cp.ack(Some(b.epoch), TaskState { sink: state, ..Default::default() });
                }
            }
            Message::Idle => {}
            Message::End => {
                let (Some(cp), Some(committed)) = (&checkpoint, &mut committed) else {
                    sink.finish().await?;
                    return Ok(());
                };
                // The checkpoint in flight completes (or is given up, after the timeout) first.
                let deadline = tokio::time::Instant::now() + cp.timeout;
                while sink.awaiting_commit().is_some() {
                    if !committed.has_changed().unwrap_or(false) {
                        match tokio::time::timeout_at(deadline, committed.changed()).await {
                            Ok(Ok(())) => {}
                            _ => break,
                        }
                    }
                    let n = *committed.borrow_and_update();
                    commit(sink.as_mut(), n, &metrics).await?;
                }
                let Some(state) = sink.pre_commit_final().await? else {
                    sink.finish().await?;
                    cp.ack(None, TaskState::default());
                    return Ok(());
                };
                // Committed with the final checkpoint, which the coordinator writes once
                // every task has ended (and any still in flight before it); it closes the
                // channel after the final one.
                cp.ack(None, TaskState { sink: Some(state), ..Default::default() });
                let mut last = None;
                while committed.changed().await.is_ok() {
                    let n = *committed.borrow_and_update();
                    commit(sink.as_mut(), n, &metrics).await?;
                    last = Some(n);
                }
                if last.is_none() {
                    return Err(WeirError::external(
                        "the job's final checkpoint was not completed: its last output is not committed",
                    ));
                }
                sink.finish().await?;
                return Ok(());
            }
        }
    }
    Err(WeirError::internal("the sink's input closed before the end of the stream"))
}

/// Publish what `sink` pre-committed for checkpoint `n`, counted for watchers.
async fn commit(sink: &mut dyn Sink, n: u64, metrics: &OperatorMetrics) -> Result<()> {
    let began = std::time::Instant::now();
    sink.commit(n).await?;
    metrics.commits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    metrics.last_commit_nanos.store(began.elapsed().as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

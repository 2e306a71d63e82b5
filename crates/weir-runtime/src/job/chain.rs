//! The fused operators of one task and where their output goes: pushing messages through
//! them, snapshots at barriers, acknowledgements.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;
use weir_core::{Chunk, Message, Operator, OperatorMetrics, Result, WeirError};

use crate::checkpoint::{OperatorState, TaskCheckpoint, TaskState};
use crate::exchange::Partitioning;

/// Where a task's output goes.
pub(super) enum Output {
    /// To the task with the same index in the next stage.
    Forward(mpsc::Sender<Message>),
    /// Spread over the next stage's tasks; `next` is the round-robin turn.
    Exchange {
        senders: Vec<mpsc::Sender<Message>>,
        partitioning: Partitioning,
        next: usize,
        key_groups: weir_state::KeyGroups,
    },
}

/// Fused operators of one task, and the channel(s) after them.
pub(super) struct Chain {
    pub(super) ops: Vec<(Box<dyn Operator>, Arc<OperatorMetrics>)>,
    /// What each operator's state is keyed by in checkpoints: its stable identity.
    pub(super) op_keys: Vec<String>,
    pub(super) output: Output,
    /// This task's part in checkpoints.
    pub(super) checkpoint: Option<TaskCheckpoint>,
    /// State of the task beyond its operators (a source's position), for the next ack.
    pub(super) extra: TaskState,
    /// Where waiting for room in `tx` is counted (the task's first metrics).
    pub(super) metrics: Option<Arc<OperatorMetrics>>,
    /// Per operator: where its late rows go (with barriers and the end, for the late-data
    /// table's sink), if it has a late-data table.
    pub(super) late: Vec<Option<mpsc::Sender<Message>>>,
    /// The last checkpoint's uploads, then its acknowledgement, running off this task.
    /// `true` once the checkpoint's files are in place and it is acknowledged; `false` if an
    /// upload failed and the checkpoint was declined.
    pub(super) acking: Option<tokio::task::JoinHandle<bool>>,
}

impl Chain {
    pub(super) fn with_metrics(mut self, metrics: Arc<OperatorMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Send downstream: rows by the partitioning, everything else to every next task.
    /// `false` when downstream is gone.
    pub(super) async fn send(&mut self, msg: Message) -> Result<bool> {
        let metrics = self.metrics.clone();
        match &mut self.output {
            Output::Forward(tx) => Ok(send_one(tx, msg, &metrics).await),
            Output::Exchange { senders, partitioning, next, key_groups } => {
                let Message::Chunk(chunk) = msg else {
                    let mut any = false;
                    for tx in senders.iter() {
                        any |= send_one(tx, msg.clone(), &metrics).await;
                    }
                    return Ok(any);
                };
                let parts: Vec<Option<Chunk>> = match partitioning {
                    Partitioning::Hash(keys) => {
                        crate::exchange::hash_partition(&chunk, keys, senders.len(), *key_groups)?
                    }
                    Partitioning::Broadcast => senders.iter().map(|_| Some(chunk.clone())).collect(),
                    Partitioning::RoundRobin => {
                        let mut parts: Vec<Option<Chunk>> = senders.iter().map(|_| None).collect();
                        parts[*next % senders.len()] = Some(chunk);
                        *next += 1;
                        parts
                    }
                };
                let mut any = false;
                for (tx, part) in senders.iter().zip(parts) {
                    if let Some(part) = part {
                        any |= send_one(tx, Message::Chunk(part), &metrics).await;
                    } else {
                        any |= !tx.is_closed();
                    }
                }
                Ok(any)
            }
        }
    }

    /// Push `msg` through every operator and send what comes out. `false`: stop this task,
    /// because downstream is gone or an operator (a `LIMIT`) has ended the stream.
    pub(super) async fn push(&mut self, msg: Message) -> Result<bool> {
        self.push_from(msg, 0).await
    }

    /// Every task of input `side` of the first operator (a join) has ended: what it emits
    /// then goes through the operators after it.
    pub(super) async fn input_ended(&mut self, side: usize) -> Result<bool> {
        let mut out = Vec::new();
        if let Some((op, _)) = self.ops.first_mut() {
            op.input_ended(side, &mut out)?;
        }
        for msg in out {
            if !self.push_through(msg, 0, 1).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The earliest time an operator of the chain wants its timer called.
    pub(super) fn next_timer(&self) -> Option<tokio::time::Instant> {
        self.ops.iter().filter_map(|(op, _)| op.next_timer()).min().map(tokio::time::Instant::from_std)
    }

    /// Call the timers that are due; what each operator emits goes through the ones after it.
    pub(super) async fn on_timer(&mut self) -> Result<bool> {
        let now = std::time::Instant::now();
        for i in 0..self.ops.len() {
            if self.ops[i].0.next_timer().is_none_or(|at| at > now) {
                continue;
            }
            let mut out = Vec::new();
            self.ops[i].0.on_timer(&mut out)?;
            for msg in out {
                if !self.push_through(msg, 0, i + 1).await? {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// [`Chain::push`] for a chunk from input `input` of the first operator (a join).
    pub(super) async fn push_from(&mut self, msg: Message, input: usize) -> Result<bool> {
        self.push_through(msg, input, 0).await
    }

    /// Push `msg` through the operators from `first` on.
    async fn push_through(&mut self, msg: Message, input: usize, first: usize) -> Result<bool> {
        if self.acking.as_ref().is_some_and(|a| a.is_finished()) {
            self.acked().await?;
        }
        let mut messages = vec![msg];
        let mut done = false;
        let mut snapshot: Option<(u64, TaskState)> = None;
        let mut uploads: Vec<weir_core::SnapshotUpload> = Vec::new();
        for (i, (op, metrics)) in self.ops.iter_mut().enumerate().skip(first) {
            let mut next = Vec::with_capacity(messages.len());
            for msg in messages {
                // Barriers and the end also go to the late-data table's sink.
                let control = match &msg {
                    Message::Barrier(_) | Message::End => Some(msg.clone()),
                    _ => None,
                };
                match msg {
                    Message::Chunk(c) => {
                        metrics.record_in(c.num_rows());
                        let began = Instant::now();
                        if i == 0 && input > 0 {
                            op.process_input(input, c, &mut next)?;
                        } else {
                            op.process_chunk(c, &mut next)?;
                        }
                        metrics.add_busy(began);
                    }
                    Message::Watermark(w) => {
                        metrics.watermark.store(w.0, std::sync::atomic::Ordering::Relaxed);
                        op.process_watermark(w, &mut next)?;
                    }
                    Message::Barrier(b) => {
                        if self.checkpoint.is_some() {
                            let (_, state) = snapshot.get_or_insert_with(|| (b.epoch, std::mem::take(&mut self.extra)));
                            take_snapshot(op.as_mut(), &self.op_keys[i], state, &mut uploads)?;
                            if let Some(o) = state.operators.get(&self.op_keys[i]) {
                                metrics.state_bytes.store(o.size(), std::sync::atomic::Ordering::Relaxed);
                            }
                        }
                        op.process_barrier(b, &mut next)?
                    }
                    Message::Idle => next.push(Message::Idle),
                    Message::End => {
                        op.finish(&mut next)?;
                        next.push(Message::End);
                    }
                }
                if let Some(Some(tx)) = self.late.get(i) {
                    for batch in op.drain_late_rows() {
                        send_one(tx, Message::Chunk(Chunk::inserts(batch)), &None).await;
                    }
                    if let Some(m) = control {
                        send_one(tx, m, &None).await;
                    }
                }
            }
            for msg in &next {
                if let Message::Chunk(c) = msg {
                    metrics.record_out(c.num_rows());
                }
            }
            let late = op.late_rows();
            if late > 0 {
                metrics.late_rows.store(late, std::sync::atomic::Ordering::Relaxed);
            }
            messages = next;
            // A satisfied LIMIT ends the stream here; the operators after it still take its
            // last rows and the end.
            if op.is_done() {
                done = true;
                messages.retain(|m| !matches!(m, Message::End));
                messages.push(Message::End);
            }
        }
        if let Some(cp) = &self.checkpoint {
            // A task without operators acknowledges the barrier as it passes.
            let barrier = messages.iter().find_map(|m| match m {
                Message::Barrier(b) => Some(b.epoch),
                _ => None,
            });
            if let Some(epoch) = barrier.filter(|_| snapshot.is_none()) {
                snapshot = Some((epoch, std::mem::take(&mut self.extra)));
            }
            if let Some((epoch, state)) = snapshot {
                if uploads.is_empty() && self.acking.is_none() {
                    cp.ack(Some(epoch), state);
                } else {
                    // Acknowledged once its files are in place, and after the checkpoint
                    // before it: processing goes on meanwhile.
                    // A failed upload declines its checkpoint (the job goes on, and the next
                    // checkpoint uploads the files again) and the one after it, whose files
                    // may include the missing ones.
                    let (cp, previous) = (cp.clone(), self.acking.take());
                    self.acking = Some(tokio::spawn(async move {
                        let previous_ok = match previous {
                            Some(previous) => previous.await.unwrap_or(false),
                            None => true,
                        };
                        let uploaded = match previous_ok {
                            false => Err("the checkpoint before it could not upload its files".to_string()),
                            true => {
                                tokio::task::spawn_blocking(move || uploads.into_iter().try_for_each(|upload| upload()))
                                    .await
                                    .map_err(|e| e.to_string())
                                    .and_then(|r| r.map_err(|e| e.to_string()))
                            }
                        };
                        match uploaded {
                            Ok(()) => {
                                cp.ack(Some(epoch), state);
                                true
                            }
                            Err(why) => {
                                cp.decline(epoch, why);
                                false
                            }
                        }
                    }));
                }
            }
        }
        for msg in messages {
            if !self.send(msg).await? {
                return Ok(false);
            }
        }
        Ok(!done)
    }

    /// Wait for the last checkpoint's uploads and acknowledgement; their error, if any.
    pub(super) async fn acked(&mut self) -> Result<()> {
        match self.acking.take() {
            Some(acking) => {
                acking.await.map_err(|e| WeirError::internal(format!("checkpoint upload: {e}")))?;
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// The task has finished: its final state stands for every later checkpoint.
    pub(super) async fn finished(&mut self) -> Result<()> {
        // The acknowledgement of the last checkpoint goes first.
        self.acked().await?;
        if let Some(cp) = &self.checkpoint {
            let mut state = std::mem::take(&mut self.extra);
            let mut uploads = Vec::new();
            for (i, (op, _)) in self.ops.iter_mut().enumerate() {
                take_snapshot(op.as_mut(), &self.op_keys[i], &mut state, &mut uploads)?;
            }
            tokio::task::spawn_blocking(move || uploads.into_iter().try_for_each(|upload| upload()))
                .await
                .map_err(|e| WeirError::internal(format!("checkpoint upload: {e}")))??;
            cp.ack(None, state);
        }
        Ok(())
    }
}

/// Operator `key`'s snapshot into its task's state; its upload, if any, into `uploads`, to
/// run before the task acknowledges. The one place a snapshot is taken apart, for barriers
/// and a task's end alike.
pub(super) fn take_snapshot(
    op: &mut dyn Operator,
    key: &str,
    state: &mut TaskState,
    uploads: &mut Vec<weir_core::SnapshotUpload>,
) -> Result<()> {
    if let Some(s) = op.snapshot()? {
        uploads.extend(s.upload);
        let o = OperatorState {
            state: s.state,
            shared_files: s.shared_files,
            bytes_copied: s.bytes_copied,
            bytes_referenced: s.bytes_referenced,
        };
        state.operators.insert(key.to_string(), o);
    }
    Ok(())
}

/// Send one message, counting the time spent waiting for room as backpressure.
pub(super) async fn send_one(tx: &mpsc::Sender<Message>, msg: Message, metrics: &Option<Arc<OperatorMetrics>>) -> bool {
    match tx.try_send(msg) {
        Ok(()) => true,
        Err(mpsc::error::TrySendError::Closed(_)) => false,
        Err(mpsc::error::TrySendError::Full(msg)) => {
            let waited = Instant::now();
            let sent = tx.send(msg).await.is_ok();
            if let Some(m) = metrics {
                m.backpressure_nanos
                    .fetch_add(waited.elapsed().as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
            }
            sent
        }
    }
}

//! One attempt at running a job, supervising it, and restarting from checkpoints after a
//! failure.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use weir_core::metrics::TaskPlace;
use weir_core::{ConnectorFactory, Message, OperatorMetrics, Result, Split, WeirError};

use crate::checkpoint::{CheckpointHistory, Trigger};
use crate::identity::{Branch, Identities, StatePart};
use crate::plan::Node;

use super::*;

/// One attempt at running a job: its tasks, their metrics, and how to ask it to stop with
/// a checkpoint.
pub(super) struct Attempt {
    pub(super) tasks: Vec<(String, Task)>,
    pub(super) metrics: Vec<Arc<OperatorMetrics>>,
    pub(super) stop: Option<mpsc::UnboundedSender<()>>,
    pub(super) graph: JobGraph,
}

pub(super) fn build_attempt(
    branches: &mut [(Node, SinkSpec<'static>)],
    connectors: &dyn ConnectorFactory,
    options: &JobOptions,
    stats: &Arc<Mutex<CheckpointHistory>>,
) -> Result<Attempt> {
    let checkpointing = options.checkpoint.clone();
    let restored_epoch = options.restore.as_ref().map(|r| r.epoch);
    let (ack_tx, ack_rx) = mpsc::unbounded_channel();
    let (trigger_tx, trigger_rx) = watch::channel(Trigger::default());
    let (stop_tx, stop_rx) = mpsc::unbounded_channel();
    let (committed_tx, committed_rx) = watch::channel(0u64);
    let mut builder = Builder {
        connectors,
        options: options.clone(),
        tasks: Vec::new(),
        metrics: Vec::new(),
        stages: 0,
        acks: checkpointing.as_ref().map(|_| ack_tx),
        trigger: checkpointing.as_ref().map(|_| trigger_rx),
        committed: checkpointing.as_ref().map(|_| committed_rx.clone()),
        keys: Vec::new(),
        late: Default::default(),
        scans: Vec::new(),
        met: Default::default(),
        ids: identities(branches),
        graph: JobGraph::default(),
        replaying: Arc::new(watch::channel(0).0),
        late_replayed: Default::default(),
    };
    // Each INSERT's tasks, in order (a statement set has several): the sources they read are
    // opened last, once, for all of them.
    for (k, (root, sink)) in branches.iter_mut().enumerate() {
        crate::exchange::check_keyed_inputs(root)?;
        builder.next_insert();
        let mut inputs: Vec<mpsc::Receiver<Message>> = builder.build(root, None)?.into_iter().flatten().collect();
        let above = builder.graph.vertices.len().checked_sub(1);
        // The first INSERT's keys are those of a job of one INSERT.
        let (merge_key, old_sink_kind) = match k {
            0 => ("merge-to-sink".to_string(), "sink-task".to_string()),
            k => (format!("merge-to-sink{k}"), format!("sink{k}-task")),
        };
        // The sink's tasks by its identity (a checkpoint of format version 1: by the INSERT's
        // place in the job).
        let part = builder.ids.sink(k).cloned().ok_or_else(|| WeirError::internal("a sink without its identity"))?;
        let sink_kind = sink_task_kind(&part);
        let restore_kind = if builder.by_place() { old_sink_kind } else { sink_kind.clone() };
        let ship = if !sink.parallel && inputs.len() > 1 { "GLOBAL" } else { "FORWARD" };
        if !sink.parallel && inputs.len() > 1 {
            inputs = vec![builder.merge_into_one(&merge_key, &format!("merge to sink {}", sink.name), inputs)];
        }
        let count = inputs.len();
        let vertex = builder.graph.vertex(format!("Sink: {}", sink.name), count, vec![part.id.clone()]);
        if let Some(above) = above {
            builder.graph.edge(above, vertex, ship);
        }
        for (index, input) in inputs.into_iter().enumerate() {
            let task_sink = (sink.make)(Split { index, count })?;
            let place = TaskPlace { vertex, task: index, id: part.id.clone() };
            let metrics = builder.metrics(format!("Sink: {} [{index}]", sink.name), place);
            let (checkpoint, restoring) =
                builder.checkpoint_of_task((&sink_kind, &restore_kind), index, count, Some(&part));
            // With checkpoints a sink always restores: from the checkpoint, or from nothing
            // (epoch 0) to clear what an earlier attempt left unpublished.
            let restored =
                checkpointing.as_ref().map(|_| SinkRestore::new(restored_epoch.unwrap_or(0), restoring, index, count));
            let committed = checkpointing.as_ref().map(|_| committed_rx.clone());
            // Fed by a replay: what comes before the first barrier is dropped.
            let suppress = builder.options.restore.as_ref().is_some_and(|r| r.suppress.contains(&part.id));
            builder.tasks.push((
                format!("sink [{} {index}]", sink.name),
                Box::pin(run_sink(input, task_sink, metrics, checkpoint, restored, committed, suppress)),
            ));
        }
    }
    builder.spawn_scans()?;
    // Late rows: every window task's into one sink per late-data table.
    for (name, (table, receivers)) in std::mem::take(&mut builder.late) {
        let input =
            builder.merge_into_one(&format!("late-merge-{name}"), &format!("merge late rows to {name}"), receivers);
        let task_sink = connectors.sink(&table, table.schema.clone(), Split { index: 0, count: 1 })?;
        let vertex = builder.graph.vertex(format!("Sink: {name} (late rows)"), 1, Vec::new());
        let metrics =
            builder.metrics(format!("Sink: {name} (late rows)"), TaskPlace { vertex, task: 0, id: String::new() });
        let key = format!("late-sink-{name}");
        let restored = builder.options.restore.as_ref().and_then(|r| r.tasks.get(&key).cloned());
        let restoring = restored.map_or(Restoring::Nothing, Restoring::Same);
        let checkpoint = builder.checkpoint_of(key, None);
        let restored = checkpointing.as_ref().map(|_| SinkRestore::new(restored_epoch.unwrap_or(0), restoring, 0, 1));
        let committed = checkpointing.as_ref().map(|_| committed_rx.clone());
        let suppress = builder.late_replayed.contains(&name);
        builder.tasks.push((
            format!("sink [late rows to {name}]"),
            Box::pin(run_sink(input, task_sink, metrics, checkpoint, restored, committed, suppress)),
        ));
    }
    let stop = match checkpointing {
        Some((config, store)) => {
            let keys = builder.keys.clone();
            let first = restored_epoch.map_or(1, |e| e + 1);
            // One of the job's tasks: a checkpoint it cannot write because another instance
            // took over fails the job.
            let coordinator = crate::checkpoint::coordinate(
                config,
                store,
                keys,
                first,
                trigger_tx,
                committed_tx,
                ack_rx,
                stop_rx,
                stats.clone(),
                builder.replaying.subscribe(),
            );
            builder.tasks.push(("checkpoint coordinator".to_string(), Box::pin(coordinator)));
            Some(stop_tx)
        }
        None => None,
    };
    Ok(Attempt { tasks: builder.tasks, metrics: builder.metrics, stop, graph: builder.graph })
}

/// The identities of a job's parts, from its INSERTs' plans and sinks.
pub fn identities(branches: &[(Node, SinkSpec<'_>)]) -> Identities {
    let branches: Vec<Branch<'_>> =
        branches.iter().map(|(root, sink)| Branch { root, sink: &sink.name, connector: &sink.connector }).collect();
    Identities::of(&branches)
}

/// The kind of a sink's tasks in checkpoints (their keys: the kind and the task's index).
/// By identity, not slot alone: a sink of another connector in the same place restores
/// nothing of the one it replaced.
pub fn sink_task_kind(part: &StatePart) -> String {
    format!("{} {}-task", part.slot, part.id)
}

/// How an attempt ended.
pub(super) enum Ended {
    Finished,
    Stopped,
    Cancelled,
    Failed(WeirError),
}

/// Run an attempt's tasks until they end, fail, or the job is cancelled.
pub(super) async fn supervise(
    attempt: Attempt,
    name: &str,
    cancel: &mut watch::Receiver<bool>,
    stop_requested: &std::sync::atomic::AtomicBool,
) -> Ended {
    let mut set = JoinSet::new();
    let sinks = attempt.tasks.iter().filter(|(name, _)| name.starts_with("sink [")).count();
    for (task_name, task) in attempt.tasks {
        set.spawn(async move {
            let is_sink = task_name.starts_with("sink [");
            task.await.map(|_| is_sink).map_err(|e| (task_name, e))
        });
    }
    let mut sinks_done = 0;
    let ended = loop {
        tokio::select! {
            changed = cancel.changed() => {
                if changed.is_err() || *cancel.borrow() {
                    set.abort_all();
                    break Ended::Cancelled;
                }
            }
            joined = set.join_next() => match joined {
                None => break Ended::Finished,
                Some(Ok(Ok(is_sink))) => {
                    sinks_done += usize::from(is_sink);
                    // Every sink done while sources still run: stopped with a checkpoint.
                    if sinks_done == sinks && !set.is_empty() && stop_requested.load(std::sync::atomic::Ordering::SeqCst) {
                        set.abort_all();
                        break Ended::Stopped;
                    }
                }
                Some(Ok(Err((task, e)))) => {
                    set.abort_all();
                    // A task that fails because the job is being cancelled (its reader went
                    // away) does not make the job a failure.
                    if *cancel.borrow() {
                        break Ended::Cancelled;
                    }
                    log::debug!("job {name} failed in task {task}: {e}");
                    break Ended::Failed(e);
                }
                Some(Err(join)) => {
                    set.abort_all();
                    let what = if join.is_panic() { "panicked" } else { "was aborted" };
                    break Ended::Failed(WeirError::internal(format!("a task of job '{name}' {what}")));
                }
            }
        }
    };
    // Wait for aborted tasks to be dropped so that files and channels are released.
    while set.join_next().await.is_some() {}
    ended
}

/// Start running each branch's plan into its sink: one job, with one checkpoint for all (a
/// statement set's INSERTs), where the branches that read a table through the same scan share
/// it. Sources are opened here, so a missing file fails now,
/// before the job exists. A job with checkpoints that fails restarts from its latest
/// checkpoint, up to `options.restart_attempts` times, waiting longer before each attempt.
/// Must be called inside a Tokio runtime.
pub fn spawn_job(
    id: u64,
    name: String,
    mut branches: Vec<(Node, SinkSpec<'static>)>,
    connectors: Arc<dyn ConnectorFactory>,
    options: JobOptions,
) -> Result<JobHandle> {
    options.key_groups.check_parallelism(options.parallelism)?;
    let checkpoint_stats = Arc::new(Mutex::new(CheckpointHistory::default()));
    let first = build_attempt(&mut branches, connectors.as_ref(), &options, &checkpoint_stats)?;
    let stop_requested = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (state_tx, state_rx) = watch::channel(JobState::Running);
    let (cancel_tx, mut cancel_rx) = watch::channel(false);
    let inner = Arc::new(JobInner {
        id,
        name,
        metrics: Mutex::new(first.metrics.clone()),
        state: state_rx,
        cancel: cancel_tx,
        started: Instant::now(),
        finished: Mutex::new(None),
        checkpoints: checkpoint_stats.clone(),
        exceptions: Mutex::new(Vec::new()),
        graph: Mutex::new(first.graph.clone()),
        started_at_ms: crate::checkpoint::now_ms(),
        stop: Mutex::new(first.stop.clone()),
        stop_requested: stop_requested.clone(),
        checkpointing: options.checkpoint.is_some(),
        restarts: std::sync::atomic::AtomicU32::new(0),
    });
    let handle = JobHandle { inner: inner.clone() };
    tokio::spawn(async move {
        let mut attempt = first;
        let mut backoff = options.restart_backoff;
        let outcome = loop {
            match supervise(attempt, &inner.name, &mut cancel_rx, &stop_requested).await {
                Ended::Finished => break JobState::Finished,
                Ended::Stopped => break JobState::Stopped,
                Ended::Cancelled => break JobState::Cancelled,
                Ended::Failed(e) => {
                    let done = inner.restarts.load(std::sync::atomic::Ordering::SeqCst);
                    let restartable = done < options.restart_attempts && e.kind != weir_core::ErrorKind::Fenced;
                    let Some((config, store)) = options.checkpoint.as_ref().filter(|_| restartable) else {
                        inner.failed(&e, false);
                        break JobState::Failed(e);
                    };
                    inner.failed(&e, true);
                    log::warn!(
                        "job '{}' failed ({e}); restarting from its latest checkpoint in {backoff:?}",
                        inner.name
                    );
                    inner.restarts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = cancel_rx.changed() => break JobState::Cancelled,
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(60));
                    let mut next_options = options.clone();
                    let rebuilt = store.latest(&config.plan).and_then(|restored| {
                        next_options.restore = restored;
                        build_attempt(&mut branches, connectors.as_ref(), &next_options, &checkpoint_stats)
                    });
                    match rebuilt {
                        Ok(next) => {
                            if let Ok(mut m) = inner.metrics.lock() {
                                *m = next.metrics.clone();
                            }
                            if let Ok(mut s) = inner.stop.lock() {
                                *s = next.stop.clone();
                            }
                            attempt = next;
                        }
                        Err(e) => {
                            inner.failed(&e, false);
                            break JobState::Failed(e);
                        }
                    }
                }
            }
        };
        let elapsed = inner.started.elapsed();
        if let Ok(mut f) = inner.finished.lock() {
            *f = Some(elapsed);
        }
        // Local RocksDB copies are scratch: the checkpoints hold the state.
        if let Some(dir) = &options.rocksdb {
            let _ = std::fs::remove_dir_all(dir);
        }
        log_summary(&inner, &outcome, elapsed);
        let _ = state_tx.send(outcome);
    });
    Ok(handle)
}

/// What the job did, in the log when it stops: per operator task rows, batches, watermark and
/// backpressure.
pub(super) fn log_summary(inner: &JobInner, outcome: &JobState, elapsed: Duration) {
    if !log::log_enabled!(log::Level::Info) {
        return;
    }
    let mut text = format!("job {} '{}' {} after {:.3}s", inner.id, inner.name, outcome.name(), elapsed.as_secs_f64());
    let metrics = inner.metrics.lock().map(|m| m.clone()).unwrap_or_default();
    for m in &metrics {
        let s = m.snapshot();
        text.push_str(&format!(
            "\n  {}: rows in {} out {}, batches in {} out {}, watermark {:?}, backpressure {} ms, skipped {}",
            s.name,
            s.rows_in,
            s.rows_out,
            s.batches_in,
            s.batches_out,
            s.watermark,
            s.backpressure_ms,
            s.records_skipped
        ));
    }
    log::info!("{text}");
}

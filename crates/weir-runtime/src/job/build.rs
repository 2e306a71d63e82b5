//! Building a plan's tasks: the operator chains of each stage, their channels and exchanges,
//! and each task's part in checkpoints.

use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use weir_core::metrics::TaskPlace;
use weir_core::{ConnectorFactory, Message, OperatorMetrics, Result, Split, WeirError};

use crate::checkpoint::{Ack, CheckpointMode, TaskCheckpoint, TaskState, Trigger};
use crate::exchange::Partitioning;
use crate::identity::{Identities, StatePart};
use crate::plan::{InstanceContext, Node, OperatorSpec};
use crate::values::ValuesSource;
use crate::CHANNEL_CAPACITY;

use super::graph::{ship_of, JobGraph};
use super::*;

/// Builds the tasks of a plan.
pub(super) struct Builder<'a> {
    pub(super) connectors: &'a dyn ConnectorFactory,
    pub(super) options: JobOptions,
    pub(super) tasks: Vec<(String, Task)>,
    pub(super) metrics: Vec<Arc<OperatorMetrics>>,
    /// Stages built so far: part of each task's checkpoint key, deterministic for a plan.
    pub(super) stages: usize,
    /// Checkpointing: where tasks acknowledge barriers, and the keys of every task.
    pub(super) acks: Option<mpsc::UnboundedSender<Ack>>,
    pub(super) trigger: Option<watch::Receiver<Trigger>>,
    /// Checkpoints completed (sources tell their systems, e.g. Kafka consumer groups).
    pub(super) committed: Option<watch::Receiver<u64>>,
    pub(super) keys: Vec<String>,
    /// Late rows of window operators, by late-data table: every task's channel.
    pub(super) late: std::collections::BTreeMap<String, (Arc<weir_core::TableDef>, Vec<mpsc::Receiver<Message>>)>,
    /// The scans of sources, whose tasks are made once every INSERT's chains are built
    /// ([`Builder::spawn_scans`]): the INSERTs of a statement set share a scan.
    pub(super) scans: Vec<Scan>,
    /// How many scans of each identity the INSERT being built has met so far: its second
    /// scan of a table (a self-join) is a scan of its own, shared with other INSERTs' second.
    pub(super) met: std::collections::HashMap<String, usize>,
    /// The stable identities of the job's operators, scans and sinks.
    pub(super) ids: Identities,
    /// The vertices and edges built so far, for watchers.
    pub(super) graph: JobGraph,
    /// Late-data tables fed by an operator rebuilt by replay: their sinks drop what comes
    /// before the cut-over, as the INSERTs' sinks do.
    pub(super) late_replayed: std::collections::BTreeSet<String>,
    /// Source tasks still replaying ([`crate::upgrade`]): no checkpoint is taken before
    /// they have all caught up.
    pub(super) replaying: Arc<watch::Sender<usize>>,
}

/// One scan of a source table: read once by each of its tasks, which feed the chains of
/// every INSERT that reads it.
pub(super) struct Scan {
    key: String,
    table: Arc<weir_core::TableDef>,
    projection: Option<Vec<usize>>,
    /// By task index.
    tasks: Vec<ScanTask>,
}

pub(super) struct ScanTask {
    metrics: Arc<OperatorMetrics>,
    chains: Vec<Chain>,
    /// What each chain restores; the source's position comes from the first that has one.
    restoring: Vec<Restoring>,
}

/// What a task restores from the checkpoint it starts from.
pub(super) enum Restoring {
    Nothing,
    /// Its own state: the checkpoint had as many tasks of its kind.
    Same(TaskState),
    /// The checkpoint had another number of tasks of its kind: theirs, by index.
    Rescaled(Vec<(usize, TaskState)>),
}

impl Restoring {
    /// For task `index` of `count`, from the old tasks of its kind: the one of the same index
    /// if there were as many, else all of them.
    fn of(old: Vec<(usize, &TaskState)>, index: usize, count: usize) -> Self {
        if old.is_empty() {
            Restoring::Nothing
        } else if old.len() == count {
            old.into_iter().find(|(i, _)| *i == index).map_or(Restoring::Nothing, |(_, s)| Restoring::Same(s.clone()))
        } else {
            Restoring::Rescaled(old.into_iter().map(|(i, s)| (i, s.clone())).collect())
        }
    }
}

impl Builder<'_> {
    /// The part in checkpoints of a task that is alone of its kind (a merge into one sink).
    /// The part in checkpoints of the task `key`, whose source or sink state is that of the
    /// scan or sink `owner`.
    pub(super) fn checkpoint_of(&mut self, key: String, owner: Option<&StatePart>) -> Option<TaskCheckpoint> {
        let timeout = self.options.checkpoint.as_ref().map_or(std::time::Duration::ZERO, |(c, _)| c.timeout);
        let owner = owner.map(|p| p.id.clone());
        let cp = self.acks.clone().map(|acks| TaskCheckpoint { key: key.clone(), acks, timeout, owner });
        self.keys.push(key);
        cp
    }

    /// The part in checkpoints of task `index` of the `count` tasks `<kind><i>`, and what the
    /// tasks `<restore_kind><i>` left for it: its own state, or at another parallelism the
    /// states of every earlier task of that kind.
    pub(super) fn checkpoint_of_task(
        &mut self,
        (kind, restore_kind): (&str, &str),
        index: usize,
        count: usize,
        owner: Option<&StatePart>,
    ) -> (Option<TaskCheckpoint>, Restoring) {
        let cp = self.checkpoint_of(format!("{kind}{index}"), owner);
        let Some(restored) = &self.options.restore else { return (cp, Restoring::Nothing) };
        (cp, Restoring::of(restored.of_kind(restore_kind), index, count))
    }

    /// Whether the checkpoint restored keys state by place (format version 1), not identity.
    pub(super) fn by_place(&self) -> bool {
        self.options.restore.as_ref().is_some_and(|r| r.version == 1)
    }

    /// The states operator `key` restores in task `index` of `count`: its own task's, or at
    /// another parallelism every earlier task's. `kind`: the tasks that held it, if known
    /// (by place), else those holding its identity.
    fn operator_states(&self, key: &str, kind: Option<&str>, index: usize, count: usize) -> Vec<&[u8]> {
        let Some(restored) = &self.options.restore else { return Vec::new() };
        let Some(kind) = kind.or_else(|| restored.kind_holding(|s| s.operators.contains_key(key))) else {
            return Vec::new();
        };
        let old = restored.of_kind(kind);
        let rescaled = old.len() != count;
        old.into_iter()
            .filter(|(i, _)| rescaled || *i == index)
            .filter_map(|(_, s)| s.operators.get(key).map(|o| o.state.as_slice()))
            .collect()
    }

    /// What scan `id`'s task `index` of `count` restores (checkpoints keyed by identity).
    fn scan_restoring(&self, id: &str, index: usize, count: usize) -> Restoring {
        let Some(restored) = &self.options.restore else { return Restoring::Nothing };
        let holds = |s: &TaskState| s.source.is_some() && s.owner.as_deref() == Some(id);
        match restored.kind_holding(holds) {
            Some(kind) => Restoring::of(restored.of_kind(kind), index, count),
            None => Restoring::Nothing,
        }
    }

    /// The positions of every task of scan `id` in the checkpoint: what a replay reads up to.
    fn scan_positions(&self, id: &str) -> Vec<Vec<u8>> {
        let Some(restored) = &self.options.restore else { return Vec::new() };
        let holds = |s: &TaskState| s.source.is_some() && s.owner.as_deref() == Some(id);
        let Some(kind) = restored.kind_holding(holds) else { return Vec::new() };
        restored.of_kind(kind).into_iter().filter_map(|(_, s)| s.source.clone()).collect()
    }

    /// RocksDB state: the local working root of this job, and the checkpoints' shared files.
    pub(super) fn rocksdb_dirs(&self) -> Option<(std::path::PathBuf, Arc<dyn weir_storage::Storage>)> {
        let local = self.options.rocksdb.clone()?;
        let shared: Arc<dyn weir_storage::Storage> = match &self.options.checkpoint {
            Some((config, _)) => crate::checkpoint::Checkpoints::shared(&config.storage),
            None => Arc::new(weir_storage::LocalDir::new(local.join("shared"))),
        };
        Some((local, shared))
    }

    pub(super) fn aligned(&self) -> bool {
        self.options.checkpoint.as_ref().is_none_or(|(c, _)| c.mode == CheckpointMode::ExactlyOnce)
    }

    pub(super) fn metrics(&mut self, name: String, place: TaskPlace) -> Arc<OperatorMetrics> {
        let m = Arc::new(OperatorMetrics::at(name, place));
        self.metrics.push(m.clone());
        m
    }

    /// One task merging `inputs` (watermarks, barriers aligned); returns its output.
    pub(super) fn merge_into_one(
        &mut self,
        key: &str,
        name: &str,
        inputs: Vec<mpsc::Receiver<Message>>,
    ) -> mpsc::Receiver<Message> {
        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
        let checkpoint = self.checkpoint_of(key.to_string(), None);
        let chain = Chain {
            ops: Vec::new(),
            op_keys: Vec::new(),
            output: Output::Forward(tx),
            metrics: None,
            checkpoint,
            extra: TaskState::default(),
            late: Vec::new(),
            acking: None,
        };
        let aligned = self.aligned();
        self.tasks.push((name.to_string(), Box::pin(run_merge(inputs, chain, aligned, usize::MAX))));
        rx
    }

    /// Tasks computing `node`, `parallelism` of each. Without `exchange`, returns the channel
    /// each task's output arrives on, by task index (`[task][0]`). With an exchange to `n`
    /// tasks of the next stage, returns what each of those receives (`[next task][task]`).
    pub(super) fn build(
        &mut self,
        node: &Node,
        exchange: Option<(&Partitioning, usize)>,
    ) -> Result<Vec<Vec<mpsc::Receiver<Message>>>> {
        // The operators above the node that starts the task, bottom up. An operator that needs
        // all rows in one task starts a task of its own, fed by all tasks of its input.
        let mut specs: Vec<&OperatorSpec> = Vec::new();
        let mut start = node;
        let mut gather: Option<&Node> = None;
        while let Node::Operator { spec, input } = start {
            specs.push(spec);
            if spec.single_task() {
                gather = Some(input);
                break;
            }
            start = input;
        }
        if let Node::Join { spec, .. } = start {
            specs.push(spec);
        }
        specs.reverse();
        let parallelism = match start {
            _ if gather.is_some() => 1,
            // Literal rows are few: one task.
            Node::Values { .. } => 1,
            _ => self.options.parallelism,
        };
        // Of each task's inputs, how many are the left input of a join (the rest are right).
        let mut left_inputs = usize::MAX;
        // The vertices feeding this one, and how.
        let mut fed_by: Vec<(usize, &'static str)> = Vec::new();
        let mut merge_inputs: Vec<Vec<mpsc::Receiver<Message>>> = match (gather, start) {
            (Some(input), _) => {
                let built = self.build(input, None)?;
                fed_by.push((self.graph.vertices.len() - 1, "GLOBAL"));
                vec![built.into_iter().flatten().collect()]
            }
            (None, Node::Union { inputs, .. }) => {
                // Input j's task i feeds union task i (a forward edge); an input with fewer
                // tasks feeds them all to union task 0.
                let mut per_task: Vec<Vec<mpsc::Receiver<Message>>> = (0..parallelism).map(|_| Vec::new()).collect();
                for input in inputs {
                    for (i, rx) in self.build(input, None)?.into_iter().flatten().enumerate() {
                        per_task[i % parallelism].push(rx);
                    }
                    fed_by.push((self.graph.vertices.len() - 1, "FORWARD"));
                }
                per_task
            }
            (None, Node::Exchange { partitioning, input }) => {
                let built = self.build(input, Some((partitioning, parallelism)))?;
                fed_by.push((self.graph.vertices.len() - 1, ship_of(partitioning)));
                built
            }
            (None, Node::Join { left, right, .. }) => {
                // Both inputs come exchanged by their join keys (Exchange nodes); each join
                // task reads the left receivers first, then the right ones.
                let mut exchanged = |node: &Node| match node {
                    Node::Exchange { partitioning, input } => {
                        let built = self.build(input, Some((partitioning, parallelism)))?;
                        fed_by.push((self.graph.vertices.len() - 1, ship_of(partitioning)));
                        Ok(built)
                    }
                    _ => Err(WeirError::internal("a join input is not exchanged")),
                };
                let lefts = exchanged(left)?;
                let rights = exchanged(right)?;
                left_inputs = lefts.first().map_or(0, |l| l.len());
                lefts
                    .into_iter()
                    .zip(rights)
                    .map(|(mut l, r)| {
                        l.extend(r);
                        l
                    })
                    .collect()
            }
            _ => Vec::new(),
        };
        let stage = self.stages;
        self.stages += 1;
        let by_place = self.by_place();
        let scan = match start {
            Node::Source { table, projection, .. } if gather.is_none() => Some(self.scan_of(table, projection)),
            _ => None,
        };
        // The vertex: its operators' names in flow order, and the identities of its state.
        let mut names: Vec<String> = match start {
            _ if gather.is_some() => Vec::new(),
            Node::Source { table, .. } => vec![format!("Source: {}", table.name)],
            Node::Values { .. } => vec!["Values".to_string()],
            _ => Vec::new(),
        };
        names.extend(specs.iter().map(|s| s.describe()));
        let scan_id = scan.and_then(|at| self.ids.scan(&self.scans[at].key)).map(|p| p.id.clone());
        let mut stateful: Vec<String> = scan_id.iter().cloned().collect();
        stateful.extend(specs.iter().filter_map(|s| self.ids.operator(s).map(|p| p.id.clone())));
        let vertex = self.graph.vertex(names.join(" -> "), parallelism, stateful);
        for (from, ship) in fed_by {
            self.graph.edge(from, vertex, ship);
        }
        let scan_id = scan_id.unwrap_or_default();
        // Output channels: one per task, or a task-by-next-task matrix for an exchange.
        let mut outputs: Vec<Vec<mpsc::Receiver<Message>>> = match exchange {
            None => Vec::with_capacity(parallelism),
            Some((_, next)) => (0..next).map(|_| Vec::with_capacity(parallelism)).collect(),
        };
        for index in 0..parallelism {
            let output = match exchange {
                None => {
                    let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
                    outputs.push(vec![rx]);
                    Output::Forward(tx)
                }
                Some((partitioning, next)) => {
                    let mut senders = Vec::with_capacity(next);
                    for receivers in outputs.iter_mut() {
                        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
                        senders.push(tx);
                        receivers.push(rx);
                    }
                    Output::Exchange {
                        senders,
                        partitioning: partitioning.clone(),
                        next: index,
                        key_groups: self.options.key_groups,
                    }
                }
            };
            // The task's own metrics first (source, values), so that they list in flow order.
            let source_metrics = match start {
                _ if gather.is_some() => None,
                Node::Source { table, .. } => match scan.and_then(|at| self.scans[at].tasks.get(index)) {
                    // Read by an INSERT built before: one source, its metrics.
                    Some(task) => Some(task.metrics.clone()),
                    None => Some(self.metrics(
                        format!("Source: {} [{index}]", table.name),
                        TaskPlace { vertex, task: index, id: scan_id.clone() },
                    )),
                },
                Node::Values { .. } => {
                    Some(self.metrics("Values".to_string(), TaskPlace { vertex, task: index, id: String::new() }))
                }
                _ => None,
            };
            let kind = format!("stage{stage}-task");
            let owner = scan.and_then(|at| self.ids.scan(&self.scans[at].key)).cloned();
            // What the task had by place: only a checkpoint of format version 1 is read so
            // (its operators and source position); later ones by identity, below.
            let (checkpoint, restored) = match by_place {
                true => self.checkpoint_of_task((&kind, &kind), index, parallelism, owner.as_ref()),
                false => (self.checkpoint_of(format!("{kind}{index}"), owner.as_ref()), Restoring::Nothing),
            };
            let mut ops = Vec::with_capacity(specs.len());
            let mut op_keys = Vec::with_capacity(specs.len());
            let mut late = Vec::with_capacity(specs.len());
            for (i, s) in specs.iter().enumerate() {
                late.push(s.late_table().map(|table| {
                    let rebuilt = self.options.restore.as_ref().map(|r| &r.rebuilt);
                    if self.ids.operator(s).is_some_and(|p| rebuilt.is_some_and(|r| r.contains(&p.id))) {
                        self.late_replayed.insert(table.name.clone());
                    }
                    let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
                    self.late.entry(table.name.clone()).or_insert_with(|| (table.clone(), Vec::new())).1.push(rx);
                    tx
                }));
                let ctx = InstanceContext {
                    key: format!("stage{stage}-task{index}-op{i}"),
                    rocksdb: self.rocksdb_dirs(),
                    key_groups: self.options.key_groups,
                    owned: self.options.key_groups.range_of(index, parallelism),
                };
                let mut op = s.instantiate_in(&ctx)?;
                // State by identity; a checkpoint of format version 1 by place in the chain.
                let part = self.ids.operator(s).map(|p| p.id.clone());
                let key = match (&part, self.by_place()) {
                    (Some(id), false) => id.clone(),
                    _ => i.to_string(),
                };
                let states = self.operator_states(&key, self.by_place().then_some(kind.as_str()), index, parallelism);
                if !states.is_empty() {
                    op.restore(&states).map_err(|e| e.context(format!("restoring {}", s.describe())))?;
                }
                let place = TaskPlace { vertex, task: index, id: part.clone().unwrap_or_default() };
                // A stateless operator keeps nothing; its place names it all the same.
                op_keys.push(part.unwrap_or_else(|| i.to_string()));
                ops.push((op, self.metrics(format!("{} [{index}]", s.describe()), place)));
            }
            // Waiting for room downstream slows the whole task: counted on its first operator
            // (a source task's on its source, below).
            let first_metrics = ops.first().map(|op| op.1.clone());
            let chain = Chain {
                ops,
                op_keys,
                output,
                metrics: first_metrics,
                checkpoint,
                extra: TaskState::default(),
                late,
                acking: None,
            };
            let aligned = self.aligned();
            if gather.is_some() {
                let receivers = std::mem::take(&mut merge_inputs[index]);
                self.tasks
                    .push((format!("gather [{index}]"), Box::pin(run_merge(receivers, chain, aligned, usize::MAX))));
                continue;
            }
            match start {
                Node::Source { .. } => {
                    let (at, metrics) =
                        scan.zip(source_metrics).ok_or_else(|| WeirError::internal("a source without its scan"))?;
                    let tasks = &mut self.scans[at].tasks;
                    if tasks.len() == index {
                        tasks.push(ScanTask { metrics, chains: Vec::new(), restoring: Vec::new() });
                    }
                    let task = &mut tasks[index];
                    task.chains.push(chain.with_metrics(task.metrics.clone()));
                    if by_place {
                        task.restoring.push(restored);
                    }
                }
                Node::Values { batches, schema } => {
                    let source = Box::new(ValuesSource::new(schema.clone(), batches.clone()));
                    let metrics =
                        source_metrics.clone().ok_or_else(|| WeirError::internal("values without metrics"))?;
                    let chain = chain.with_metrics(metrics.clone());
                    let trigger = self.trigger.clone().zip(self.committed.clone());
                    let chains = Branches::new(vec![chain]);
                    self.tasks.push((
                        "values".to_string(),
                        Box::pin(run_source(source, metrics, chains, None, trigger, None)),
                    ));
                }
                Node::Union { .. } | Node::Exchange { .. } => {
                    let receivers = std::mem::take(&mut merge_inputs[index]);
                    self.tasks
                        .push((format!("merge [{index}]"), Box::pin(run_merge(receivers, chain, aligned, usize::MAX))));
                }
                Node::Join { .. } => {
                    let receivers = std::mem::take(&mut merge_inputs[index]);
                    let run = run_merge(receivers, chain, aligned, left_inputs);
                    self.tasks.push((format!("join [{index}]"), Box::pin(run)));
                }
                Node::Operator { .. } => return Err(WeirError::internal("operator chain did not end")),
            }
        }
        Ok(outputs)
    }

    /// The scan the INSERT being built reads `table` through, made on first use: the same
    /// table read with the same options and columns is one scan for every INSERT.
    fn scan_of(&mut self, table: &Arc<weir_core::TableDef>, projection: &Option<Vec<usize>>) -> usize {
        let identity = crate::identity::scan_identity(table, projection);
        let nth = self.met.entry(identity.clone()).or_insert(0);
        let key = crate::identity::scan_key(&identity, *nth);
        *nth += 1;
        if let Some(at) = self.scans.iter().position(|s| s.key == key) {
            return at;
        }
        self.scans.push(Scan { key, table: table.clone(), projection: projection.clone(), tasks: Vec::new() });
        self.scans.len() - 1
    }

    /// Start building the next INSERT of the job: its scans are counted afresh.
    pub(super) fn next_insert(&mut self) {
        self.met.clear();
    }

    /// The source tasks of every scan, once every INSERT's chains are built: each opens its
    /// split of the table, rewinds it to the checkpoint, and feeds its chains.
    pub(super) fn spawn_scans(&mut self) -> Result<()> {
        let built = std::mem::take(&mut self.tasks);
        for scan in std::mem::take(&mut self.scans) {
            let count = scan.tasks.len();
            for (index, task) in scan.tasks.into_iter().enumerate() {
                let split = Split { index, count };
                let table = &scan.table;
                let mut source = self.connectors.source(table, scan.projection.clone(), split)?;
                // By identity; a checkpoint of format version 1 by the chains' places.
                let by_identity = match self.ids.scan(&scan.key) {
                    Some(part) if !self.by_place() => self.scan_restoring(&part.id, index, count),
                    _ => Restoring::Nothing,
                };
                let replay = match self.ids.scan(&scan.key) {
                    Some(part) if self.options.restore.as_ref().is_some_and(|r| r.replay.contains(&part.id)) => {
                        let positions = self.scan_positions(&part.id);
                        let refs: Vec<&[u8]> = positions.iter().map(Vec::as_slice).collect();
                        source.replay_to(&refs).map_err(|e| e.context(format!("table '{}'", table.name)))?;
                        self.replaying.send_modify(|n| *n += 1);
                        Some(Replay { positions, left: self.replaying.clone() })
                    }
                    _ => None,
                };
                let restoring = task.restoring.iter().chain([&by_identity]).filter(|_| replay.is_none());
                match restoring.into_iter().find(|r| !matches!(r, Restoring::Nothing)) {
                    None => {}
                    Some(Restoring::Same(state)) => {
                        if let Some(position) = &state.source {
                            source.seek(position)?;
                        }
                    }
                    Some(Restoring::Rescaled(old)) => {
                        let positions: Vec<&[u8]> = old.iter().filter_map(|(_, s)| s.source.as_deref()).collect();
                        source.seek_rescaled(&positions).map_err(|e| e.context(format!("table '{}'", table.name)))?;
                    }
                    Some(Restoring::Nothing) => {}
                }
                let mut chains = Branches::new(task.chains);
                let partitions = source.partitions();
                if !partitions.is_empty() {
                    for chain in chains.chains_mut() {
                        for (op, _) in chain.ops.iter_mut() {
                            op.source_partitions(&partitions, self.options.idle_timeout);
                        }
                    }
                }
                let trigger = self.trigger.clone().zip(self.committed.clone());
                let idle = self.options.idle_timeout;
                self.tasks.push((
                    format!("source {} [{index}]", table.name),
                    Box::pin(run_source(source, task.metrics, chains, idle, trigger, replay)),
                ));
            }
        }
        // Sources first, as the tasks are started in this order: a source that fails is then
        // seen failing before the tasks whose input it closed (the error the job reports).
        self.tasks.extend(built);
        Ok(())
    }
}

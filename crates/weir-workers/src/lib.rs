//! One job over several `weir worker` processes, through Kafka: Kafka Streams' design with
//! Weir's operators and checkpoints.
//!
//! - The plan is cut at each hash exchange ([`topology`]); each cut is a repartition topic
//!   with the job's `parallelism` as its partition count.
//! - A task is one partition number of a sub-topology: it reads that partition of every
//!   topic the sub-topology reads, runs the operators at parallelism 1 (the in-process
//!   runtime, with its own checkpoint coordinator), and writes through one transactional
//!   producer ([`sink`]).
//! - Which worker runs which task is the assignment of a Kafka consumer group per
//!   sub-topology ([`group`]): a worker that dies leaves the group (after the session
//!   timeout) and its tasks move; one that joins gets some. Weir decides no membership.
//! - A task restores the checkpoint its committed offsets name ([`store`]), from the
//!   checkpoint store every worker shares.

mod codec;
mod connectors;
mod group;
mod sink;
mod source;
mod status;
mod store;
mod topology;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_core::{ConnectorFactory, Result, Split, TableDef, WeirError};
use weir_runtime::checkpoint::{CheckpointConfig, CheckpointStore};
use weir_runtime::{spawn_job, JobHandle, JobState, SinkSpec};

pub use status::status;

use connectors::{TaskConnectors, TaskShared};
use group::Membership;
use sink::{Target, TaskSink};
use store::TaskStore;
use topology::{Output, SubTopology};
use weir::Engine;
use weir::PreparedJob;

/// Run this process as a worker of the jobs of `sql` until every task of every job has
/// ended (bounded inputs), or forever. `id`: a name of this worker that its replacement
/// takes over (Kafka's static membership, `group.instance.id`): a worker restarted under the
/// same id gets its place in the groups at once, without waiting for the group to give the
/// old one up.
pub async fn run(engine: &Engine, sql: &str, id: Option<&str>) -> Result<()> {
    let jobs = engine.prepare_jobs(sql).await?;
    if jobs.is_empty() {
        return Err(WeirError::user("the file has no INSERT: a worker runs the jobs that INSERTs start"));
    }
    let member = Member { name: member_name(id), instance: id.map(str::to_string) };
    let mut runs = Vec::new();
    for job in jobs {
        runs.push(WorkerJob::new(job, engine.connectors(), &member, engine.watched())?);
    }
    // One job's failure stops the others too, each leaving nothing open behind it.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    // A task of its own per job: a job waiting on the cluster (a task's start blocks while it
    // fences its predecessors) does not hold the others up.
    let handles: Vec<_> = runs
        .into_iter()
        .map(|r| {
            let (stop, stopped) = (stop.clone(), stopped.clone());
            tokio::spawn(async move {
                let outcome = r.run(stopped).await;
                if outcome.is_err() {
                    stop.send_replace(true);
                }
                outcome
            })
        })
        .collect();
    let mut first_error = None;
    for handle in handles {
        let outcome =
            handle.await.unwrap_or_else(|e| Err(WeirError::internal(format!("a job of this worker stopped: {e}"))));
        if let Err(e) = outcome {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// How this worker shows in the groups: its id, or host and process; and its static id.
#[derive(Clone)]
pub(crate) struct Member {
    pub name: String,
    pub instance: Option<String>,
}

fn member_name(id: Option<&str>) -> String {
    let host = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()).unwrap_or_default();
    let host = if host.is_empty() { "host" } else { &host };
    match id {
        Some(id) => format!("weir-{id}-{}", std::process::id()),
        None => format!("weir-{host}-{}", std::process::id()),
    }
}

/// What every worker of a job works out the same way from the SQL file.
pub(crate) struct Layout {
    pub job: PreparedJob,
    pub subs: Vec<SubTopology>,
    /// Tasks of each sub-topology, by its id.
    pub tasks: BTreeMap<usize, usize>,
    pub kafka: rdkafka::ClientConfig,
    pub checkpoint: CheckpointConfig,
    pub session_timeout: Duration,
}

impl Layout {
    pub fn new(job: PreparedJob) -> Result<Self> {
        let Some(checkpoint) = job.checkpoint.clone() else {
            return Err(WeirError::user(format!(
                "job '{}' runs on workers and needs checkpoints: SET 'checkpoint.interval' and 'checkpoint.dir' (a \
                 directory every worker reaches)",
                job.name
            )));
        };
        let (root, _) = job.single()?;
        let sources = root.source_tables();
        let template = sources
            .iter()
            .find(|t| matches!(t.options.get("connector"), Some("kafka" | "upsert-kafka")))
            .cloned()
            .ok_or_else(|| WeirError::user(format!("job '{}' reads no Kafka table: workers read Kafka", job.name)))?;
        let kafka = client_config(&template)?;
        let subs = topology::cut(&job.name, root, &template)?;
        let partitions = job.options.parallelism;
        let mut tasks = BTreeMap::new();
        for sub in &subs {
            let mut counts = Vec::new();
            for input in &sub.inputs {
                let n = match input.upstream {
                    Some(_) => partitions,
                    None => group::partitions(&kafka, &input.topic)?.ok_or_else(|| {
                        WeirError::user(format!("job '{}': topic '{}' does not exist", job.name, input.topic))
                    })?,
                };
                counts.push((input.topic.clone(), n));
            }
            let n = counts.first().map_or(partitions, |(_, n)| *n);
            if counts.iter().any(|(_, c)| *c != n) {
                let list: Vec<String> = counts.iter().map(|(t, c)| format!("'{t}': {c}")).collect();
                return Err(WeirError::user(format!(
                    "job '{}': {} reads topics of different partition counts ({}); a task reads one partition \
                     number of each, so they must be equal",
                    job.name,
                    sub.describe(),
                    list.join(", ")
                )));
            }
            tasks.insert(sub.id, n);
        }
        let session_timeout = job
            .settings
            .iter()
            .find(|(k, _)| k == "workers.session-timeout")
            .map(|(_, v)| weir_core::parse_duration(v))
            .transpose()?
            .unwrap_or(Duration::from_secs(10));
        Ok(Self { job, subs, tasks, kafka, checkpoint, session_timeout })
    }

    /// Create the repartition topics that are missing; refuse one of another partition count.
    fn ensure_topics(&self) -> Result<()> {
        let partitions = self.job.options.parallelism;
        for sub in &self.subs {
            let Output::Repartition { topic, .. } = &sub.output else { continue };
            let existing = match group::partitions(&self.kafka, topic)? {
                Some(n) => Some(n),
                None => group::create_topic(&self.kafka, topic, partitions)?,
            };
            if let Some(n) = existing.filter(|n| *n != partitions) {
                return Err(WeirError::user(format!(
                    "job '{}': repartition topic '{topic}' has {n} partitions, and the job's 'parallelism' is \
                     {partitions}: its key groups would land in other tasks. Set 'parallelism' = '{n}', or delete \
                     the topic (and the job's checkpoints) to start over",
                    self.job.name
                )));
            }
        }
        Ok(())
    }

    fn topics_of(&self, sub: &SubTopology) -> Vec<String> {
        sub.inputs.iter().map(|i| i.topic.clone()).collect()
    }
}

/// The librdkafka settings of a table's `properties.*`, without those of one consumer or
/// producer (a group, an isolation level, a transactional id).
fn client_config(table: &TableDef) -> Result<rdkafka::ClientConfig> {
    let mut config = rdkafka::ClientConfig::new();
    let own = ["group.id", "isolation.level", "transactional.id", "transaction.timeout.ms", "client.id"];
    for (property, value) in weir_connectors::kafka::properties(table)? {
        if !own.contains(&property.as_str()) {
            config.set(property, value);
        }
    }
    Ok(config)
}

struct WorkerJob {
    layout: Arc<Layout>,
    connectors: Arc<dyn ConnectorFactory>,
    member: Member,
    /// Where this worker's tasks are shown (its web endpoint, if it runs one).
    watched: weir::web::Jobs,
}

/// A task this worker runs: sub-topology id and partition.
type TaskId = (usize, i32);

/// The first wait before a task is started again here, and the longest.
const FIRST_RETRY: Duration = Duration::from_secs(1);
const LAST_RETRY: Duration = Duration::from_secs(30);

/// What a worker keeps of one job's tasks.
#[derive(Default)]
struct Tasks {
    running: BTreeMap<TaskId, Running>,
    /// Revoked, and stopping: the revocation waits for them.
    stopping: Vec<(usize, JobHandle)>,
    /// Ended here: not started again while still assigned.
    settled: BTreeSet<TaskId>,
    /// Not started again before then, and the wait after that: fenced while this worker
    /// still had them, or their start failed on the cluster.
    retry: BTreeMap<TaskId, (Instant, Duration)>,
    /// The assignment round last seen, per sub-topology.
    last_round: BTreeMap<usize, u64>,
    /// The runtime's id of the last task started.
    next_id: u64,
}

/// A task running here.
struct Running {
    handle: JobHandle,
    /// `task <sub>/<p> of job '<job>'`, and its transactional ids.
    name: String,
    seqs: Arc<sink::Seqs>,
}

impl WorkerJob {
    fn new(
        job: PreparedJob,
        connectors: Arc<dyn ConnectorFactory>,
        member: &Member,
        watched: weir::web::Jobs,
    ) -> Result<Self> {
        let layout = Layout::new(job)?;
        layout.ensure_topics()?;
        Ok(Self { layout: Arc::new(layout), connectors, member: member.clone(), watched })
    }

    /// Run the job's tasks as the groups assign them, until they have all ended, the worker
    /// is interrupted, `stopped` says another job of the worker failed, or this one fails.
    /// Whatever still runs then is stopped, and the transactions it had open are aborted.
    async fn run(self, stopped: tokio::sync::watch::Receiver<bool>) -> Result<()> {
        let layout = &self.layout;
        let mut memberships = Vec::new();
        for sub in &layout.subs {
            let topics = layout.topics_of(sub);
            let group = sub.group(&layout.job.name);
            memberships.push(Membership::join(&layout.kafka, &group, &topics, &self.member, layout.session_timeout)?);
        }
        let mut tasks = Tasks::default();
        let outcome = self.drive(&memberships, &mut tasks, stopped).await;
        // Before the groups are left: the tasks' next owners must not start them while they
        // still run here.
        self.shut_down(&tasks).await;
        Membership::leave_all(memberships);
        outcome
    }

    async fn drive(
        &self,
        memberships: &[Membership],
        tasks: &mut Tasks,
        mut stopped: tokio::sync::watch::Receiver<bool>,
    ) -> Result<()> {
        let layout = &self.layout;
        let name = &layout.job.name;
        for sub in &layout.subs {
            log::info!("job '{name}': {}, {} task(s)", sub.describe(), layout.tasks[&sub.id]);
        }
        let mut last_check = Instant::now();
        let mut interrupt = std::pin::pin!(tokio::signal::ctrl_c());
        loop {
            self.reap(tasks)?;
            // A replacement under this worker's id has taken its place: nothing here may go on.
            if let Some(e) = memberships.iter().find_map(|m| m.failed()) {
                return Err(e);
            }
            for (sub, membership) in layout.subs.iter().zip(memberships) {
                self.follow(sub, membership, tasks)?;
            }
            // Asked of the cluster at most once a second.
            if tasks.running.is_empty() && last_check.elapsed() >= Duration::from_secs(1) {
                last_check = Instant::now();
                if tokio::task::block_in_place(|| self.all_ended())? {
                    log::info!("job '{name}': every task has ended");
                    return Ok(());
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                _ = &mut interrupt => {
                    log::info!("job '{name}': interrupted; leaving the groups");
                    return Ok(());
                }
                _ = stopped.changed() => {
                    log::info!("job '{name}': stopped, as another job of this worker failed");
                    return Ok(());
                }
            }
        }
    }

    /// Stop the tasks still running here, and abort the transactions they leave open (their
    /// next owners would, but only once the group has moved them).
    async fn shut_down(&self, tasks: &Tasks) {
        if tasks.running.is_empty() {
            return;
        }
        for run in tasks.running.values() {
            run.handle.cancel();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && tasks.running.values().any(|r| matches!(r.handle.state(), JobState::Running))
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for run in tasks.running.values() {
            if let Err(e) = tokio::task::block_in_place(|| run.seqs.abort_open(&self.layout.kafka, &run.name)) {
                log::warn!("{}: its open transaction is left to its next owner ({e})", run.name);
            }
        }
    }

    /// Take in the tasks that ended here. One that finished stays ended while the group gives
    /// it to this worker; one fenced by a task started elsewhere, or failed by the cluster (a
    /// broker gone), starts again if the group still gives it here; any other failure is the
    /// worker's.
    fn reap(&self, tasks: &mut Tasks) -> Result<()> {
        let name = &self.layout.job.name;
        let mut ended = Vec::new();
        for (task, run) in &tasks.running {
            match run.handle.state() {
                JobState::Running => {}
                JobState::Failed(e) if e.kind == weir_core::ErrorKind::Fenced => {
                    log::info!("job '{name}': task {}/{} fenced (its sink said why)", task.0, task.1);
                    ended.push((*task, false));
                }
                JobState::Failed(e) if e.kind == weir_core::ErrorKind::External => {
                    log::warn!("job '{name}': task {}/{}: {e}", task.0, task.1);
                    ended.push((*task, false));
                }
                JobState::Failed(e) => return Err(e.context(format!("job '{name}', task {}/{}", task.0, task.1))),
                _ => ended.push((*task, true)),
            }
        }
        for (task, finished) in ended {
            let Some(run) = tasks.running.remove(&task) else { continue };
            if finished {
                tasks.settled.insert(task);
                continue;
            }
            // Its open transaction would hold every reader of its output back until the
            // broker times it out (the next owner fences it in any case, when it starts).
            let aborted = tokio::task::block_in_place(|| run.seqs.abort_open(&self.layout.kafka, &run.name));
            if let Err(e) = aborted {
                log::warn!(
                    "job '{name}': task {}/{}: its open transaction is left to its next owner ({e})",
                    task.0,
                    task.1
                );
            }
            tasks.retry.insert(task, (Instant::now() + FIRST_RETRY, FIRST_RETRY));
        }
        Ok(())
    }

    /// Follow the group's assignment of `sub`: stop what it revoked (the revocation waits for
    /// that), and start what it gives.
    fn follow(&self, sub: &SubTopology, membership: &Membership, tasks: &mut Tasks) -> Result<()> {
        let name = &self.layout.job.name;
        let assignment = membership.assigned.borrow().clone();
        if tasks.last_round.get(&sub.id) != Some(&assignment.round) {
            log::info!(
                "job '{name}': sub-topology {}: this worker's tasks are now {:?}",
                sub.id,
                assignment.partitions
            );
            // A new assignment, even one of the same tasks (they may have been elsewhere in
            // between): what was settled may be ours again to start.
            tasks.settled.retain(|(s, _)| *s != sub.id);
            tasks.last_round.insert(sub.id, assignment.round);
        }
        let assigned = assignment.partitions;
        let gone: Vec<TaskId> =
            tasks.running.keys().filter(|(s, p)| *s == sub.id && !assigned.contains(p)).copied().collect();
        for task in gone {
            if let Some(run) = tasks.running.remove(&task) {
                log::info!("job '{name}': task {}/{} revoked; stopping it here", task.0, task.1);
                run.handle.cancel();
                tasks.stopping.push((sub.id, run.handle));
            }
        }
        tasks.retry.retain(|(s, p), _| *s != sub.id || assigned.contains(p));
        tasks.stopping.retain(|(_, h)| matches!(h.state(), JobState::Running));
        if !tasks.stopping.iter().any(|(s, _)| *s == sub.id) && *membership.released.borrow() < assignment.round {
            membership.released.send_replace(assignment.round);
        }
        let mut owned: Option<BTreeSet<i32>> = None;
        for p in assigned {
            let task = (sub.id, p);
            if tasks.running.contains_key(&task) || tasks.settled.contains(&task) {
                continue;
            }
            let backoff = match tasks.retry.get(&task) {
                Some((at, _)) if Instant::now() < *at => continue,
                Some((_, backoff)) => *backoff,
                None => FIRST_RETRY,
            };
            // What this worker's group member was told can be stale (a worker paused while
            // its replacement took its place has not heard yet): the group's own assignment
            // must agree before the task fences anyone.
            let owned = owned.get_or_insert_with(|| {
                tokio::task::block_in_place(|| self.owned(sub)).unwrap_or_else(|e| {
                    log::warn!("job '{name}': sub-topology {}: cannot read the group's assignment ({e})", sub.id);
                    BTreeSet::new()
                })
            });
            if !owned.contains(&p) {
                log::debug!("job '{name}': task {}/{p}: not this worker's in the group yet", sub.id);
                tasks.retry.insert(task, (Instant::now() + Duration::from_millis(500), backoff));
                continue;
            }
            tasks.next_id += 1;
            match tokio::task::block_in_place(|| self.start(sub, p, tasks.next_id)) {
                Ok(Some(run)) => {
                    tasks.retry.remove(&task);
                    tasks.running.insert(task, run);
                }
                Ok(None) => {
                    tasks.retry.insert(task, (Instant::now() + Duration::from_millis(500), backoff));
                }
                // The cluster did not answer in time (a worker paused, a broker moving): the
                // task stays assigned here, and is tried again.
                Err(e) if e.kind == weir_core::ErrorKind::External => {
                    log::warn!("job '{name}': task {}/{p} not started ({e}); trying again in {backoff:?}", sub.id);
                    tasks.retry.insert(task, (Instant::now() + backoff, (backoff * 2).min(LAST_RETRY)));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The tasks of `sub` the group coordinator gives this worker now, in a settled round.
    fn owned(&self, sub: &SubTopology) -> Result<BTreeSet<i32>> {
        let (state, owners) = group::assignment(&self.layout.kafka, &sub.group(&self.layout.job.name))?;
        if state != "Stable" {
            return Ok(BTreeSet::new());
        }
        Ok(owners.into_iter().filter(|((client, _), _)| *client == self.member.name).flat_map(|(_, p)| p).collect())
    }

    /// Whether every task of the job has committed its final checkpoint.
    fn all_ended(&self) -> Result<bool> {
        let layout = &self.layout;
        for sub in &layout.subs {
            let topics = layout.topics_of(sub);
            for p in 0..layout.tasks[&sub.id] as i32 {
                let group = sub.offsets_group(&layout.job.name);
                let done = group::committed_checkpoint(&layout.kafka, &group, &topics, p)?;
                if !done.is_some_and(|(_, last)| last) {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// Start task `p` of `sub`: restored from the checkpoint its committed offsets name.
    /// `None`: the group no longer gives the task to this worker.
    fn start(&self, sub: &SubTopology, p: i32, id: u64) -> Result<Option<Running>> {
        let layout = self.layout.clone();
        let job = &layout.job;
        let tasks = layout.tasks[&sub.id];
        let name = format!("{}/{}-{p}", job.name, sub.id);
        let group = sub.offsets_group(&job.name);
        let topics = layout.topics_of(sub);
        let shared = Arc::new(TaskShared::default());
        let connectors: Arc<dyn ConnectorFactory> = Arc::new(TaskConnectors {
            inner: self.connectors.clone(),
            partition: p as usize,
            tasks,
            upstream_tasks: layout.tasks.clone(),
            shared: shared.clone(),
        });
        let committed: store::Committed = {
            let (kafka, group, topics) = (layout.kafka.clone(), group.clone(), topics.clone());
            Arc::new(move || Ok(group::committed_checkpoint(&kafka, &group, &topics, p)?.map(|(e, _)| e)))
        };
        let storage = layout.checkpoint.storage.scoped(&format!("task-{}-{p}", sub.id));
        let store = Arc::new(TaskStore::new(storage.clone(), committed.clone()));
        // From here on a predecessor on another worker cannot complete a checkpoint.
        store.claim()?;
        let mut config = layout.checkpoint.clone();
        config.storage = storage;
        // The task's own plan: its part of the job, ending in a repartition topic or the sink.
        let sink_name = match &sub.output {
            Output::Repartition { topic, .. } => topic.clone(),
            Output::Sink => job.single()?.1.name.clone(),
        };
        let branch = weir_runtime::identity::Branch { root: &sub.root, sink: &sink_name, connector: "weir-worker" };
        let ids = weir_runtime::identity::Identities::of(&[branch]);
        let sink_part = ids.sink(0).ok_or_else(|| WeirError::internal("a task without its sink"))?;
        let sink_key = format!("{}0", weir_runtime::sink_task_kind(sink_part));
        config.plan.fingerprint = format!("{}-{}", config.plan.fingerprint, sub.id);
        config.plan.parts = ids.parts().to_vec();
        let mut options = job.options.clone();
        options.parallelism = 1;
        options.rocksdb = options.rocksdb.map(|r| r.join(format!("task-{}-{p}", sub.id)));
        // Fence the transactions a predecessor may have open, then check that it did not
        // commit a newer checkpoint meanwhile (if it did, restore that one instead).
        let prefix = format!("weir-{}-{}-{p}", job.name, sub.id);
        let (restored, first_seq) = loop {
            let restored = store.latest(&config.plan)?;
            // The sink task's key, by format version.
            let key = match restored.as_ref().map(|r| r.version) {
                Some(1) => "sink-task0",
                _ => sink_key.as_str(),
            };
            let state = restored.as_ref().and_then(|r| r.tasks.get(key)).and_then(|t| t.sink.as_deref());
            let (from, began) = (sink::next_transaction(state, &name)?, Instant::now());
            let first = sink::fence(&layout.kafka, &prefix, from, &name)?;
            log::debug!("task {name}: fenced '{prefix}-{from}' to '{prefix}-{}' in {:?}", first - 1, began.elapsed());
            if committed()? == restored.as_ref().map(|r| r.epoch) {
                break (restored, first);
            }
        };
        // Asked again now that the predecessors are fenced: a worker paused while it started
        // the task may have resumed after its replacement took it over, and must not run it.
        if !self.owned(sub)?.contains(&p) {
            log::info!("task {name}: not started, the group gives it to another worker now");
            return Ok(None);
        }
        options.restore = restored;
        let seqs = sink::Seqs::new(prefix, first_seq);
        match &options.restore {
            Some(r) => log::info!("task {name} starts from its committed checkpoint {}", r.epoch),
            None => log::info!("task {name} starts from the beginning"),
        }
        options.checkpoint = Some((config, store as Arc<dyn CheckpointStore>));
        let make_target = {
            let (layout, connectors) = (layout.clone(), self.connectors.clone());
            let output = match &sub.output {
                Output::Repartition { topic, keys } => Some((topic.clone(), keys.clone())),
                Output::Sink => None,
            };
            move || -> Result<Target> {
                let job = &layout.job;
                let (_, sink) = job.single()?;
                Ok(match &output {
                    Some((topic, keys)) => Target::Repartition {
                        topic: topic.clone(),
                        keys: keys.clone(),
                        partitions: job.options.parallelism,
                        key_groups: job.options.key_groups,
                    },
                    None if matches!(sink.options.get("connector"), Some("kafka" | "upsert-kafka")) => {
                        Target::Topic(weir_connectors::kafka::TopicWriter::new(sink, &sink.schema)?)
                    }
                    None => {
                        let split = Split { index: p as usize, count: tasks };
                        Target::Other(connectors.sink(sink, sink.schema.clone(), split)?)
                    }
                })
            }
        };
        let kafka = layout.kafka.clone();
        let task_name = format!("task {}/{p} of job '{}'", sub.id, job.name);
        let (run_name, run_seqs) = (task_name.clone(), seqs.clone());
        let spec = SinkSpec {
            name: sink_name,
            connector: "weir-worker".into(),
            parallel: false,
            make: Box::new(move |_| {
                let sink = TaskSink::new(
                    task_name.clone(),
                    p as usize,
                    kafka.clone(),
                    &group,
                    make_target()?,
                    shared.clone(),
                    seqs.clone(),
                )?;
                Ok(Box::new(sink) as Box<dyn weir_core::Sink>)
            }),
        };
        let handle = spawn_job(id, name, vec![(sub.root.clone(), spec)], connectors, options)?;
        // Its guarantee is the job's, as `EXPLAIN INSERT` of the file reports it.
        self.watched.add(handle.clone(), "a worker's task (see EXPLAIN of the job)".to_string(), Vec::new());
        Ok(Some(Running { handle, name: run_name, seqs: run_seqs }))
    }
}

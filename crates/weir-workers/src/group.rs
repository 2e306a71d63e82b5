//! Membership through Kafka's consumer-group protocol. A worker joins one group per
//! sub-topology, subscribed to the topics the sub-topology reads; the partition numbers the
//! group assigns it are the tasks it runs. The range assignor gives a member the same
//! numbers of every topic of the same partition count, which is what a task needs (a join
//! reads partition `p` of both its inputs). The member reads nothing itself (its partitions
//! are paused): tasks read with their own consumers, from the offsets their checkpoints hold.
//!
//! The group also holds each task's committed offsets, committed by the task's transaction
//! with the checkpoint they belong to as metadata: which checkpoint to restore, how far
//! the task has read (its lag) and whether it has finished.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tokio::sync::watch;
use weir_core::{Result, WeirError};

use super::sink::parse_commit_metadata;

const TIMEOUT: Duration = Duration::from_secs(10);

/// How long leaving a group may take before the worker goes on without waiting: librdkafka's
/// consumer close can wait without end on a rebalance that never completes.
const LEAVE_DEADLINE: Duration = Duration::from_secs(10);

fn kafka(what: &str, e: rdkafka::error::KafkaError) -> WeirError {
    WeirError::external(format!("Kafka: {what}: {e}"))
}

struct GroupContext {
    assigned: watch::Sender<Assignment>,
    /// The last round whose revoked tasks the worker has stopped.
    released: watch::Receiver<u64>,
    /// How long a revocation waits for them.
    stop_wait: Duration,
    /// An error that keeps this worker out of the group for good.
    fatal: Arc<std::sync::Mutex<Option<String>>>,
    group: String,
    session_timeout: Duration,
}

impl ClientContext for GroupContext {
    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        use rdkafka::types::RDKafkaErrorCode::{Fatal, FencedInstanceId, InvalidSessionTimeout};
        if matches!(error.rdkafka_error_code(), Some(FencedInstanceId | Fatal)) {
            // Said as observed: the broker fenced this member. Who took its id is not known
            // here (a replacement, or this worker's own rejoin after a pause past its session).
            let message = format!(
                "the broker fenced this worker's membership of group '{}' ({}: {reason}); this one stops",
                self.group,
                error.rdkafka_error_code().map_or_else(|| "fatal".to_string(), |c| format!("{c:?}"))
            );
            if let Ok(mut f) = self.fatal.lock() {
                f.get_or_insert(message);
            }
            return;
        }
        if error.rdkafka_error_code() == Some(InvalidSessionTimeout) {
            let message = format!(
                "the broker refuses to let this worker join group '{}' with a session timeout of {:?} \
                 ('workers.session-timeout'): it must lie within the broker's group.min.session.timeout.ms and \
                 group.max.session.timeout.ms (6 s and 30 min by default)",
                self.group, self.session_timeout
            );
            if let Ok(mut f) = self.fatal.lock() {
                f.get_or_insert(message);
            }
            return;
        }
        log::error!("Kafka group '{}': {error}: {reason}", self.group);
    }
}

impl ConsumerContext for GroupContext {
    /// Partitions revoked (the eager protocol revokes them all): the worker stops their tasks
    /// before this member rejoins, so that the rebalance hands them on only once they are
    /// stopped and their open transactions aborted (as Kafka Streams suspends its tasks
    /// here). A worker that cannot in time is still fenced by the tasks' next owners.
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(_) = rebalance else { return };
        let mut round = 0;
        self.assigned.send_modify(|a| {
            a.round += 1;
            a.partitions.clear();
            round = a.round;
        });
        let deadline = std::time::Instant::now() + self.stop_wait;
        while *self.released.borrow() < round && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(list) = rebalance {
            let _ = consumer.pause(list);
            let partitions = list.elements().iter().map(|e| e.partition()).collect();
            self.assigned.send_modify(|a| {
                a.round += 1;
                a.partitions = partitions;
            });
        }
    }
}

/// The partition numbers the group gave this worker, in its `round`-th assignment here.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Assignment {
    pub round: u64,
    pub partitions: BTreeSet<i32>,
}

/// This worker's membership in one sub-topology's group; leaves the group when dropped.
pub struct Membership {
    pub assigned: watch::Receiver<Assignment>,
    /// The worker says here that it has stopped the tasks of a round's revocation.
    pub released: watch::Sender<u64>,
    fatal: Arc<std::sync::Mutex<Option<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Closed when the group thread has left the group and closed its client.
    left: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
    group: String,
}

impl Membership {
    pub fn join(
        config: &rdkafka::ClientConfig,
        group: &str,
        topics: &[String],
        member: &super::Member,
        session_timeout: Duration,
    ) -> Result<Self> {
        let (tx, rx) = watch::channel(Assignment::default());
        let (released_tx, released_rx) = watch::channel(0u64);
        let fatal = Arc::new(std::sync::Mutex::new(None));
        let mut config = config.clone();
        let session = session_timeout.as_millis().max(100);
        config
            .set("group.id", group)
            .set("client.id", &member.name)
            .set("enable.auto.commit", "false")
            .set("partition.assignment.strategy", "range")
            .set("session.timeout.ms", session.to_string())
            .set("heartbeat.interval.ms", (session / 12).max(50).to_string())
            // Also the rebalance timeout: how long a rebalance waits for a member to rejoin
            // before it goes on without it. This member is polled all the time, so a member
            // that does not rejoin within the session timeout is dead or paused.
            .set("max.poll.interval.ms", session.to_string());
        if let Some(instance) = &member.instance {
            config.set("group.instance.id", instance);
        }
        let consumer: BaseConsumer<GroupContext> = config
            .create_with_context(GroupContext {
                assigned: tx,
                released: released_rx,
                stop_wait: session_timeout / 2,
                fatal: fatal.clone(),
                group: group.to_string(),
                session_timeout,
            })
            .map_err(|e| kafka("cannot create a group member", e))?;
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        consumer.subscribe(&names).map_err(|e| kafka(&format!("cannot join group '{group}'"), e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let group_name = group.to_string();
        let (left_tx, left) = std::sync::mpsc::channel::<()>();
        // librdkafka runs the group protocol (heartbeats, rebalances) while it is polled.
        let thread = std::thread::Builder::new()
            .name(format!("weir group {group}"))
            .spawn(move || {
                while !stopping.load(Ordering::SeqCst) {
                    if let Some(Err(e)) = consumer.poll(Duration::from_millis(100)) {
                        log::debug!("group '{group_name}': {e}");
                    }
                }
                consumer.unsubscribe();
                // Fault injection: a close that hangs, as librdkafka's can.
                weir_core::fault::pause("group_close");
                drop(consumer);
                drop(left_tx);
            })
            .map_err(|e| WeirError::internal(format!("cannot start a group thread: {e}")))?;
        Ok(Self {
            assigned: rx,
            released: released_tx,
            fatal,
            stop,
            thread: Some(thread),
            left: std::sync::Mutex::new(left),
            group: group.to_string(),
        })
    }

    /// Why this worker cannot be a member, if it cannot.
    pub fn failed(&self) -> Option<WeirError> {
        self.fatal.lock().ok().and_then(|f| f.clone()).map(WeirError::fenced)
    }
}

impl Drop for Membership {
    /// Leaving, the worker has stopped its tasks already: the revocation that closing the
    /// member brings need not wait for them.
    fn drop(&mut self) {
        self.begin_leaving();
        self.finish_leaving(std::time::Instant::now() + LEAVE_DEADLINE);
    }
}

impl Membership {
    /// Leave every group at once, all within one [`LEAVE_DEADLINE`].
    pub fn leave_all(mut memberships: Vec<Membership>) {
        memberships.iter().for_each(Membership::begin_leaving);
        let deadline = std::time::Instant::now() + LEAVE_DEADLINE;
        memberships.iter_mut().for_each(|m| m.finish_leaving(deadline));
    }

    fn begin_leaving(&self) {
        self.released.send_replace(u64::MAX);
        self.stop.store(true, Ordering::SeqCst);
    }

    /// A close stuck past `deadline` is left behind (the process exits all the same): the
    /// group times the member out, as it would a dead one.
    fn finish_leaving(&mut self, deadline: std::time::Instant) {
        let Some(t) = self.thread.take() else { return };
        let wait = deadline.saturating_duration_since(std::time::Instant::now());
        let left = match self.left.lock() {
            Ok(left) => left.recv_timeout(wait),
            Err(_) => Err(std::sync::mpsc::RecvTimeoutError::Disconnected),
        };
        match left {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => log::warn!(
                "leaving group '{}' took more than {LEAVE_DEADLINE:?} (the Kafka client's close is stuck); going on \
                 without it",
                self.group
            ),
            _ => {
                let _ = t.join();
            }
        }
    }
}

/// What a group holds for one partition: its committed offset and that commit's checkpoint.
#[derive(Debug, Clone, Default)]
pub struct Commit {
    pub offset: Option<i64>,
    pub checkpoint: Option<(u64, bool)>,
}

/// The committed offsets of `group` for `partition` of each of `topics`.
pub fn committed(
    config: &rdkafka::ClientConfig,
    group: &str,
    topics: &[String],
    partition: i32,
) -> Result<Vec<Commit>> {
    let consumer = reader(config, group)?;
    let mut list = TopicPartitionList::new();
    for topic in topics {
        list.add_partition(topic, partition);
    }
    let list = consumer
        .committed_offsets(list, TIMEOUT)
        .map_err(|e| kafka(&format!("cannot read the committed offsets of group '{group}'"), e))?;
    Ok(list
        .elements()
        .iter()
        .map(|e| Commit {
            offset: match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            },
            checkpoint: parse_commit_metadata(e.metadata()),
        })
        .collect())
}

/// The checkpoint task `partition` of the group last committed, if it has committed one.
pub fn committed_checkpoint(
    config: &rdkafka::ClientConfig,
    group: &str,
    topics: &[String],
    partition: i32,
) -> Result<Option<(u64, bool)>> {
    let commits = committed(config, group, topics, partition)?;
    Ok(commits.iter().filter_map(|c| c.checkpoint).max())
}

fn reader(config: &rdkafka::ClientConfig, group: &str) -> Result<BaseConsumer> {
    let mut config = config.clone();
    config.set("group.id", group).set("enable.auto.commit", "false");
    config.create().map_err(|e| kafka("cannot create a consumer", e))
}

/// The partition count of `topic`, if it exists.
pub fn partitions(config: &rdkafka::ClientConfig, topic: &str) -> Result<Option<usize>> {
    let consumer = reader(config, "weir-metadata")?;
    let metadata = consumer
        .fetch_metadata(Some(topic), TIMEOUT)
        .map_err(|e| kafka(&format!("cannot read the metadata of topic '{topic}'"), e))?;
    Ok(metadata.topics().iter().find(|t| t.name() == topic && t.error().is_none()).map(|t| t.partitions().len()))
}

/// The high watermark (end offset) of a partition.
pub fn end_offset(config: &rdkafka::ClientConfig, topic: &str, partition: i32) -> Result<i64> {
    let consumer = reader(config, "weir-metadata")?;
    let (_, high) = consumer
        .fetch_watermarks(topic, partition, TIMEOUT)
        .map_err(|e| kafka(&format!("cannot read the end of topic '{topic}'"), e))?;
    Ok(high)
}

/// Each member (client id, host) of a group and the partition numbers assigned to it.
pub type Owners = BTreeMap<(String, String), BTreeSet<i32>>;

/// The members of `group` and the partition numbers assigned to each, as the group's
/// coordinator has them: the group's state, and (member's client id, host) -> partitions.
pub fn assignment(config: &rdkafka::ClientConfig, group: &str) -> Result<(String, Owners)> {
    let consumer = reader(config, "weir-metadata")?;
    let groups = consumer
        .fetch_group_list(Some(group), TIMEOUT)
        .map_err(|e| kafka(&format!("cannot describe group '{group}'"), e))?;
    let mut out = BTreeMap::new();
    let mut state = String::new();
    for g in groups.groups().iter().filter(|g| g.name() == group) {
        state = g.state().to_string();
        for m in g.members() {
            let partitions = m.assignment().map(parse_assignment).unwrap_or_default();
            out.insert((m.client_id().to_string(), m.client_host().to_string()), partitions);
        }
    }
    Ok((state, out))
}

/// The consumer protocol's assignment: version, then per topic its name and partitions.
fn parse_assignment(bytes: &[u8]) -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    let mut at = 2; // version
    let i32_at = |at: usize| bytes.get(at..at + 4).map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let Some(topics) = i32_at(at) else { return out };
    at += 4;
    for _ in 0..topics.max(0) {
        let Some(len) = bytes.get(at..at + 2).map(|b| i16::from_be_bytes([b[0], b[1]])) else { return out };
        at += 2 + len.max(0) as usize;
        let Some(n) = i32_at(at) else { return out };
        at += 4;
        for _ in 0..n.max(0) {
            let Some(p) = i32_at(at) else { return out };
            out.insert(p);
            at += 4;
        }
    }
    out
}

/// Create `topic` with `partitions` partitions. Workers starting together may race: if it
/// exists by then, its partition count.
pub fn create_topic(config: &rdkafka::ClientConfig, topic: &str, partitions: usize) -> Result<Option<usize>> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> =
        config.create().map_err(|e| kafka("cannot create an admin client", e))?;
    let new = NewTopic::new(topic, partitions as i32, TopicReplication::Fixed(1));
    let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
    let results = futures::executor::block_on(admin.create_topics([&new], &options))
        .map_err(|e| kafka(&format!("cannot create topic '{topic}'"), e))?;
    for result in results {
        if let Err((_, code)) = result {
            if code != rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists {
                return Err(WeirError::external(format!("Kafka: cannot create topic '{topic}': {code}")));
            }
        }
    }
    log::info!("repartition topic '{topic}': {partitions} partitions");
    partitions_of(config, topic)
}

fn partitions_of(config: &rdkafka::ClientConfig, topic: &str) -> Result<Option<usize>> {
    // Metadata may lag a creation for a moment.
    for _ in 0..50 {
        if let Some(n) = partitions(config, topic)? {
            return Ok(Some(n));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(None)
}

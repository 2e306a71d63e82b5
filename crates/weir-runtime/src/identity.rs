//! Stable identities of what a job keeps in checkpoints: its stateful operators, the scans of
//! its sources (their positions) and its sinks (their pre-commits).
//!
//! A checkpoint keys each part of the state by an identity that does not depend on how the
//! plan is cut into tasks, so that a checkpoint restores into a plan that changed elsewhere
//! (a filter added after an aggregate, a second INSERT, another sink) with the state of every
//! unchanged operator. Each part has:
//! - a *slot*: where it sits, readable. For an operator, its INSERT's target (and which
//!   INSERT into that target) and its place among the stateful operators of that INSERT's
//!   plan, counted inputs first, left before right: not its place in a fused chain, which an
//!   added stateless operator moves. For a scan, its table and which scan of that table; for
//!   a sink, its table and which INSERT into it.
//! - an *id*: a hash of the slot and the state's shape (key and state types, the operator's
//!   kind, the columns it passes on). An operator whose state would be read differently gets
//!   another id in the same slot: a change, refused on restore with both named
//!   ([`crate::checkpoint::check_parts`]).
//!
//! Weir owns the hash (FNV-1a over the text), so an id is the same on every machine and
//! version; a change to what goes into it is a new checkpoint format version.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use weir_core::TableDef;

use crate::plan::{Node, OperatorSpec};
use crate::state_shape::columns;

/// One part of a job's checkpointed state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatePart {
    /// Stable across unrelated changes to the SQL: the slot and the state's shape, hashed.
    pub id: String,
    /// Where it sits (see the module documentation).
    pub slot: String,
    /// What `EXPLAIN` and errors call it.
    pub name: String,
}

impl StatePart {
    fn new(slot: String, shape: &str, name: String) -> Self {
        let id = format!("{:016x}", crate::checkpoint::checksum(format!("{slot}\n{shape}").as_bytes()));
        Self { id, slot, name }
    }
}

/// What the builder needs of one INSERT: its plan, its sink table's name and connector.
pub struct Branch<'a> {
    pub root: &'a Node,
    pub sink: &'a str,
    pub connector: &'a str,
}

/// Every part of a job's state, found from its plan alone (the builder and the check before a
/// restore agree on them).
#[derive(Debug, Default)]
pub struct Identities {
    /// Stateful operators, by the address of their spec in the plan being built: the plan is
    /// not moved while its tasks are built, and an address needs no change to the plan's
    /// types.
    operators: HashMap<usize, StatePart>,
    /// Scans, by [`scan_key`].
    scans: HashMap<String, StatePart>,
    /// Sinks, by INSERT.
    sinks: Vec<StatePart>,
    /// Every part, in plan order.
    parts: Vec<StatePart>,
}

impl Identities {
    pub fn of(branches: &[Branch<'_>]) -> Self {
        let mut ids = Identities::default();
        let mut targets: HashMap<&str, usize> = HashMap::new();
        // Scans of each table, in the order the builder makes them.
        let mut scans_of_table: HashMap<String, usize> = HashMap::new();
        for branch in branches {
            let nth = targets.entry(branch.sink).or_insert(0);
            let target = match *nth {
                0 => branch.sink.to_string(),
                n => format!("{}#{n}", branch.sink),
            };
            *nth += 1;
            let mut walk = Walk { ids: &mut ids, target: &target, place: 0, met: HashMap::new() };
            walk.node(branch.root, &mut scans_of_table);
            let sink = StatePart::new(format!("sink {target}"), branch.connector, format!("Sink: {}", branch.sink));
            ids.sinks.push(sink.clone());
            ids.parts.push(sink);
        }
        ids
    }

    pub fn operator(&self, spec: &OperatorSpec) -> Option<&StatePart> {
        self.operators.get(&(spec as *const OperatorSpec as usize))
    }

    pub fn scan(&self, key: &str) -> Option<&StatePart> {
        self.scans.get(key)
    }

    /// The sink of INSERT `k`.
    pub fn sink(&self, k: usize) -> Option<&StatePart> {
        self.sinks.get(k)
    }

    pub fn parts(&self) -> &[StatePart] {
        &self.parts
    }
}

/// How one INSERT's plan is walked: sources and operators inputs first, left before right,
/// as the builder meets them.
struct Walk<'a> {
    ids: &'a mut Identities,
    target: &'a str,
    /// Stateful operators met so far in this INSERT.
    place: usize,
    /// Scans of each identity met so far in this INSERT (a self-join scans a table twice).
    met: HashMap<String, usize>,
}

impl Walk<'_> {
    fn node(&mut self, node: &Node, scans_of_table: &mut HashMap<String, usize>) {
        match node {
            Node::Source { table, projection, schema, .. } => {
                let identity = scan_identity(table, projection);
                let nth = self.met.entry(identity.clone()).or_insert(0);
                let key = scan_key(&identity, *nth);
                *nth += 1;
                if self.ids.scans.contains_key(&key) {
                    return; // shared with an earlier INSERT
                }
                let k = scans_of_table.entry(table.name.clone()).or_insert(0);
                let slot = match *k {
                    0 => format!("scan {}", table.name),
                    k => format!("scan {}#{k}", table.name),
                };
                *k += 1;
                let connector = table.options.get("connector").unwrap_or("?");
                let shape = format!("{connector} {projection:?} [{}]", columns(schema));
                let part = StatePart::new(slot, &shape, format!("Source: {}", table.name));
                self.ids.scans.insert(key, part.clone());
                self.ids.parts.push(part);
            }
            Node::Values { .. } => {}
            Node::Operator { spec, input } => {
                self.node(input, scans_of_table);
                self.operator(spec, node);
            }
            Node::Exchange { input, .. } => self.node(input, scans_of_table),
            Node::Union { inputs, .. } => inputs.iter().for_each(|i| self.node(i, scans_of_table)),
            Node::Join { left, right, spec } => {
                self.node(left, scans_of_table);
                self.node(right, scans_of_table);
                self.operator(spec, node);
            }
        }
    }

    fn operator(&mut self, spec: &OperatorSpec, node: &Node) {
        if !spec.is_stateful() {
            return;
        }
        let slot = format!("{}/{}", self.target, self.place);
        self.place += 1;
        let mut shape = spec.state_shape();
        let _ = write!(shape, " [{}]", columns(&node.schema()));
        let part = StatePart::new(slot, &shape, spec.describe());
        self.ids.operators.insert(spec as *const OperatorSpec as usize, part.clone());
        self.ids.parts.push(part);
    }
}

/// A part of the plan that wrote a checkpoint, as its manifest lists it.
#[derive(Debug, Clone)]
pub struct OldPart {
    pub id: String,
    pub slot: String,
    pub name: String,
    /// Whether the checkpoint holds state of it.
    pub has_state: bool,
}

/// Whether a checkpoint's state fits a plan, part by part:
/// - a part under the same id takes its state;
/// - a part of the plan that the checkpoint lacks starts empty;
/// - a part whose slot holds state of another id has changed: refused, both named (what to
///   do with it is for an upgrade to decide). A sink replaced by one of another connector
///   counts as unclaimed state: its pre-commits can only be dropped;
/// - state that no part of the plan claims is refused unless `ignore_unclaimed`, as Flink
///   refuses a savepoint's unclaimed state.
///
/// Parts without state in the checkpoint (a print sink, an operator that kept nothing) are
/// never refused: nothing is lost.
pub fn check_parts(old: &[OldPart], plan: &crate::checkpoint::PlanState) -> Result<(), String> {
    let mut refused = Vec::new();
    for o in old.iter().filter(|o| o.has_state) {
        if plan.parts.iter().any(|p| p.id == o.id) {
            continue;
        }
        match plan.parts.iter().find(|p| p.slot == o.slot) {
            // Another sink in the same place (another connector): the old one's pre-commits
            // have no one to publish them. Flink drops a replaced sink's state only when told.
            Some(p) if p.slot.starts_with("sink ") && plan.ignore_unclaimed => {
                log::warn!("the pre-commits of '{}' (id {}) are dropped: the sink has been replaced", o.name, o.id)
            }
            Some(p) if p.slot.starts_with("sink ") => refused.push(format!(
                "'{}' (id {}) replaces the sink of id {}, whose pre-commits in the checkpoint would be dropped \
                 (SET 'execution.savepoint.ignore-unclaimed-state' = 'true' to drop them)",
                p.name, p.id, o.id
            )),
            Some(p) => refused.push(format!(
                "'{}' (id {}) has changed: the checkpoint holds the state of '{}' (id {}) in its place",
                p.name, p.id, o.name, o.id
            )),
            None if plan.ignore_unclaimed => {
                log::warn!("the state of '{}' (id {}) is dropped: no part of the job claims it", o.name, o.id)
            }
            None => refused.push(format!(
                "the state of '{}' (id {}) is claimed by no part of this job (SET \
                 'execution.savepoint.ignore-unclaimed-state' = 'true' to drop it)",
                o.name, o.id
            )),
        }
    }
    for p in &plan.parts {
        if !old.iter().any(|o| o.id == p.id || o.slot == p.slot) {
            log::info!("'{}' (id {}) is new: it starts with no state", p.name, p.id);
        }
    }
    match refused.is_empty() {
        true => Ok(()),
        false => Err(refused.join("; ")),
    }
}

/// What makes two reads of a table one scan: the same table, options and columns.
pub(crate) fn scan_identity(table: &Arc<TableDef>, projection: &Option<Vec<usize>>) -> String {
    format!("{}\u{0}{:?}\u{0}{:?}", table.name, table.options, projection)
}

/// The `nth` scan of one identity in an INSERT (a self-join's second read is a scan of its
/// own, shared with other INSERTs' second).
pub(crate) fn scan_key(identity: &str, nth: usize) -> String {
    format!("{identity}\u{0}{nth}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::PlanState;

    fn part(slot: &str, shape: &str) -> StatePart {
        StatePart::new(slot.into(), shape, format!("op at {slot}"))
    }

    fn old(p: &StatePart, has_state: bool) -> OldPart {
        OldPart { id: p.id.clone(), slot: p.slot.clone(), name: p.name.clone(), has_state }
    }

    fn plan(parts: Vec<StatePart>, ignore_unclaimed: bool) -> PlanState {
        PlanState { parts, ignore_unclaimed, ..Default::default() }
    }

    #[test]
    fn ids_are_weirs_own_and_pinned() {
        // FNV-1a of the slot and the shape: the same on every machine and version. A change
        // here moves every checkpoint's state: a new checkpoint format version.
        assert_eq!(part("out/0", "group aggregate").id, "e2518b884340cf0a");
        assert_ne!(part("out/0", "group aggregate").id, part("out/1", "group aggregate").id);
        assert_ne!(part("out/0", "group aggregate").id, part("out/0", "top n").id);
    }

    #[test]
    fn unchanged_parts_restore_and_new_ones_start_empty() {
        let (agg, sink) = (part("out/0", "agg"), part("sink out", "filesystem"));
        let added = part("out2/0", "agg");
        let old = [old(&agg, true), old(&sink, true)];
        assert_eq!(check_parts(&old, &plan(vec![agg.clone(), sink.clone(), added], false)), Ok(()));
    }

    #[test]
    fn a_changed_operator_is_refused_with_both_named() {
        let (was, now) = (part("out/0", "agg max"), part("out/0", "agg sum"));
        let err = check_parts(&[old(&was, true)], &plan(vec![now.clone()], true)).expect_err("changed");
        assert!(err.contains(&now.id) && err.contains(&was.id) && err.contains("has changed"), "{err}");
        // Without state, nothing is lost: not refused.
        assert_eq!(check_parts(&[old(&was, false)], &plan(vec![now], false)), Ok(()));
    }

    #[test]
    fn unclaimed_state_and_replaced_sinks_are_refused_unless_dropping_is_asked_for() {
        let gone = part("out/3", "top n");
        let (file, collect) = (part("sink out", "filesystem"), part("sink out", "collect"));
        let old = [old(&gone, true), old(&file, true)];
        let err = check_parts(&old, &plan(vec![collect.clone()], false)).expect_err("unclaimed");
        assert!(err.contains(&gone.id) && err.contains("claimed by no part"), "{err}");
        assert!(err.contains(&file.id) && err.contains("replaces the sink"), "{err}");
        assert!(err.contains("execution.savepoint.ignore-unclaimed-state"), "{err}");
        assert_eq!(check_parts(&old, &plan(vec![collect], true)), Ok(()));
    }
}

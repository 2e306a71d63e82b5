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
//!   ([`crate::upgrade`]).
//!
//! Weir owns the hash (FNV-1a over the text), so an id is the same on every machine and
//! version; a change to what goes into it is a new checkpoint format version.

use std::collections::HashMap;
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
    /// What its state is, readable: an operator's kind and state types, a scan's connector,
    /// a sink's connector. Kept in the manifest, so that an upgrade can tell what changed.
    pub shape: String,
    /// What it passes on: an operator's output columns, a scan's columns. For a scan (and a
    /// watermark) a change here alone leaves the state readable; for other operators it names
    /// what the state is about ([`crate::upgrade`]).
    pub output: String,
}

impl StatePart {
    /// The id hashes the shape and the output as `shape output`, the text it always hashed.
    pub(crate) fn new(slot: String, shape: String, output: String, name: String) -> Self {
        let text = match output.is_empty() {
            true => format!("{slot}\n{shape}"),
            false => format!("{slot}\n{shape} {output}"),
        };
        let id = format!("{:016x}", crate::checkpoint::checksum(text.as_bytes()));
        Self { id, slot, name, shape, output }
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
    /// The ids of the parts each INSERT uses, a scan shared with an earlier one included.
    branches: Vec<Vec<String>>,
    /// Each scan's id and table.
    tables: Vec<(String, Arc<TableDef>)>,
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
            let mut walk = Walk { ids: &mut ids, target: &target, place: 0, met: HashMap::new(), used: Vec::new() };
            walk.node(branch.root, &mut scans_of_table);
            let mut used = std::mem::take(&mut walk.used);
            let sink = StatePart::new(
                format!("sink {target}"),
                branch.connector.to_string(),
                String::new(),
                format!("Sink: {}", branch.sink),
            );
            used.push(sink.id.clone());
            ids.branches.push(used);
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

    /// The ids of the parts each INSERT uses: INSERTs sharing a scan share its input.
    pub fn branches(&self) -> &[Vec<String>] {
        &self.branches
    }

    /// Each scan's id and the table it reads.
    pub fn tables(&self) -> &[(String, Arc<TableDef>)] {
        &self.tables
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
    /// The ids of the parts this INSERT uses.
    used: Vec<String>,
}

impl Walk<'_> {
    fn node(&mut self, node: &Node, scans_of_table: &mut HashMap<String, usize>) {
        match node {
            Node::Source { table, projection, schema, .. } => {
                let identity = scan_identity(table, projection);
                let nth = self.met.entry(identity.clone()).or_insert(0);
                let key = scan_key(&identity, *nth);
                *nth += 1;
                if let Some(shared) = self.ids.scans.get(&key) {
                    self.used.push(shared.id.clone()); // shared with an earlier INSERT
                    return;
                }
                let k = scans_of_table.entry(table.name.clone()).or_insert(0);
                let slot = match *k {
                    0 => format!("scan {}", table.name),
                    k => format!("scan {}#{k}", table.name),
                };
                *k += 1;
                let connector = table.options.get("connector").unwrap_or("?");
                let output = format!("{projection:?} [{}]", columns(schema));
                let part = StatePart::new(slot, connector.to_string(), output, format!("Source: {}", table.name));
                self.ids.scans.insert(key, part.clone());
                self.ids.tables.push((part.id.clone(), table.clone()));
                self.used.push(part.id.clone());
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
        let output = format!("[{}]", columns(&node.schema()));
        let part = StatePart::new(slot, spec.state_shape(), output, spec.describe());
        self.ids.operators.insert(spec as *const OperatorSpec as usize, part.clone());
        self.used.push(part.id.clone());
        self.ids.parts.push(part);
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

    #[test]
    fn ids_are_weirs_own_and_pinned() {
        // FNV-1a of the slot and the shape: the same on every machine and version. A change
        // here moves every checkpoint's state: a new checkpoint format version.
        let part = |slot: &str, shape: &str| StatePart::new(slot.into(), shape.into(), String::new(), "op".into());
        assert_eq!(part("out/0", "group aggregate").id, "e2518b884340cf0a");
        assert_ne!(part("out/0", "group aggregate").id, part("out/1", "group aggregate").id);
        assert_ne!(part("out/0", "group aggregate").id, part("out/0", "top n").id);
        // The output is hashed after the shape, as one text.
        let with_output = StatePart::new("out/0".into(), "group".into(), "[a:Int64]".into(), "op".into());
        assert_eq!(with_output.id, part("out/0", "group [a:Int64]").id);
    }
}

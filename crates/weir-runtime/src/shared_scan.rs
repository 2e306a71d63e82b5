//! The INSERTs of a statement set that read the same table read it once.
//!
//! Each INSERT is planned on its own, so each reads only the columns it needs. Here the
//! scans of one table are widened to the union of those columns, and each INSERT keeps its
//! own with a `Select` (which costs nothing: it picks columns). The runtime then finds equal
//! scans and makes one source task per split for all of them (see the job builder's
//! `scan_of`): the table is read, parsed and checkpointed once, whatever the number of
//! INSERTs.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::plan::{Node, OperatorSpec};
use weir_core::Result;

/// A table read by several INSERTs through one scan, for `EXPLAIN STATEMENT SET`.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedScan {
    pub table: String,
    /// The columns read, in the table's order.
    pub columns: Vec<String>,
    /// The INSERTs that read it, by position in the set (from 0).
    pub readers: Vec<usize>,
}

/// The identity of a scan apart from its columns: two INSERTs can share a scan only if they
/// read the same table with the same options (an `OPTIONS` hint makes another scan).
fn identity(node: &Node) -> Option<String> {
    match node {
        Node::Source { table, .. } => Some(format!("{}\u{0}{:?}", table.name, table.options)),
        _ => None,
    }
}

/// The stored columns a source reads.
fn read_columns(node: &Node) -> Vec<usize> {
    match node {
        Node::Source { projection: Some(p), .. } => p.clone(),
        Node::Source { table, projection: None, .. } => (0..table.schema.fields().len()).collect(),
        _ => Vec::new(),
    }
}

/// Call `each` with every source of `node`, in the order the job builder meets them.
fn sources_mut(node: &mut Node, each: &mut dyn FnMut(&mut Node) -> Result<()>) -> Result<()> {
    match node {
        Node::Source { .. } => each(node),
        Node::Values { .. } => Ok(()),
        Node::Operator { input, .. } | Node::Exchange { input, .. } => sources_mut(input, each),
        Node::Union { inputs, .. } => inputs.iter_mut().try_for_each(|i| sources_mut(i, each)),
        Node::Join { left, right, .. } => {
            sources_mut(left, each)?;
            sources_mut(right, each)
        }
    }
}

/// Widen the first scan of each table in every root to the columns all roots read of it,
/// where more than one root reads it; each root keeps its own columns with a `Select`.
/// Returns the tables now read once for several roots.
pub fn share_scans(roots: &mut [Node]) -> Result<Vec<SharedScan>> {
    // Per scan identity: the roots that read it (first scans only) and the union of columns.
    let mut readers: BTreeMap<String, (Vec<usize>, Vec<usize>)> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    // Per scan identity: the table's name and its stored columns' names.
    let mut tables: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    for (r, root) in roots.iter_mut().enumerate() {
        sources_mut(root, &mut |node| {
            let Some(id) = identity(node) else { return Ok(()) };
            if let Node::Source { table, .. } = &*node {
                let names = table.schema.fields().iter().map(|f| f.name().clone()).collect();
                tables.entry(id.clone()).or_insert_with(|| (table.name.clone(), names));
            }
            let entry = readers.entry(id.clone()).or_insert_with(|| {
                order.push(id.clone());
                (Vec::new(), Vec::new())
            });
            if !entry.0.contains(&r) {
                entry.0.push(r);
                for c in read_columns(node) {
                    if !entry.1.contains(&c) {
                        entry.1.push(c);
                    }
                }
            }
            Ok(())
        })?;
    }
    for (_, columns) in readers.values_mut() {
        columns.sort_unstable();
    }
    let mut shared = Vec::new();
    for id in &order {
        let Some((roots_of, columns)) = readers.get(id) else { continue };
        if roots_of.len() < 2 {
            continue;
        }
        for &r in roots_of {
            let mut first = true;
            sources_mut(&mut roots[r], &mut |node| {
                if !first || identity(node).as_ref() != Some(id) {
                    return Ok(());
                }
                first = false;
                widen(node, columns)
            })?;
        }
        let table = tables.get(id).cloned().unwrap_or_default();
        let names = columns.iter().filter_map(|c| table.1.get(*c).cloned()).collect();
        shared.push(SharedScan { table: table.0, columns: names, readers: roots_of.clone() });
    }
    Ok(shared)
}

/// Make a source read `columns` (stored indices, ascending), then select the ones it read.
fn widen(node: &mut Node, columns: &[usize]) -> Result<()> {
    let Node::Source { table, projection, schema, changelog } = node else { return Ok(()) };
    let own = match projection {
        Some(p) => p.clone(),
        None => (0..table.schema.fields().len()).collect(),
    };
    if own == columns {
        return Ok(());
    }
    let indices: Vec<usize> = own.iter().filter_map(|c| columns.iter().position(|u| u == c)).collect();
    let wide = Node::Source {
        table: table.clone(),
        projection: Some(columns.to_vec()),
        schema: Arc::new(table.schema.project(columns)?),
        changelog: changelog.clone(),
    };
    let own_schema = schema.clone();
    *node = wide.with_operator(OperatorSpec::Select { indices, schema: own_schema });
    Ok(())
}

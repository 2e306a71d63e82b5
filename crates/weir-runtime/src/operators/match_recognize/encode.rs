//! A partition's matching state as bytes: each row once, each path node once (so that
//! branches sharing rows share them in state too), then the partial and finished matches.
//!
//! Layout (little-endian): version byte; rows (`time`, `seq`, length, row bytes); nodes
//! (row index, variable, previous node or `u32::MAX`), each after its previous; partial
//! matches (step, rows taken, node or `u32::MAX`, start time, start seq); finished matches
//! (node, start time, start seq).

use std::collections::HashMap;
use std::rc::Rc;

use datafusion::common::ScalarValue;
use weir_core::{Result, WeirError};

use super::nfa::{Event, Finished, Machine, Node, Partial};

const VERSION: u8 = 1;
const NONE: u32 = u32::MAX;

#[derive(Default)]
struct Writer {
    out: Vec<u8>,
    events: HashMap<*const Event, u32>,
    event_bytes: Vec<u8>,
    event_count: u32,
    nodes: HashMap<*const Node, u32>,
    node_bytes: Vec<u8>,
    node_count: u32,
}

impl Writer {
    fn event(&mut self, e: &Rc<Event>) -> u32 {
        if let Some(i) = self.events.get(&Rc::as_ptr(e)) {
            return *i;
        }
        let b = &mut self.event_bytes;
        b.extend_from_slice(&e.time.to_le_bytes());
        b.extend_from_slice(&e.seq.to_le_bytes());
        b.extend_from_slice(&(e.row.len() as u32).to_le_bytes());
        b.extend_from_slice(&e.row);
        self.event_count += 1;
        self.events.insert(Rc::as_ptr(e), self.event_count - 1);
        self.event_count - 1
    }

    /// The node's index, writing it (after the nodes it points to) if new.
    fn node(&mut self, n: &Rc<Node>) -> u32 {
        // Iteratively: the chain back to the first node already written, then forward.
        let mut chain = Vec::new();
        let mut at = Some(n);
        while let Some(node) = at {
            if self.nodes.contains_key(&Rc::as_ptr(node)) {
                break;
            }
            chain.push(node);
            at = node.prev.as_ref();
        }
        for node in chain.into_iter().rev() {
            let event = self.event(&node.event);
            let prev = node.prev.as_ref().map_or(NONE, |p| self.nodes[&Rc::as_ptr(p)]);
            let b = &mut self.node_bytes;
            b.extend_from_slice(&event.to_le_bytes());
            b.extend_from_slice(&node.var.to_le_bytes());
            b.extend_from_slice(&prev.to_le_bytes());
            self.node_count += 1;
            self.nodes.insert(Rc::as_ptr(node), self.node_count - 1);
        }
        self.nodes[&Rc::as_ptr(n)]
    }
}

pub fn encode(m: &Machine) -> Vec<u8> {
    let mut w = Writer::default();
    let mut matches = Vec::new();
    matches.extend_from_slice(&(m.partials.len() as u32).to_le_bytes());
    for p in &m.partials {
        let node = p.path.as_ref().map_or(NONE, |n| w.node(n));
        matches.extend_from_slice(&(p.step as u32).to_le_bytes());
        matches.extend_from_slice(&p.taken.to_le_bytes());
        matches.extend_from_slice(&node.to_le_bytes());
        matches.extend_from_slice(&p.start.0.to_le_bytes());
        matches.extend_from_slice(&p.start.1.to_le_bytes());
    }
    matches.extend_from_slice(&(m.finished.len() as u32).to_le_bytes());
    for f in &m.finished {
        let node = w.node(&f.path);
        matches.extend_from_slice(&node.to_le_bytes());
        matches.extend_from_slice(&f.start.0.to_le_bytes());
        matches.extend_from_slice(&f.start.1.to_le_bytes());
    }
    w.out.push(VERSION);
    w.out.extend_from_slice(&w.event_count.to_le_bytes());
    w.out.extend_from_slice(&w.event_bytes);
    w.out.extend_from_slice(&w.node_count.to_le_bytes());
    w.out.extend_from_slice(&w.node_bytes);
    w.out.extend_from_slice(&matches);
    w.out
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

fn damaged() -> WeirError {
    WeirError::internal("MATCH_RECOGNIZE state in a checkpoint is damaged")
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let piece = self.bytes.get(self.at..self.at + n).ok_or_else(damaged)?;
        self.at += n;
        Ok(piece)
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| damaged())?))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| damaged())?))
    }

    fn i64(&mut self) -> Result<i64> {
        Ok(self.u64()? as i64)
    }
}

/// The machine of `bytes`; `values` turns stored rows into expression values.
pub fn decode(bytes: &[u8], values: impl FnOnce(&[&[u8]]) -> Result<Vec<Vec<ScalarValue>>>) -> Result<Machine> {
    let mut r = Reader { bytes, at: 0 };
    if r.take(1)? != [VERSION] {
        return Err(damaged());
    }
    let count = r.u32()? as usize;
    let mut heads = Vec::with_capacity(count.min(1 << 16));
    let mut rows: Vec<&[u8]> = Vec::with_capacity(count.min(1 << 16));
    for _ in 0..count {
        let (time, seq) = (r.i64()?, r.u64()?);
        let len = r.u32()? as usize;
        heads.push((time, seq));
        rows.push(r.take(len)?);
    }
    let decoded = values(&rows)?;
    let events: Vec<Rc<Event>> = heads
        .into_iter()
        .zip(rows)
        .zip(decoded)
        .map(|(((time, seq), row), values)| Rc::new(Event { time, seq, values, row: row.into() }))
        .collect();
    let count = r.u32()? as usize;
    let mut nodes: Vec<Rc<Node>> = Vec::with_capacity(count.min(1 << 16));
    for _ in 0..count {
        let event = events.get(r.u32()? as usize).ok_or_else(damaged)?.clone();
        let var = u16::from_le_bytes(r.take(2)?.try_into().map_err(|_| damaged())?);
        let prev = match r.u32()? {
            NONE => None,
            i => Some(nodes.get(i as usize).ok_or_else(damaged)?.clone()),
        };
        nodes.push(Rc::new(Node { event, var, prev }));
    }
    let node = |i: u32| -> Result<Option<Rc<Node>>> {
        match i {
            NONE => Ok(None),
            i => Ok(Some(nodes.get(i as usize).ok_or_else(damaged)?.clone())),
        }
    };
    let mut m = Machine::default();
    for _ in 0..r.u32()? {
        let (step, taken, path) = (r.u32()? as usize, r.u32()?, node(r.u32()?)?);
        m.partials.push(Partial { step, taken, path, start: (r.i64()?, r.u64()?) });
    }
    for _ in 0..r.u32()? {
        let path = node(r.u32()?)?.ok_or_else(damaged)?;
        m.finished.push(Finished { path, start: (r.i64()?, r.u64()?) });
    }
    if r.at != bytes.len() {
        return Err(damaged());
    }
    Ok(m)
}

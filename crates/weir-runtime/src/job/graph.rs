//! The shape of a running job as its watchers see it: vertices (chains of fused operators,
//! each run by `parallelism` tasks) and the edges between them. The REST API's plan and the
//! dashboard's graph; the operators' metrics name their vertex.

/// A job's vertices and edges, in build order (inputs before what reads them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobGraph {
    pub vertices: Vec<Vertex>,
    pub edges: Vec<Edge>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vertex {
    pub id: usize,
    /// Its operators' names, first to last, as Flink writes a chain: `A -> B -> C`.
    pub name: String,
    pub parallelism: usize,
    /// The stable identities of its stateful operators, scan or sink.
    pub operators: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    pub source: usize,
    pub target: usize,
    /// How rows cross it, in Flink's words: `FORWARD`, `HASH`, `BROADCAST`, `REBALANCE`,
    /// `GLOBAL` (every task into one).
    pub ship_strategy: &'static str,
}

impl JobGraph {
    /// A new vertex; returns its id.
    pub(super) fn vertex(&mut self, name: String, parallelism: usize, operators: Vec<String>) -> usize {
        let id = self.vertices.len();
        self.vertices.push(Vertex { id, name, parallelism, operators });
        id
    }

    pub(super) fn edge(&mut self, source: usize, target: usize, ship_strategy: &'static str) {
        self.edges.push(Edge { source, target, ship_strategy });
    }
}

/// The ship strategy of an exchange.
pub(super) fn ship_of(partitioning: &crate::exchange::Partitioning) -> &'static str {
    match partitioning {
        crate::exchange::Partitioning::Hash(_) => "HASH",
        crate::exchange::Partitioning::Broadcast => "BROADCAST",
        crate::exchange::Partitioning::RoundRobin => "REBALANCE",
    }
}

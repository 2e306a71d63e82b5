//! A job's plan cut at its hash exchanges into sub-topologies: each cut becomes a
//! repartition topic, written by the sub-topology below it and read by the one above.
//!
//! The exchange itself stays in the plan above the cut, over a source that reads the
//! repartition topic: a task runs its sub-topology at parallelism 1, where that exchange
//! sends everything to the one task, and the plan keeps the shape the planner gave it (a
//! join's inputs are exchanges).

use std::sync::Arc;

use weir_core::{Result, TableDef, WeirError};
use weir_runtime::{Node, Partitioning};

/// The connector name of the tables that stand for repartition topics in a cut plan.
pub const REPARTITION: &str = "weir-repartition";

/// One piece of the plan, run as tasks numbered by partition.
pub struct SubTopology {
    /// 1, 2, …: upstream pieces first; the last one writes the job's sink.
    pub id: usize,
    pub root: Node,
    pub output: Output,
    /// The topics it reads.
    pub inputs: Vec<Input>,
}

pub enum Output {
    /// Rows to the partition of their key group, by these columns of the root's schema.
    Repartition { topic: String, keys: Vec<usize> },
    /// The job's sink table.
    Sink,
}

pub struct Input {
    pub topic: String,
    /// The sub-topology that writes it (a repartition topic), or `None` for a table's topic.
    pub upstream: Option<usize>,
}

impl SubTopology {
    /// The group whose members run this sub-topology's tasks.
    pub fn group(&self, job: &str) -> String {
        format!("weir-{job}-{}", self.id)
    }

    /// The group the tasks commit their offsets to, in their transactions. It has no
    /// members: offsets committed to the members' group would race its rebalances.
    pub fn offsets_group(&self, job: &str) -> String {
        format!("weir-{job}-{}-offsets", self.id)
    }

    pub fn describe(&self) -> String {
        let reads: Vec<&str> = self.inputs.iter().map(|i| i.topic.as_str()).collect();
        let writes = match &self.output {
            Output::Repartition { topic, .. } => topic.clone(),
            Output::Sink => "the sink".to_string(),
        };
        format!("sub-topology {} (reads {}; writes {writes})", self.id, reads.join(", "))
    }
}

/// Cut `root`, the plan of job `job`, whose Kafka tables reach the cluster through
/// `template` (its `properties.*` are the repartition topics' too).
pub fn cut(job: &str, root: &Node, template: &TableDef) -> Result<Vec<SubTopology>> {
    let mut cutter = Cutter { job, template, subs: Vec::new() };
    let mut inputs = Vec::new();
    let root = cutter.cut(root, &mut inputs)?;
    let id = cutter.subs.len() + 1;
    cutter.subs.push(SubTopology { id, root, output: Output::Sink, inputs });
    Ok(cutter.subs)
}

struct Cutter<'a> {
    job: &'a str,
    template: &'a TableDef,
    subs: Vec<SubTopology>,
}

impl Cutter<'_> {
    fn cut(&mut self, node: &Node, inputs: &mut Vec<Input>) -> Result<Node> {
        Ok(match node {
            Node::Exchange { partitioning: Partitioning::Hash(keys), input } => {
                let mut below = Vec::new();
                let root = self.cut(input, &mut below)?;
                let id = self.subs.len() + 1;
                let topic = format!("{}-{id}-repartition", self.job);
                let table = self.repartition_table(&topic, id, input);
                self.subs.push(SubTopology {
                    id,
                    root,
                    output: Output::Repartition { topic: topic.clone(), keys: keys.clone() },
                    inputs: below,
                });
                inputs.push(Input { topic, upstream: Some(id) });
                let source = Node::Source {
                    table: Arc::new(table),
                    projection: None,
                    schema: input.schema(),
                    changelog: input.changelog(),
                };
                Node::Exchange { partitioning: Partitioning::Hash(keys.clone()), input: Box::new(source) }
            }
            Node::Exchange { partitioning, .. } => {
                return Err(WeirError::not_supported(format!(
                    "a {} exchange across workers (only hash exchanges become repartition topics)",
                    if matches!(partitioning, Partitioning::Broadcast) { "broadcast" } else { "round-robin" }
                )))
            }
            Node::Source { table, .. } => {
                let connector = table.options.get("connector").unwrap_or_default();
                if !matches!(connector, "kafka" | "upsert-kafka") || table.options.get("topic").is_none() {
                    return Err(WeirError::user(format!(
                        "table '{}' is read by a job of workers, which read Kafka topics only ('topic', not \
                         'topic-pattern'); it is '{connector}'",
                        table.name
                    )));
                }
                inputs
                    .push(Input { topic: table.options.get("topic").unwrap_or_default().to_string(), upstream: None });
                node.clone()
            }
            Node::Values { .. } => {
                return Err(WeirError::not_supported("literal rows (VALUES) in a job of workers"));
            }
            Node::Operator { spec, input } => {
                if spec.single_task() {
                    return Err(WeirError::not_supported(format!(
                        "{} in a job of workers: it needs every row in one task",
                        spec.describe()
                    )));
                }
                Node::Operator { spec: spec.clone(), input: Box::new(self.cut(input, inputs)?) }
            }
            Node::Union { inputs: parts, schema } => Node::Union {
                inputs: parts.iter().map(|p| self.cut(p, inputs)).collect::<Result<_>>()?,
                schema: schema.clone(),
            },
            Node::Join { left, right, spec } => Node::Join {
                left: Box::new(self.cut(left, inputs)?),
                right: Box::new(self.cut(right, inputs)?),
                spec: spec.clone(),
            },
        })
    }

    /// The table a task reads repartition topic `topic` through.
    fn repartition_table(&self, topic: &str, upstream: usize, input: &Node) -> TableDef {
        let mut options = weir_core::table::Options::default();
        for (key, value) in self.template.options.iter().filter(|(k, _)| k.starts_with("properties.")) {
            if key != "properties.group.id" {
                options.insert(key.to_string(), value.to_string(), None);
            }
        }
        options.insert("connector".into(), REPARTITION.into(), None);
        options.insert("topic".into(), topic.into(), None);
        options.insert("upstream".into(), upstream.to_string(), None);
        TableDef::new(topic, input.schema(), options)
    }
}

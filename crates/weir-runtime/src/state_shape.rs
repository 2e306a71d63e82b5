//! The shape of a plan's state: what a checkpoint's state must fit (`StreamPlan::state_shape`,
//! the fingerprint of format version 1) and each stateful operator's part of it (hashed into
//! its stable id, [`crate::identity`]).

use std::fmt::Write;

use crate::operators::WindowSpec;
use crate::plan::{Node, OperatorSpec};

/// Column names and types.
pub(crate) fn columns(schema: &datafusion::arrow::datatypes::Schema) -> String {
    let cols: Vec<String> = schema.fields().iter().map(|f| format!("{}:{}", f.name(), f.data_type())).collect();
    cols.join(",")
}

impl Node {
    /// The identities of this plan's scans and stateful operators, inputs first.
    pub(crate) fn visit_state(&self, ids: &crate::identity::Identities, out: &mut Vec<crate::identity::StatePart>) {
        match self {
            Node::Source { table, projection, .. } => {
                // The first scan of its identity in the INSERT: a self-join's second read
                // is listed with its own operators' inputs all the same.
                let key = crate::identity::scan_key(&crate::identity::scan_identity(table, projection), 0);
                if let Some(p) = ids.scan(&key) {
                    if !out.contains(p) {
                        out.push(p.clone());
                    }
                }
            }
            Node::Values { .. } => {}
            Node::Operator { spec, input } => {
                input.visit_state(ids, out);
                out.extend(ids.operator(spec).cloned());
            }
            Node::Exchange { input, .. } => input.visit_state(ids, out),
            Node::Union { inputs, .. } => inputs.iter().for_each(|i| i.visit_state(ids, out)),
            Node::Join { left, right, spec } => {
                left.visit_state(ids, out);
                right.visit_state(ids, out);
                out.extend(ids.operator(spec).cloned());
            }
        }
    }

    pub(crate) fn state_shape(&self, out: &mut String) {
        match self {
            Node::Source { table, projection, schema, .. } => {
                let connector = table.options.get("connector").unwrap_or("?");
                let _ = writeln!(out, "source {} {connector} {projection:?} [{}]", table.name, columns(schema));
            }
            Node::Values { schema, .. } => {
                let _ = writeln!(out, "values [{}]", columns(schema));
            }
            Node::Operator { spec, input } => {
                let _ = writeln!(out, "{} [{}]", spec.state_shape(), columns(&self.schema()));
                input.state_shape(out);
            }
            Node::Exchange { partitioning, input } => {
                let _ = writeln!(out, "exchange {partitioning:?}");
                input.state_shape(out);
            }
            Node::Join { left, right, spec } => {
                let _ = writeln!(out, "join {} [{}]", spec.state_shape(), columns(&self.schema()));
                left.state_shape(out);
                right.state_shape(out);
            }
            Node::Union { inputs, .. } => {
                let _ = writeln!(out, "union {}", inputs.len());
                for input in inputs {
                    input.state_shape(out);
                }
            }
        }
    }
}

impl OperatorSpec {
    /// The operator's kind and, if it keeps state, the shape of that state.
    pub(crate) fn state_shape(&self) -> String {
        let aggregates = |spec: &WindowSpec| -> String {
            let parts: Vec<String> = spec
                .aggregates
                .iter()
                .map(|a| {
                    let fields =
                        a.state_fields().map(|f| f.iter().map(|f| f.data_type().to_string()).collect::<Vec<_>>());
                    format!("{}({})", a.fun().name(), fields.unwrap_or_default().join(","))
                })
                .collect();
            format!("keys [{}] end {} aggregates [{}]", columns(&spec.group_schema), spec.window_end, parts.join(","))
        };
        match self {
            OperatorSpec::Project { .. } => "project".into(),
            OperatorSpec::Filter { .. } => "filter".into(),
            OperatorSpec::Select { indices, .. } => format!("select {indices:?}"),
            OperatorSpec::AppendWatermark { .. } => "current watermark".into(),
            OperatorSpec::Unnest { spec, .. } => format!("unnest {:?} {:?}", spec.lists, spec.outputs),
            OperatorSpec::Limit { skip, fetch } => format!("limit {skip} {fetch:?}"),
            OperatorSpec::Watermark { .. } => "watermark".into(),
            OperatorSpec::ProcessingTimeWatermark { .. } => "processing-time watermark".into(),
            OperatorSpec::WindowAssign { kind, time_column, .. } => format!("window {kind:?} {time_column}"),
            OperatorSpec::WindowAggregate { spec, .. } => format!("window aggregate {}", aggregates(spec)),
            OperatorSpec::SessionAggregate { spec, .. } => {
                format!("session aggregate gap {} {}", spec.gap, aggregates(&spec.spec))
            }
            OperatorSpec::GroupAggregate { spec, .. } => {
                let aggs: Vec<String> = spec
                    .aggregates
                    .iter()
                    .map(|a| {
                        format!(
                            "{}({}{:?} {}) filter {:?}",
                            a.kind.name(),
                            if a.distinct { "distinct " } else { "" },
                            a.arg,
                            a.arg_type,
                            a.filter
                        )
                    })
                    .collect();
                format!(
                    "group aggregate keys {} retracting {} ttl {} [{}]",
                    spec.keys,
                    spec.retracting_input,
                    spec.ttl.is_some(),
                    aggs.join(",")
                )
            }
            OperatorSpec::UpsertNormalize { spec } => format!("upsert normalize {:?}", spec.key),
            OperatorSpec::UpsertMaterialize { spec } => {
                format!("upsert materialize {:?} [{}]", spec.key, columns(&spec.schema))
            }
            OperatorSpec::FirstRow { spec, time, .. } => {
                format!("first row partition {:?} time {time} [{}]", spec.partition, columns(&spec.input_schema))
            }
            OperatorSpec::OverAggregate { spec, .. } => format!(
                "over partition {:?} time {}{} {:?} range {} functions {} [{}] -> [{}]",
                spec.partition,
                spec.time,
                if spec.proctime { " (processing)" } else { "" },
                spec.preceding,
                spec.range,
                spec.functions
                    .iter()
                    .map(|f| match f {
                        crate::operators::OverFunction::Aggregate(a) => format!("{}({:?})", a.kind.name(), a.arg),
                        crate::operators::OverFunction::Lag { arg, offset, .. } => format!("lag({arg},{offset})"),
                    })
                    .collect::<Vec<_>>()
                    .join(","),
                columns(&spec.input_schema),
                columns(&spec.schema)
            ),
            OperatorSpec::MatchRecognize { spec, .. } => format!(
                "match recognize partition {:?} time {}{} columns {:?} pattern {:?} measures {:?} [{}] -> [{}]",
                spec.partition,
                spec.time,
                if spec.proctime { " (processing)" } else { "" },
                spec.columns,
                spec.pattern,
                spec.measures,
                columns(&spec.input_schema),
                columns(&spec.schema)
            ),
            OperatorSpec::TimeSort { spec, .. } => format!(
                "time sort {} order {:?} [{}]",
                spec.time,
                spec.order.iter().map(|(i, o)| (i, o.descending, o.nulls_first)).collect::<Vec<_>>(),
                columns(&spec.schema)
            ),
            OperatorSpec::WindowTopN { spec, window_end, .. } => format!(
                "window top-n {:?} end {window_end} partition {:?} order {:?} ranks {}..={} [{}]",
                spec.kind,
                spec.partition,
                spec.order.iter().map(|(i, o)| (i, o.descending, o.nulls_first)).collect::<Vec<_>>(),
                spec.lo,
                spec.hi,
                columns(&spec.input_schema)
            ),
            OperatorSpec::TopN { spec, .. } => format!(
                "top-n {:?} partition {:?} order {:?} ranks {}..={} later-wins {} retracting {} [{}]",
                spec.kind,
                spec.partition,
                spec.order.iter().map(|(i, o)| (i, o.descending, o.nulls_first)).collect::<Vec<_>>(),
                spec.lo,
                spec.hi,
                spec.later_wins_ties,
                spec.retracting_input,
                columns(&spec.input_schema)
            ),
            OperatorSpec::WindowJoin { spec, ends, .. } => format!(
                "window join {:?} keys {:?} ends {ends:?} [{}] [{}]",
                spec.kind,
                spec.keys,
                columns(&spec.schemas[0]),
                columns(&spec.schemas[1])
            ),
            OperatorSpec::TableLookup { spec, .. } => format!(
                "table lookup {:?} keys {:?} [{}] [{}]",
                spec.kind,
                spec.keys,
                columns(&spec.schemas[0]),
                columns(&spec.schemas[1])
            ),
            OperatorSpec::LookupJoin { spec, .. } => format!(
                "lookup join {:?} keys {:?} [{}] [{}]",
                spec.kind,
                spec.keys,
                columns(&spec.schemas[0]),
                columns(&spec.schemas[1])
            ),
            OperatorSpec::VersionedJoin { spec, times, .. } => format!(
                "versioned join {:?} keys {:?} times {times:?} [{}] [{}]",
                spec.kind,
                spec.keys,
                columns(&spec.schemas[0]),
                columns(&spec.schemas[1])
            ),
            OperatorSpec::Join { spec, .. } => format!(
                "join {:?} keys {:?} ttl {} interval {:?} [{}] [{}]",
                spec.kind,
                spec.keys,
                spec.ttl.is_some(),
                spec.interval,
                columns(&spec.schemas[0]),
                columns(&spec.schemas[1])
            ),
        }
    }
}

//! `MATCH_RECOGNIZE` planned by [`crate::match_recognize`] into Weir's operators: rows
//! exchanged by the partition columns, then the matching operator. The order must be a time
//! attribute of the input: its event time (the operator sorts rows by it as the watermark
//! passes them) or a `PROCTIME()` column (rows are matched as they come, and the wall clock's
//! watermarks expire `WITHIN`).

use std::sync::Arc;

use weir_core::{Result, WeirError};
use weir_runtime::operators::MatchSpec;
use weir_runtime::{Node, OperatorSpec, Partitioning};

use super::joins::TimeAttribute;
use super::Planner;
use crate::match_recognize::MatchNode;

impl Planner {
    pub(super) fn match_node(&self, m: &MatchNode) -> Result<Node> {
        let input = self.to_node(&m.input)?;
        if !input.changelog().is_append_only() {
            return Err(WeirError::not_supported("MATCH_RECOGNIZE over an updating input (as Flink)"));
        }
        let time_name = m.input.schema().field(m.time).name().clone();
        let proctime = match self.time_attribute(&m.input, m.time) {
            Some(TimeAttribute::Event) => false,
            Some(TimeAttribute::Processing) => true,
            None => {
                return Err(WeirError::user(format!(
                    "MATCH_RECOGNIZE must be ordered by a time attribute first: '{time_name}' is not one (declare it \
                     with WATERMARK FOR {time_name} AS …)"
                )))
            }
        };
        let spec = MatchSpec {
            partition: m.partition.clone(),
            time: m.time,
            proctime,
            columns: m.columns.clone(),
            pattern: m.pattern.clone(),
            measures: m.measures.clone(),
            input_schema: input.schema(),
            schema: Arc::new(m.schema.as_arrow().clone()),
        };
        let mut node = Node::Exchange { partitioning: Partitioning::Hash(m.partition.clone()), input: Box::new(input) };
        if proctime {
            // The wall clock's watermarks, in place of event time's: they expire `WITHIN`.
            node = node.with_operator(OperatorSpec::ProcessingTimeWatermark { time_column: m.time });
        }
        Ok(node.with_operator(OperatorSpec::MatchRecognize { spec, display: m.display.clone() }))
    }
}

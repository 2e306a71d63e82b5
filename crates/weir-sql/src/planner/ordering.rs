//! Planning `ORDER BY` on a stream, as Flink allows it:
//!
//! - first an event-time attribute ascending, then any other columns, over an append-only
//!   input: rows come out in that order as the watermark passes their time
//!   ([`weir_runtime::operators::TimeSort`]);
//! - with `LIMIT n [OFFSET m]`, by any columns: the first rows so far, kept up to date (a
//!   Top-N over the whole stream, as Flink's sort-limit, an updating result).
//!
//! Anything else is refused with Flink's reason: a stream has no last row to sort up to.

use datafusion::arrow::compute::SortOptions;
use datafusion::logical_expr::Sort;
use weir_runtime::operators::{RankKind, TimeSortSpec, TopNSpec};

use super::joins::TimeAttribute;
use super::*;

impl Planner {
    /// `skip` and `fetch`: those of a `LIMIT … OFFSET` right above the sort.
    pub(super) fn sort_node(&self, sort: &Sort, skip: usize, fetch: Option<usize>) -> Result<Node> {
        if skip > 0 && fetch.is_none() && sort.fetch.is_none() {
            return Err(WeirError::not_supported("OFFSET without LIMIT on a stream (it would keep every row forever)"));
        }
        let fetch = match (fetch, sort.fetch) {
            (Some(a), Some(b)) => Some(a.min(b.saturating_sub(skip))),
            (a, b) => a.or(b.map(|b| b.saturating_sub(skip))),
        };
        let schema = sort.input.schema();
        let mut columns = Vec::with_capacity(sort.expr.len());
        for s in &sort.expr {
            let Expr::Column(c) = &s.expr else {
                return Err(WeirError::not_supported(format!(
                    "ORDER BY an expression ({}) on a stream: order by columns",
                    s.expr.human_display()
                )));
            };
            let index = schema.index_of_column(c).map_err(|_| WeirError::internal("ORDER BY column not found"))?;
            columns.push((index, SortOptions { descending: !s.asc, nulls_first: s.nulls_first }));
        }
        let Some(&(time, first)) = columns.first() else {
            return self.to_node(&sort.input);
        };
        if let Some(fetch) = fetch {
            return self.sort_limit(sort, columns, skip, fetch);
        }
        let name = schema.field(time).name().clone();
        match self.time_attribute(&sort.input, time) {
            Some(TimeAttribute::Event) if !first.descending => {}
            Some(TimeAttribute::Event) => {
                return Err(WeirError::not_supported(format!(
                    "ORDER BY {name} DESC on a stream: its time attribute must come first, ascending"
                )))
            }
            Some(TimeAttribute::Processing) => {
                return Err(WeirError::not_supported(format!(
                    "ORDER BY the processing time {name} (order by an event-time attribute)"
                )))
            }
            None => {
                return Err(WeirError::not_supported(format!(
                    "ORDER BY {name} on a stream: the first sort key must be a time attribute, ascending \
                     (a stream has no last row to sort up to)"
                )))
            }
        }
        let input = self.to_node(&sort.input)?;
        if !input.changelog().is_append_only() {
            return Err(WeirError::not_supported("ORDER BY over an updating input (it sorts appended rows only)"));
        }
        let display = sort
            .expr
            .iter()
            .map(|s| format!("{}{}", s.expr.human_display(), if s.asc { "" } else { " DESC" }))
            .collect::<Vec<_>>()
            .join(", ");
        let spec = TimeSortSpec { time, order: columns[1..].to_vec(), schema: input.schema() };
        Ok(input.with_operator(OperatorSpec::TimeSort { spec, display: format!("order by {display}") }))
    }

    /// `ORDER BY … LIMIT fetch OFFSET skip`: a Top-N of the whole stream (all rows in one
    /// task), its rank column dropped.
    fn sort_limit(&self, sort: &Sort, order: Vec<(usize, SortOptions)>, skip: usize, fetch: usize) -> Result<Node> {
        let input = self.to_node(&sort.input)?;
        let input_schema = input.schema();
        let width = input_schema.fields().len();
        let mut fields: Vec<Field> = input_schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new("__weir_rank", DataType::UInt64, false));
        let display = format!(
            "ROW_NUMBER() ranks {}..={} order by [{}] (ORDER BY … LIMIT)",
            skip + 1,
            skip + fetch,
            sort.expr
                .iter()
                .map(|s| format!("{}{}", s.expr.human_display(), if s.asc { "" } else { " DESC" }))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let spec = TopNSpec {
            kind: RankKind::RowNumber,
            partition: Vec::new(),
            order,
            lo: skip as u64 + 1,
            hi: (skip + fetch) as u64,
            later_wins_ties: false,
            retracting_input: !input.changelog().is_append_only(),
            input_schema: input_schema.clone(),
            ttl: self.state_ttl.map(|d| d.as_millis().min(i64::MAX as u128) as i64),
            schema: Arc::new(Schema::new(fields)),
        };
        Ok(Node::Exchange { partitioning: Partitioning::Hash(Vec::new()), input: Box::new(input) }
            .with_operator(OperatorSpec::TopN { spec, display })
            .with_operator(OperatorSpec::Select { indices: (0..width).collect(), schema: input_schema }))
    }
}

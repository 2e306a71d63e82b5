//! Planning Top-N and deduplication: a filter on the result of `ROW_NUMBER()`, `RANK()` or
//! `DENSE_RANK()` `OVER (PARTITION BY … ORDER BY …)` (`WHERE rn <= N`, `rn < N`, `rn = 1`,
//! `rn BETWEEN a AND b`) becomes one Top-N operator after an exchange by the partition key;
//! conditions on other columns in the same `WHERE` apply after the ranking, as in SQL.

use datafusion::common::ScalarValue;
use datafusion::logical_expr::expr::WindowFunction;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Operator as BinOp, WindowFunctionDefinition};
use weir_runtime::operators::{RankKind, TopNSpec};

use super::windowed::window_columns;
use super::*;

/// The rank function of an `OVER` expression, if it is one.
pub(super) fn rank_function(e: &Expr) -> Option<(RankKind, &WindowFunction)> {
    let e = match e {
        Expr::Alias(a) => a.expr.as_ref(),
        e => e,
    };
    let Expr::WindowFunction(w) = e else { return None };
    let WindowFunctionDefinition::WindowUDF(udf) = &w.fun else { return None };
    let kind = match udf.name() {
        "row_number" => RankKind::RowNumber,
        "rank" => RankKind::Rank,
        "dense_rank" => RankKind::DenseRank,
        _ => return None,
    };
    Some((kind, w))
}

/// The column `e` reads, looking through casts and aliases.
pub(super) fn column_of(e: &Expr, schema: &DFSchema) -> Option<usize> {
    match e {
        Expr::Column(c) => schema.index_of_column(c).ok(),
        Expr::Alias(a) => column_of(&a.expr, schema),
        Expr::Cast(c) => column_of(&c.expr, schema),
        Expr::TryCast(c) => column_of(&c.expr, schema),
        _ => None,
    }
}

/// The input column `e` reads, or the place of the column computed for it after the input's.
pub(super) fn placed<'a>(e: &'a Expr, schema: &DFSchema, computed: &mut Vec<&'a Expr>) -> usize {
    if let Some(c) = column_of(e, schema) {
        return c;
    }
    let at = computed.iter().position(|c| *c == e).unwrap_or_else(|| {
        computed.push(e);
        computed.len() - 1
    });
    schema.fields().len() + at
}

pub(super) fn whole_number(e: &Expr) -> Option<i64> {
    match e {
        Expr::Literal(v, _) => match v.cast_to(&DataType::Int64).ok()? {
            ScalarValue::Int64(Some(n)) => Some(n),
            _ => None,
        },
        Expr::Cast(c) => whole_number(&c.expr),
        _ => None,
    }
}

/// The ranks a predicate keeps (`lo..=hi`, 1-based) when its conjuncts bound column `rank`,
/// and the conjuncts that do not.
fn rank_bounds<'a>(predicate: &'a Expr, rank: usize, schema: &DFSchema) -> (i64, Option<i64>, Vec<&'a Expr>) {
    let (mut lo, mut hi, mut rest) = (1i64, None::<i64>, Vec::new());
    for conjunct in split_conjunction(predicate) {
        let mut bound = |op: BinOp, n: i64| match op {
            BinOp::Lt => hi = Some(hi.map_or(n - 1, |h| h.min(n - 1))),
            BinOp::LtEq => hi = Some(hi.map_or(n, |h| h.min(n))),
            BinOp::Eq => {
                lo = lo.max(n);
                hi = Some(hi.map_or(n, |h| h.min(n)));
            }
            BinOp::Gt => lo = lo.max(n + 1),
            BinOp::GtEq => lo = lo.max(n),
            _ => {}
        };
        match conjunct {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
                let flipped = match op {
                    BinOp::Lt => Some(BinOp::Gt),
                    BinOp::LtEq => Some(BinOp::GtEq),
                    BinOp::Gt => Some(BinOp::Lt),
                    BinOp::GtEq => Some(BinOp::LtEq),
                    BinOp::Eq => Some(BinOp::Eq),
                    _ => None,
                };
                match (column_of(left, schema), whole_number(right), column_of(right, schema), whole_number(left)) {
                    (Some(c), Some(n), _, _) if c == rank && flipped.is_some() => bound(*op, n),
                    (_, _, Some(c), Some(n)) if c == rank => match flipped {
                        Some(op) => bound(op, n),
                        None => rest.push(conjunct),
                    },
                    _ => rest.push(conjunct),
                }
            }
            Expr::Between(b) if !b.negated && column_of(&b.expr, schema) == Some(rank) => {
                match (whole_number(&b.low), whole_number(&b.high)) {
                    (Some(l), Some(h)) => {
                        bound(BinOp::GtEq, l);
                        bound(BinOp::LtEq, h);
                    }
                    _ => rest.push(conjunct),
                }
            }
            other => rest.push(other),
        }
    }
    (lo, hi, rest)
}

impl Planner {
    /// `input` with the expressions `computed` (over `schema`, its columns) appended as
    /// columns `{prefix}_0`, `{prefix}_1`, …: the keys and arguments [`placed`] put there.
    pub(super) fn with_computed(
        &self,
        input: Node,
        schema: &DFSchema,
        computed: &[&Expr],
        prefix: &str,
    ) -> Result<Node> {
        let mut exprs: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        for (i, f) in schema.fields().iter().enumerate() {
            exprs.push(Arc::new(datafusion::physical_expr::expressions::Column::new(f.name(), i)));
        }
        for (i, e) in computed.iter().enumerate() {
            let (_, field) = datafusion::logical_expr::ExprSchemable::to_field(*e, schema)?;
            fields.push(Field::new(format!("{prefix}_{i}"), field.data_type().clone(), field.is_nullable()));
            exprs.push(self.physical(e, schema)?);
        }
        let display = fields.iter().map(|f| f.name().clone()).collect();
        Ok(input.with_operator(OperatorSpec::Project { exprs, schema: Arc::new(Schema::new(fields)), display }))
    }

    /// A Top-N if `f` bounds the rank of an `OVER` window below it (through projections),
    /// `None` if it filters something else.
    pub(super) fn rank_node(&self, f: &datafusion::logical_expr::Filter) -> Result<Option<Node>> {
        let mut chain = Vec::new();
        let mut below = f.input.as_ref();
        loop {
            match below {
                LogicalPlan::Projection(p) => {
                    chain.push(p);
                    below = &p.input;
                }
                LogicalPlan::SubqueryAlias(a) => below = &a.input,
                _ => break,
            }
        }
        let LogicalPlan::Window(window) = below else { return Ok(None) };
        let [expr] = window.window_expr.as_slice() else { return Ok(None) };
        // Not a rank: an OVER aggregate, filtered after.
        let Some((kind, function)) = rank_function(expr) else { return Ok(None) };
        // The rank's column, followed up through the projections to the filter.
        let mut rank = window.input.schema().fields().len();
        for p in chain.iter().rev() {
            match p.expr.iter().position(|e| column_of(e, p.input.schema()) == Some(rank)) {
                Some(i) => rank = i,
                None => return Ok(None),
            }
        }
        let (lo, hi, rest) = rank_bounds(&f.predicate, rank, f.input.schema());
        let Some(hi) = hi else {
            return Err(WeirError::not_supported(format!(
                "{} without an upper bound: a WHERE must keep ranks up to N (rn <= N), or every row of a \
                 partition is kept and renumbered forever",
                expr.human_display()
            )));
        };
        let input_schema = window.input.schema();
        let params = &function.params;
        if params.order_by.is_empty() {
            return Err(WeirError::user(
                "Top-N without ORDER BY: which rows are first is not defined (add ORDER BY to the OVER clause)",
            ));
        }
        // A key or order that is an expression is computed by a projection before the exchange.
        let mut computed: Vec<&Expr> = Vec::new();
        let partition: Vec<usize> =
            params.partition_by.iter().map(|e| placed(e, input_schema, &mut computed)).collect();
        let order: Vec<(usize, datafusion::arrow::compute::SortOptions)> = params
            .order_by
            .iter()
            .map(|s| {
                let options =
                    datafusion::arrow::compute::SortOptions { descending: !s.asc, nulls_first: s.nulls_first };
                (placed(&s.expr, input_schema, &mut computed), options)
            })
            .collect();
        let mut input = self.to_node(&window.input)?;
        let width = input_schema.fields().len();
        if !computed.is_empty() {
            input = self.with_computed(input, input_schema, &computed, "__weir_rank_key")?;
        }
        let retracting_input = !input.changelog().is_append_only();
        let (lo, hi) = (lo.max(1) as u64, hi.max(0) as u64);
        let later_wins_ties = kind == RankKind::RowNumber && hi == 1 && order.len() == 1 && order[0].1.descending;
        let display = format!(
            "{}() ranks {lo}..={hi} partition by [{}] order by [{}]",
            function.fun.name(),
            params.partition_by.iter().map(|e| e.human_display().to_string()).collect::<Vec<_>>().join(", "),
            params
                .order_by
                .iter()
                .map(|s| format!("{}{}", s.expr.human_display(), if s.asc { "" } else { " DESC" }))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let spec = TopNSpec {
            kind,
            partition: partition.clone(),
            order,
            lo,
            hi,
            later_wins_ties,
            retracting_input,
            input_schema: input.schema(),
            ttl: self.state_ttl.map(|d| d.as_millis().min(i64::MAX as u128) as i64),
            schema: {
                let mut fields: Vec<Field> = input.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
                fields.push(window.schema.field(width).as_ref().clone());
                Arc::new(Schema::new(fields))
            },
        };
        let extended = spec.schema.fields().len() > width + 1;
        // Partitioned by a window of an append-only input: ranked once per window, when it
        // fires (Flink's window Top-N and window deduplication).
        let window_end = window_columns(&window.input)
            .filter(|(start, end)| !retracting_input && partition.contains(start) && partition.contains(end))
            .map(|(_, end)| end);
        // The first row by event time of an append-only input: emitted once the watermark
        // passes it (append-only, as Flink's deduplication keeping the first row).
        let first_by_time = match spec.order.as_slice() {
            [(column, o)]
                if *column < width
                    && !o.descending
                    && kind == RankKind::RowNumber
                    && lo == 1
                    && hi == 1
                    && !retracting_input =>
            {
                matches!(self.time_attribute(&window.input, *column), Some(super::joins::TimeAttribute::Event))
                    .then_some(*column)
            }
            _ => None,
        };
        let operator = match (window_end, first_by_time) {
            (Some(window_end), _) => OperatorSpec::WindowTopN { spec, window_end, display },
            (None, Some(time)) => OperatorSpec::FirstRow { spec, time, display },
            (None, None) => OperatorSpec::TopN { spec, display },
        };
        let mut node = Node::Exchange { partitioning: Partitioning::Hash(partition), input: Box::new(input) }
            .with_operator(operator);
        if extended {
            // Drop the computed keys: the window's columns, then the rank.
            let rank = node.schema().fields().len() - 1;
            let indices: Vec<usize> = (0..width).chain([rank]).collect();
            node = node
                .with_operator(OperatorSpec::Select { indices, schema: Arc::new(window.schema.as_arrow().clone()) });
        }
        for p in chain.iter().rev() {
            node = self.project(node, p)?;
        }
        if let Some(rest) = datafusion::logical_expr::utils::conjunction(rest.into_iter().cloned()) {
            let predicate = self.physical(&rest, f.input.schema())?;
            node = node.with_operator(OperatorSpec::Filter { predicate, display: rest.human_display().to_string() });
        }
        Ok(Some(node))
    }
}

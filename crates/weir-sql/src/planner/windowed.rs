//! Planning windowed queries: window table functions, window aggregates (and session
//! windows) and the late-data tables of their sources. Window joins: `joins.rs`.

use super::*;

/// The window table function a scan reads, if it reads one.
pub(super) fn scanned_window(plan: &LogicalPlan) -> Option<Arc<dyn TableProvider>> {
    let LogicalPlan::TableScan(scan) = plan else { return None };
    let provider = datafusion::datasource::source_as_provider(&scan.source).ok()?;
    (provider.as_ref() as &dyn std::any::Any).is::<WindowTable>().then_some(provider)
}

/// Which output columns of `plan` are a window's `window_start` and `window_end`: those of a
/// window table function, followed through projections (renamed or not), filters, window
/// aggregates and window joins. `None` if the rows do not carry a window.
pub(super) fn window_columns(plan: &LogicalPlan) -> Option<(usize, usize)> {
    pub(super) fn column_index(e: &Expr, schema: &DFSchema) -> Option<usize> {
        match e {
            Expr::Column(c) => schema.index_of_column(c).ok(),
            Expr::Alias(a) => column_index(&a.expr, schema),
            _ => None,
        }
    }
    match plan {
        LogicalPlan::TableScan(scan) => {
            scanned_window(plan)?;
            let schema = scan.projected_schema.as_arrow();
            Some((schema.index_of("window_start").ok()?, schema.index_of("window_end").ok()?))
        }
        LogicalPlan::Projection(p) => {
            let (start, end) = window_columns(&p.input)?;
            let find = |target| p.expr.iter().position(|e| column_index(e, p.input.schema()) == Some(target));
            Some((find(start)?, find(end)?))
        }
        LogicalPlan::Aggregate(a) => {
            let (start, end) = window_columns(&a.input)?;
            let find = |target| a.group_expr.iter().position(|e| column_index(e, a.input.schema()) == Some(target));
            Some((find(start)?, find(end)?))
        }
        LogicalPlan::Filter(f) => window_columns(&f.input),
        LogicalPlan::SubqueryAlias(a) => window_columns(&a.input),
        LogicalPlan::Join(j) => window_columns(&j.left),
        _ => None,
    }
}

/// The window table function `plan` reads directly (through projections and filters): its
/// table, kind and partition keys.
pub(super) fn direct_window(plan: &LogicalPlan) -> Option<(String, WindowKind, Vec<String>)> {
    match plan {
        LogicalPlan::Projection(p) => direct_window(&p.input),
        LogicalPlan::Filter(f) => direct_window(&f.input),
        LogicalPlan::SubqueryAlias(a) => direct_window(&a.input),
        LogicalPlan::TableScan(_) => {
            let provider = scanned_window(plan)?;
            let window = (provider.as_ref() as &dyn std::any::Any).downcast_ref::<WindowTable>()?;
            Some((window.table.clone(), window.kind, window.partition_keys.clone()))
        }
        _ => None,
    }
}

/// The gap and partition keys of the `SESSION` window table function `plan` reads directly.
pub(super) fn session_window(plan: &LogicalPlan) -> Option<(i64, Vec<String>)> {
    match direct_window(plan)? {
        (_, WindowKind::Session { gap }, keys) => Some((gap, keys)),
        _ => None,
    }
}

impl Planner {
    /// A window table function: the table's source and watermark, then window assignment.
    pub(super) fn window_node(&self, window: &WindowTable, scan: &datafusion::logical_expr::TableScan) -> Result<Node> {
        if matches!(window.kind, WindowKind::Session { .. })
            && !self.session_input.swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            return Err(WeirError::not_supported(
                "SESSION windows outside a window aggregate (GROUP BY window_start, window_end, partition keys)",
            ));
        }
        let Some(table) = self.catalog.tables.get(&window.table) else {
            return self.processing_time_window(window, scan);
        };
        let time = table.schema.index_of(&window.time_column)?;
        // A computed `PROCTIME()` column windows by processing time.
        let processing = table.computed_at(time).is_some_and(|c| super::is_proctime(&c.sql));
        if !processing && table.watermark.as_ref().map(|w| &w.column) != Some(&window.time_column) {
            return Err(WeirError::user(format!(
                "the DESCRIPTOR column '{}' of a window must be a time attribute of table '{}': its event time \
                 column (declared with WATERMARK FOR {} AS …) or a computed column AS PROCTIME()",
                window.time_column, window.table, window.time_column
            )));
        }
        let base = table.schema.fields().len();
        let wanted_all = scan.projection.clone().unwrap_or_else(|| (0..window.schema.fields().len()).collect());
        // Base columns the query reads, and the time column the windows are computed from.
        let mut wanted: Vec<usize> = wanted_all.iter().copied().filter(|i| *i < base).collect();
        // Late rows are written whole: every column travels (after those the query reads,
        // which keeps the query's column indices).
        let whole_rows = self.whole_rows.swap(false, std::sync::atomic::Ordering::Relaxed)
            && table.options.get(LATE_DATA_TABLE).is_some();
        let extra: Vec<usize> = if whole_rows { (0..base).filter(|i| !wanted.contains(i)).collect() } else { vec![] };
        wanted.extend(&extra);
        if !wanted.contains(&time) {
            wanted.push(time);
        }
        let (node, read) = if processing {
            let time_column =
                wanted.iter().position(|i| *i == time).ok_or_else(|| WeirError::internal("time column not read"))?;
            let node = self.computed_read(table, &wanted)?;
            (node.with_operator(OperatorSpec::ProcessingTimeWatermark { time_column }), wanted.clone())
        } else {
            self.watermarked_source(table, &wanted)?
        };
        let read_schema = node.schema();
        let mut fields: Vec<_> = read_schema.fields().iter().cloned().collect();
        fields.extend(WINDOW_COLUMNS.iter().map(|name| {
            Arc::new(
                window
                    .schema
                    .field_with_name(name)
                    .cloned()
                    .unwrap_or_else(|_| Field::new(*name, DataType::Null, true)),
            )
        }));
        let assigned = Arc::new(Schema::new(fields));
        let time_column =
            read.iter().position(|i| *i == time).ok_or_else(|| WeirError::internal("time column not read"))?;
        let node = node.with_operator(OperatorSpec::WindowAssign { kind: window.kind, time_column, schema: assigned });
        // Back to exactly the columns the scan asked for, in its order (then the extra ones).
        let position =
            |i: &usize| if *i < base { read.iter().position(|r| r == i).unwrap_or(0) } else { read.len() + (i - base) };
        let indices = wanted_all.iter().chain(&extra).map(position).collect();
        let schema = Arc::new(window.schema.project(&[wanted_all, extra].concat())?);
        Ok(node.with_operator(OperatorSpec::Select { indices, schema }))
    }

    /// A window table function over a view, whose DESCRIPTOR column is `PROCTIME()`: the
    /// view's rows, watermarks of the wall clock, then window assignment (Nexmark q12).
    fn processing_time_window(&self, window: &WindowTable, scan: &datafusion::logical_expr::TableScan) -> Result<Node> {
        let plan = self
            .view_plans
            .get(&window.table)
            .ok_or_else(|| WeirError::user(format!("table or view '{}' not found", window.table)))?;
        let time = plan.schema().as_arrow().index_of(&window.time_column)?;
        if !matches!(self.time_attribute(plan, time), Some(super::joins::TimeAttribute::Processing)) {
            return Err(WeirError::user(format!(
                "the DESCRIPTOR column '{}' of a window over view '{}' must be PROCTIME() (processing time): a view \
                 has no watermark. For event time, window the table itself (its WATERMARK FOR column)",
                window.time_column, window.table
            )));
        }
        // Only the view's columns the query reads, and the time: the source reads no more.
        let base = plan.schema().fields().len();
        let wanted_all = scan.projection.clone().unwrap_or_else(|| (0..window.schema.fields().len()).collect());
        let mut wanted: Vec<usize> = wanted_all.iter().copied().filter(|i| *i < base).collect();
        if !wanted.contains(&time) {
            wanted.push(time);
        }
        let columns =
            wanted.iter().map(|i| Expr::Column(datafusion::common::Column::from(plan.schema().qualified_field(*i))));
        let pruned = datafusion::logical_expr::LogicalPlanBuilder::from(plan.clone()).project(columns)?.build()?;
        let node = self.to_node(&self.ctx.state().optimize(&pruned)?)?;
        let time_column =
            wanted.iter().position(|i| *i == time).ok_or_else(|| WeirError::internal("time column not read"))?;
        let window_fields = (base..window.schema.fields().len()).collect::<Vec<_>>();
        let assigned = Arc::new(window.schema.project(&[wanted.clone(), window_fields].concat())?);
        let node = node.with_operator(OperatorSpec::ProcessingTimeWatermark { time_column });
        let node = node.with_operator(OperatorSpec::WindowAssign { kind: window.kind, time_column, schema: assigned });
        // Back to exactly the columns the scan asked for, in its order.
        let position = |i: &usize| match wanted.iter().position(|w| w == i) {
            Some(p) => p,
            None => wanted.len() + (i - base),
        };
        let indices = wanted_all.iter().map(position).collect();
        let schema = Arc::new(window.schema.project(&wanted_all)?);
        Ok(node.with_operator(OperatorSpec::Select { indices, schema }))
    }

    /// `GROUP BY window_start, window_end, keys…` over a window table function (or over the
    /// output of a window aggregate or window join, whose rows carry their window); any other
    /// grouping is a group aggregate.
    pub(super) fn aggregate_node(&self, agg: &datafusion::logical_expr::Aggregate) -> Result<Node> {
        if let Some(union) = self.grouping_sets_node(agg)? {
            return Ok(union);
        }
        let input_schema = agg.input.schema();
        let Some((start_column, end_column)) = window_columns(&agg.input) else {
            return self.group_aggregate_node(agg);
        };
        let mut key_columns = Vec::with_capacity(agg.group_expr.len());
        let (mut window_start, mut window_end, mut window_time) = (None, None, None);
        let mut other_keys = Vec::new();
        for (i, e) in agg.group_expr.iter().enumerate() {
            let Expr::Column(c) = e else {
                return Err(WeirError::not_supported(format!(
                    "grouping by the expression {} in a window aggregate (compute it in a subquery and group by its column)",
                    e.human_display()
                )));
            };
            let index = input_schema.index_of_column(c)?;
            key_columns.push(index);
            if index == start_column {
                window_start = Some(i);
            } else if index == end_column {
                window_end = Some(i);
            } else if c.name == "window_time" {
                window_time = Some(i);
            } else {
                other_keys.push((index, c.name.clone()));
            }
        }
        let (Some(window_start), Some(window_end)) = (window_start, window_end) else {
            return self.group_aggregate_node(agg);
        };
        let session = session_window(&agg.input);
        if let Some((_, partition_keys)) = &session {
            let mut grouped: Vec<&str> = other_keys.iter().map(|(_, n)| n.as_str()).collect();
            let mut wanted: Vec<&str> = partition_keys.iter().map(|k| k.as_str()).collect();
            grouped.sort_unstable();
            wanted.sort_unstable();
            if grouped != wanted {
                return Err(WeirError::user(format!(
                    "a SESSION window aggregate groups by window_start, window_end and exactly its PARTITION BY \
                     columns ({}), not by {}",
                    if wanted.is_empty() { "none".to_string() } else { wanted.join(", ") },
                    if grouped.is_empty() { "no key".to_string() } else { grouped.join(", ") },
                )));
            }
            self.session_input.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        self.whole_rows.store(direct_window(&agg.input).is_some(), std::sync::atomic::Ordering::Relaxed);
        let input = self.to_node(&agg.input);
        self.session_input.store(false, std::sync::atomic::Ordering::Relaxed);
        self.whole_rows.store(false, std::sync::atomic::Ordering::Relaxed);
        let input = input?;
        let group_exprs = agg.group_expr.iter().map(|e| self.physical(e, input_schema)).collect::<Result<Vec<_>>>()?;
        let output = agg.schema.as_arrow().clone();
        let group_schema = Arc::new(Schema::new(output.fields()[..agg.group_expr.len()].to_vec()));
        let props = self.ctx.state().execution_props().clone();
        let mut aggregates = Vec::new();
        let mut filters = Vec::new();
        for e in &agg.aggr_expr {
            #[allow(deprecated)]
            let (aggregate, filter, order_by) = datafusion::physical_planner::create_aggregate_expr_and_maybe_filter(
                e,
                input_schema,
                input_schema.as_arrow(),
                &props,
            )?;
            if !order_by.is_empty() {
                return Err(WeirError::not_supported("ordered aggregates (WITHIN GROUP / ORDER BY in an aggregate)"));
            }
            aggregates.push(aggregate);
            filters.push(filter);
        }
        let display = format!(
            "group by [{}], [{}]",
            agg.group_expr.iter().map(|e| e.human_display().to_string()).collect::<Vec<_>>().join(", "),
            agg.aggr_expr.iter().map(|e| e.human_display().to_string()).collect::<Vec<_>>().join(", ")
        );
        let late = self.late_output(&agg.input, &input.schema())?;
        let spec =
            WindowSpec { group_exprs, group_schema, window_end, aggregates, filters, schema: Arc::new(output), late };
        if let Some((gap, _)) = session {
            // A key's sessions must meet in one task: exchange by the keys only.
            let keys = other_keys.iter().map(|(i, _)| *i).collect();
            let exchange = Node::Exchange { partitioning: Partitioning::Hash(keys), input: Box::new(input) };
            let spec = SessionSpec { spec, window_start, window_time, gap };
            return Ok(exchange.with_operator(OperatorSpec::SessionAggregate { spec, display }));
        }
        // `window_time` is `window_end` less 1 ms: not a key of the state but a column computed
        // after it, so that adding it to a query keeps the aggregate's state (and its id).
        let full = spec.schema.clone();
        let (spec, key_columns, with_time) = match window_time {
            Some(t) => {
                let time_input = key_columns[t];
                (without_window_time(spec, t)?, key_columns.into_iter().filter(|k| *k != time_input).collect(), Some(t))
            }
            None => (spec, key_columns, None),
        };
        // Each group's rows must meet in one task: exchange by the group columns.
        let exchange = Node::Exchange { partitioning: Partitioning::Hash(key_columns), input: Box::new(input) };
        let (reduced, end) = (spec.schema.clone(), spec.window_end);
        let node = exchange.with_operator(OperatorSpec::WindowAggregate { spec, display });
        Ok(match with_time {
            Some(t) => window_time_after(node, t, end, &reduced, &full),
            None => node,
        })
    }

    /// Where a window aggregate over `input` (with `schema`) writes late rows: the
    /// `'late-data.table'` of the table its window function reads, if it has one.
    pub(super) fn late_output(&self, input: &LogicalPlan, schema: &SchemaRef) -> Result<Option<LateOutput>> {
        let Some((source, _, _)) = direct_window(input) else { return Ok(None) };
        let Some(source) = self.catalog.tables.get(&source) else { return Ok(None) };
        let Some(name) = source.options.get(LATE_DATA_TABLE) else { return Ok(None) };
        let at = source.options.location(LATE_DATA_TABLE);
        let table = self.catalog.tables.get(name).ok_or_else(|| {
            WeirError::user(format!(
                "table '{}': '{LATE_DATA_TABLE}' names '{name}', which is not a table",
                source.name
            ))
            .at(at)
        })?;
        if table.name == source.name {
            return Err(WeirError::user(format!(
                "table '{}': '{LATE_DATA_TABLE}' cannot be the table itself",
                source.name
            ))
            .at(at));
        }
        let columns = table
            .schema
            .fields()
            .iter()
            .map(|f| {
                schema.index_of(f.name()).map_err(|_| {
                    WeirError::user(format!(
                        "late-data table '{}': column '{}' is not a column of '{}' (or is computed before the window aggregate)",
                        table.name,
                        f.name(),
                        source.name
                    ))
                    .at(at)
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(LateOutput { table: table.clone(), columns }))
    }
}

/// A window aggregate's spec without group column `t` (`window_time`).
fn without_window_time(spec: WindowSpec, t: usize) -> Result<WindowSpec> {
    let keep = |n: usize| (0..n).filter(|i| *i != t).collect::<Vec<_>>();
    let group_schema = Arc::new(spec.group_schema.project(&keep(spec.group_schema.fields().len()))?);
    let schema = Arc::new(spec.schema.project(&keep(spec.schema.fields().len()))?);
    let mut group_exprs = spec.group_exprs;
    group_exprs.remove(t);
    let window_end = if spec.window_end > t { spec.window_end - 1 } else { spec.window_end };
    Ok(WindowSpec { group_exprs, group_schema, window_end, schema, ..spec })
}

/// The aggregate's output (`reduced`, whose column `end` is `window_end`) with `window_time`
/// (`window_end` less 1 ms, as the window assigner computes it) back at column `t` of `output`.
fn window_time_after(node: Node, t: usize, end: usize, reduced: &SchemaRef, output: &SchemaRef) -> Node {
    use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
    let column = |i: usize| -> Arc<dyn PhysicalExpr> { Arc::new(Column::new(reduced.field(i).name(), i)) };
    let one_ms = datafusion::common::ScalarValue::IntervalMonthDayNano(Some(
        datafusion::arrow::datatypes::IntervalMonthDayNano { months: 0, days: 0, nanoseconds: 1_000_000 },
    ));
    let exprs = (0..output.fields().len())
        .map(|i| match i.cmp(&t) {
            std::cmp::Ordering::Less => column(i),
            std::cmp::Ordering::Equal => Arc::new(BinaryExpr::new(
                column(end),
                datafusion::logical_expr::Operator::Minus,
                Arc::new(Literal::new(one_ms.clone())),
            )),
            std::cmp::Ordering::Greater => column(i - 1),
        })
        .collect();
    let display = output.fields().iter().map(|f| f.name().clone()).collect();
    node.with_operator(OperatorSpec::Project { exprs, schema: output.clone(), display })
}

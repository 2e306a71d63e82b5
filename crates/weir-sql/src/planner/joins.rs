//! Planning joins. Two windowed inputs joined on their `window_start` and `window_end` are a
//! window join (joined once per window, append-only); any other join on equal keys is a
//! regular join, both inputs kept in state. A key that is an expression (`mod(b.auction,
//! 10000) = s.key`) is computed by a projection on its input, and dropped after the join.

use std::borrow::Cow;

use datafusion::common::JoinType;
use datafusion::logical_expr::ExprSchemable;
use weir_runtime::operators::{Interval, JoinKind, JoinSpec};

use super::windowed::window_columns;
use super::*;

enum Temporal {
    /// As of processing time, against a bounded table.
    Lookup,
    /// As of processing time, against a database table asked for each key.
    Query,
    /// As of event time, against a versioned table: both inputs' time columns.
    Versioned([usize; 2]),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TimeAttribute {
    Event,
    Processing,
}

/// A constant interval of days or less, in milliseconds.
fn interval_millis(e: &Expr) -> Option<i64> {
    use datafusion::common::ScalarValue;
    match e {
        Expr::Literal(ScalarValue::IntervalMonthDayNano(Some(v)), _) if v.months == 0 => {
            Some(v.days as i64 * 86_400_000 + v.nanoseconds / 1_000_000)
        }
        Expr::Literal(ScalarValue::IntervalDayTime(Some(v)), _) => {
            Some(v.days as i64 * 86_400_000 + v.milliseconds as i64)
        }
        Expr::Cast(c) => interval_millis(&c.expr),
        _ => None,
    }
}

/// The column `text` names as written (`B.p_time`), its case kept, as all names are.
fn column_named(text: &str) -> datafusion::common::Column {
    match text.rsplit_once('.') {
        Some((relation, name)) => {
            datafusion::common::Column::new(Some(datafusion::common::TableReference::bare(relation)), name)
        }
        None => datafusion::common::Column::new_unqualified(text),
    }
}

/// `plan` (projections, filters and aliases over a scan) with `column` of the scanned table
/// kept to its output (appended where a projection dropped it).
fn keep_column(plan: &LogicalPlan, column: &str) -> Result<LogicalPlan> {
    use datafusion::logical_expr::{Filter, Projection, SubqueryAlias, TableScanBuilder};
    Ok(match plan {
        LogicalPlan::TableScan(scan) => {
            let full = scan.source.schema();
            let index = full.index_of(column)?;
            let mut projection = scan.projection.clone().unwrap_or_else(|| (0..full.fields().len()).collect());
            if !projection.contains(&index) {
                projection.push(index);
            }
            LogicalPlan::TableScan(
                TableScanBuilder::new(scan.table_name.clone(), scan.source.clone())
                    .with_projection(Some(projection))
                    .with_filters(scan.filters.clone())
                    .with_fetch(scan.fetch)
                    .build()?,
            )
        }
        LogicalPlan::Filter(f) => {
            LogicalPlan::Filter(Filter::try_new(f.predicate.clone(), Arc::new(keep_column(&f.input, column)?))?)
        }
        LogicalPlan::SubqueryAlias(a) => LogicalPlan::SubqueryAlias(SubqueryAlias::try_new(
            Arc::new(keep_column(&a.input, column)?),
            a.alias.clone(),
        )?),
        LogicalPlan::Projection(p) => {
            let input = keep_column(&p.input, column)?;
            let mut exprs = p.expr.clone();
            if !p.schema.fields().iter().any(|f| f.name() == column) {
                let at = input.schema().fields().iter().rposition(|f| f.name() == column);
                let at = at.ok_or_else(|| WeirError::internal(format!("column '{column}' was not kept")))?;
                let (qualifier, field) = input.schema().qualified_field(at);
                exprs.push(Expr::Column(datafusion::common::Column::new(qualifier.cloned(), field.name())));
            }
            LogicalPlan::Projection(Projection::try_new(exprs, Arc::new(input))?)
        }
        other => {
            return Err(WeirError::not_supported(format!(
                "a versioned table read through {} (read it through projections and filters)",
                other.display()
            )))
        }
    })
}

/// A table read `FOR SYSTEM_TIME AS OF` a time.
struct TemporalScan {
    table: String,
    time: String,
}

/// The temporal table `plan` reads directly (through projections, filters and aliases).
fn temporal_scan(plan: &LogicalPlan) -> Option<TemporalScan> {
    match plan {
        LogicalPlan::Projection(p) => temporal_scan(&p.input),
        LogicalPlan::Filter(f) => temporal_scan(&f.input),
        LogicalPlan::SubqueryAlias(a) => temporal_scan(&a.input),
        LogicalPlan::TableScan(scan) => {
            let provider = datafusion::datasource::source_as_provider(&scan.source).ok()?;
            let t = (provider.as_ref() as &dyn std::any::Any).downcast_ref::<crate::temporal::TemporalTable>()?;
            Some(TemporalScan { table: t.table.clone(), time: t.time.clone() })
        }
        _ => None,
    }
}

/// One input of a join as planned: its node (with computed keys appended), its key columns,
/// and its schema with the computed keys.
struct JoinInput {
    node: Node,
    keys: Vec<usize>,
    schema: DFSchema,
}

impl Planner {
    pub(super) fn join_node(&self, join: &datafusion::logical_expr::Join) -> Result<Node> {
        let kind = match join.join_type {
            JoinType::Inner => JoinKind::Inner,
            JoinType::Left => JoinKind::Left,
            JoinType::Right => JoinKind::Right,
            JoinType::Full => JoinKind::Full,
            JoinType::LeftSemi => JoinKind::LeftSemi,
            JoinType::LeftAnti => JoinKind::LeftAnti,
            JoinType::RightSemi => JoinKind::RightSemi,
            JoinType::RightAnti => JoinKind::RightAnti,
            other => return Err(WeirError::not_supported(format!("{other} joins"))),
        };
        // In a versioned join both inputs' rows keep their time, which the join reads,
        // selected or not.
        let versioned = self.versioned_time_columns(join);
        let (left_plan, right_plan) = match &versioned {
            Some((l, r)) => (Cow::Owned(keep_column(&join.left, l)?), Cow::Owned(keep_column(&join.right, r)?)),
            None => (Cow::Borrowed(join.left.as_ref()), Cow::Borrowed(join.right.as_ref())),
        };
        // `x NOT IN (subquery)` is false or unknown when x equals a row, or either is NULL:
        // Flink's condition `(x = y) IS NOT FALSE`, not an equal key. DataFusion puts that
        // pair first, before a correlated subquery's equalities, which stay keys.
        let (on, null_aware) = match (join.null_aware, join.on.as_slice()) {
            (true, [(l, r), rest @ ..]) => (rest, Some(Expr::IsNotFalse(Box::new(l.clone().eq(r.clone()))))),
            (_, on) => (on, None),
        };
        let left = self.join_input(&left_plan, on.iter().map(|(l, _)| l), "left")?;
        let right = self.join_input(&right_plan, on.iter().map(|(_, r)| r), "right")?;
        for (l, r) in left.keys.iter().zip(&right.keys) {
            let (lf, rf) = (left.schema.field(*l), right.schema.field(*r));
            if lf.data_type() != rf.data_type() {
                return Err(WeirError::user(format!(
                    "join keys '{}' ({}) and '{}' ({}) have different types: CAST one of them",
                    lf.name(),
                    lf.data_type(),
                    rf.name(),
                    rf.data_type()
                )));
            }
        }
        // The condition reads a left row and a right row side by side, whatever the join type.
        let pairs = left.schema.join(&right.schema)?;
        let condition = match (null_aware, &join.filter) {
            (Some(n), Some(f)) => Some(n.and(f.clone())),
            (n, f) => n.or_else(|| f.clone()),
        };
        let filter = condition.as_ref().map(|f| self.physical(f, &pairs)).transpose()?;
        let computed = left.schema.fields().len() > join.left.schema().fields().len()
            || right.schema.fields().len() > join.right.schema().fields().len();
        let display = format!(
            "{} on {}{}",
            join.join_type,
            if on.is_empty() {
                "no equal keys (every row meets every row of the other side, in one task)".to_string()
            } else {
                on.iter()
                    .map(|(l, r)| format!("{} = {}", l.human_display(), r.human_display()))
                    .collect::<Vec<_>>()
                    .join(" AND ")
            },
            condition.as_ref().map(|f| format!(" filter {}", f.human_display())).unwrap_or_default()
        );
        let one_side =
            matches!(kind, JoinKind::LeftSemi | JoinKind::LeftAnti | JoinKind::RightSemi | JoinKind::RightAnti);
        let schema = if one_side || !computed {
            Arc::new(join.schema.as_arrow().clone())
        } else {
            Arc::new(pairs.as_arrow().clone())
        };
        if let Some(temporal) = self.temporal_join(join, &left, &right, kind, &display)? {
            let spec = JoinSpec {
                kind,
                keys: [left.keys.clone(), right.keys.clone()],
                schemas: [left.node.schema(), right.node.schema()],
                filter,
                pair_schema: Arc::new(pairs.as_arrow().clone()),
                schema: if computed {
                    Arc::new(pairs.as_arrow().clone())
                } else {
                    Arc::new(join.schema.as_arrow().clone())
                },
                ttl: None,
                interval: None,
                appending: [true, true],
                nulls_equal: false,
            };
            if let Temporal::Query = temporal {
                return self.table_lookup(join, left, right, spec, display, computed);
            }
            let spec = match temporal {
                Temporal::Query => return Err(WeirError::internal("table lookup")),
                Temporal::Lookup => OperatorSpec::LookupJoin { spec, display },
                Temporal::Versioned(times) => OperatorSpec::VersionedJoin { spec, times, display },
            };
            return self.finish_join(join, left, right, spec, computed);
        }
        let ends = self.window_ends(join, &left, &right);
        let spec = JoinSpec {
            kind,
            keys: [left.keys.clone(), right.keys.clone()],
            schemas: [left.node.schema(), right.node.schema()],
            filter,
            pair_schema: Arc::new(pairs.as_arrow().clone()),
            schema,
            ttl: None,
            interval: None,
            appending: [left.node.changelog().is_append_only(), right.node.changelog().is_append_only()],
            nulls_equal: join.null_equality == datafusion::common::NullEquality::NullEqualsNull,
        };
        let spec = match ends {
            Some(ends) => OperatorSpec::WindowJoin { spec, ends, display },
            None => {
                let ttl = self.state_ttl.map(|d| d.as_millis().min(i64::MAX as u128) as i64);
                let appending = left.node.changelog().is_append_only() && right.node.changelog().is_append_only();
                // Flink's interval joins are inner and outer joins; its semi and anti joins
                // keep both inputs, whatever the condition on time.
                let interval = if appending && !one_side { self.interval_bounds(join) } else { None };
                if join.null_aware && left.keys.is_empty() {
                    log::warn!(
                        "{display}: NOT IN over a column that may be NULL compares every row with every row of \
                         the subquery, in one task (a NULL in it empties the result): declare the columns NOT NULL \
                         or write NOT EXISTS to join on keys"
                    );
                } else if left.keys.is_empty() {
                    log::warn!(
                        "a join without equal keys ({display}) keeps every row of both inputs in one task and \
                         compares each with all of the other side's: set 'table.exec.state.ttl' to bound it"
                    );
                }
                let display = match interval {
                    Some(i) => format!(
                        "{display} (an interval join: left time - right time within [{}, {}] ms)",
                        i.lower.map_or("-inf".to_string(), |l| l.to_string()),
                        i.upper.map_or("+inf".to_string(), |u| u.to_string())
                    ),
                    None => display,
                };
                OperatorSpec::Join { spec: JoinSpec { ttl, interval, ..spec }, display }
            }
        };
        self.finish_join(join, left, right, spec, computed && !one_side)
    }

    /// A lookup join against a database table: the left input's rows ask the table for their
    /// keys, in the left input's tasks (nothing is exchanged); computed keys dropped after.
    fn table_lookup(
        &self,
        join: &datafusion::logical_expr::Join,
        left: JoinInput,
        right: JoinInput,
        spec: JoinSpec,
        display: String,
        computed: bool,
    ) -> Result<Node> {
        let Node::Source { table, projection, .. } = &right.node else {
            return Err(WeirError::not_supported(format!(
                "a lookup join ({display}) against a database table with a condition or computed columns on the \
                 table's side: it reads the table's columns as they are; put the condition in the ON clause"
            )));
        };
        let lookup = self.connectors.lookup(table, projection.clone(), right.keys.clone())?;
        let left_all = left.schema.fields().len();
        let display = format!("{display} (asking table '{}' for each key)", table.name);
        let node = left.node.with_operator(OperatorSpec::TableLookup {
            spec,
            lookup: weir_runtime::LookupOf(lookup),
            display,
        });
        if !computed {
            return Ok(node);
        }
        let (l, r) = (join.left.schema().fields().len(), join.right.schema().fields().len());
        let indices: Vec<usize> = (0..l).chain(left_all..left_all + r).collect();
        Ok(node.with_operator(OperatorSpec::Select { indices, schema: Arc::new(join.schema.as_arrow().clone()) }))
    }

    /// Both inputs exchanged by their keys into `spec`; computed keys dropped after.
    fn finish_join(
        &self,
        join: &datafusion::logical_expr::Join,
        left: JoinInput,
        right: JoinInput,
        spec: OperatorSpec,
        computed: bool,
    ) -> Result<Node> {
        let left_all = left.schema.fields().len();
        let node = Node::Join {
            left: Box::new(Node::Exchange { partitioning: Partitioning::Hash(left.keys), input: Box::new(left.node) }),
            right: Box::new(Node::Exchange {
                partitioning: Partitioning::Hash(right.keys),
                input: Box::new(right.node),
            }),
            spec,
        };
        if !computed {
            return Ok(node);
        }
        // Drop the computed keys: the output is the join's declared columns.
        let (l, r) = (join.left.schema().fields().len(), join.right.schema().fields().len());
        let indices: Vec<usize> = (0..l).chain(left_all..left_all + r).collect();
        Ok(node.with_operator(OperatorSpec::Select { indices, schema: Arc::new(join.schema.as_arrow().clone()) }))
    }

    /// What kind of join a `FOR SYSTEM_TIME AS OF` on the right input asks for, if there is one.
    fn temporal_join(
        &self,
        join: &datafusion::logical_expr::Join,
        left: &JoinInput,
        right: &JoinInput,
        kind: JoinKind,
        display: &str,
    ) -> Result<Option<Temporal>> {
        if temporal_scan(&join.left).is_some() {
            return Err(WeirError::not_supported(
                "FOR SYSTEM_TIME AS OF on the left input of a join: the table read as of a time is the right input",
            ));
        }
        let Some(temporal) = temporal_scan(&join.right) else { return Ok(None) };
        let table = &temporal.table;
        let what = format!("FOR SYSTEM_TIME AS OF {} on '{table}'", temporal.time);
        if !matches!(kind, JoinKind::Inner | JoinKind::Left) {
            return Err(WeirError::not_supported(format!("{what}: only inner and left joins ({display})")));
        }
        if left.keys.is_empty() {
            return Err(WeirError::user(format!("{what}: the join needs equal keys (ON s.k = {table}.k)")));
        }
        let column = column_named(&temporal.time);
        // Pruned if nothing reads it: fine for processing time, which is now.
        let time = left.schema.index_of_column(&column).ok();
        let def = self
            .catalog
            .tables
            .get(table)
            .ok_or_else(|| WeirError::internal(format!("temporal table '{table}' is not in the catalog")))?;
        let attribute =
            self.temporal_times.lock().ok().and_then(|t| t.get(&(table.clone(), temporal.time.clone())).copied());
        match attribute {
            Some(TimeAttribute::Processing) => {
                if self.connectors.lookup_source(def) {
                    return Ok(Some(Temporal::Query));
                }
                if !self.connectors.source_bounded(def) {
                    return Err(WeirError::not_supported(format!(
                        "{what}: a lookup join as of processing time reads a bounded table (a file), loaded once; \
                         '{table}' does not end"
                    )));
                }
                Ok(Some(Temporal::Lookup))
            }
            Some(TimeAttribute::Event) => {
                let Some(wm) = &def.watermark else {
                    return Err(WeirError::user(format!(
                        "{what}: an event-time temporal join reads a versioned table: '{table}' needs a WATERMARK"
                    )));
                };
                if def.primary_key.is_empty() {
                    return Err(WeirError::user(format!(
                        "{what}: an event-time temporal join reads a versioned table: '{table}' needs a PRIMARY KEY"
                    )));
                }
                for k in &def.primary_key {
                    let keyed = right.keys.iter().any(|r| right.schema.field(*r).name() == k);
                    if !keyed {
                        return Err(WeirError::user(format!(
                            "{what}: the join must be on the versioned table's PRIMARY KEY, and '{k}' is not a join key"
                        )));
                    }
                }
                let right_time = right.schema.fields().iter().rposition(|f| f.name() == &wm.column).ok_or_else(|| {
                    WeirError::not_supported(format!(
                        "{what}: select the versioned table's time column '{}' too (Weir reads each version's time from it)",
                        wm.column
                    ))
                })?;
                let time = time.ok_or_else(|| {
                    WeirError::not_supported(format!(
                        "{what}: select '{}' too (Weir reads each row's time from it)",
                        temporal.time
                    ))
                })?;
                Ok(Some(Temporal::Versioned([time, right_time])))
            }
            None => Err(WeirError::user(format!(
                "{what}: '{}' is not a time attribute: use the left input's event-time column (one with a \
                 WATERMARK) or PROCTIME()",
                temporal.time
            ))),
        }
    }

    /// The time columns of both inputs of an event-time temporal join, if it is one.
    fn versioned_time_columns(&self, join: &datafusion::logical_expr::Join) -> Option<(String, String)> {
        let t = temporal_scan(&join.right)?;
        let attribute = self.temporal_times.lock().ok()?.get(&(t.table.clone(), t.time.clone())).copied()?;
        match attribute {
            TimeAttribute::Event => {
                let left = t.time.rsplit('.').next().unwrap_or(&t.time).to_string();
                Some((left, self.catalog.tables.get(&t.table)?.watermark.as_ref()?.column.clone()))
            }
            TimeAttribute::Processing => None,
        }
    }

    /// Note the time attribute of each `FOR SYSTEM_TIME AS OF` in the unoptimized `plan`.
    pub(super) fn find_temporal_times(&self, plan: &LogicalPlan) {
        let mut found = Vec::new();
        self.collect_temporal_times(plan, &mut found);
        if let Ok(mut times) = self.temporal_times.lock() {
            times.clear();
            times.extend(found.into_iter().filter_map(|(k, a)| a.map(|a| (k, a))));
        }
    }

    /// The joins' temporal tables in `plan` and in the views it reads (inlined only later).
    #[allow(clippy::type_complexity)]
    fn collect_temporal_times(&self, plan: &LogicalPlan, found: &mut Vec<((String, String), Option<TimeAttribute>)>) {
        use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
        let _ = plan.apply(|node| {
            match node {
                LogicalPlan::Join(j) => {
                    if let Some(t) = temporal_scan(&j.right) {
                        let column = column_named(&t.time);
                        let attribute = match j.left.schema().index_of_column(&column) {
                            Ok(i) => self.time_attribute(&j.left, i),
                            Err(_) => None,
                        };
                        found.push(((t.table, t.time), attribute));
                    }
                }
                LogicalPlan::TableScan(scan) => {
                    let view = datafusion::datasource::source_as_provider(&scan.source)
                        .ok()
                        .and_then(|p| p.get_logical_plan().map(|v| v.into_owned()));
                    if let Some(view) = view {
                        self.collect_temporal_times(&view, found);
                    }
                }
                _ => {}
            }
            Ok(TreeNodeRecursion::Continue)
        });
    }

    /// Whether column `column` of `plan` is a time attribute: a table's event-time column (its
    /// `WATERMARK FOR` column, or a window's `window_time`), or `PROCTIME()`.
    pub(super) fn time_attribute(&self, plan: &LogicalPlan, column: usize) -> Option<TimeAttribute> {
        match plan {
            LogicalPlan::Projection(p) => {
                let mut e = if p.expr.len() == p.schema.fields().len() {
                    p.expr.get(column)?
                } else {
                    // Before the optimizer a `*` stands for many columns: an alias by name, or
                    // the input's column of that name.
                    let name = p.schema.fields().get(column)?.name();
                    match p.expr.iter().find(|e| matches!(e, Expr::Alias(a) if &a.name == name)) {
                        Some(e) => e,
                        None => {
                            let (qualifier, field) = p.schema.qualified_field(column);
                            let input = p.input.schema().index_of_column_by_name(qualifier, field.name())?;
                            return self.time_attribute(&p.input, input);
                        }
                    }
                };
                while let Expr::Alias(a) = e {
                    e = &a.expr;
                }
                match e {
                    Expr::Column(c) => self.time_attribute(&p.input, p.input.schema().index_of_column(c).ok()?),
                    Expr::ScalarFunction(f) if f.name() == crate::temporal::PROCTIME => Some(TimeAttribute::Processing),
                    _ => None,
                }
            }
            LogicalPlan::Filter(f) => self.time_attribute(&f.input, column),
            // An OVER aggregate keeps its input's columns first, time attributes among them.
            LogicalPlan::Window(w) if column < w.input.schema().fields().len() => self.time_attribute(&w.input, column),
            LogicalPlan::SubqueryAlias(a) => self.time_attribute(&a.input, column),
            LogicalPlan::Limit(l) => self.time_attribute(&l.input, column),
            LogicalPlan::Join(j) => {
                let left = j.left.schema().fields().len();
                if column < left {
                    self.time_attribute(&j.left, column)
                } else {
                    self.time_attribute(&j.right, column - left)
                }
            }
            LogicalPlan::TableScan(scan) => {
                let name = scan.projected_schema.fields().get(column)?.name();
                let provider = datafusion::datasource::source_as_provider(&scan.source).ok()?;
                let any = provider.as_ref() as &dyn std::any::Any;
                if any.is::<WindowTable>() {
                    return (name == "window_time").then_some(TimeAttribute::Event);
                }
                let table = match any.downcast_ref::<crate::hints::HintedTable>() {
                    Some(hinted) => self.catalog.tables.get(&hinted.table)?,
                    None => self.catalog.tables.get(scan.table_name.table())?,
                };
                let index = table.schema.index_of(name).ok()?;
                if table.computed_at(index).is_some_and(|c| super::is_proctime(&c.sql)) {
                    return Some(TimeAttribute::Processing);
                }
                (table.watermark.as_ref()?.column == *name).then_some(TimeAttribute::Event)
            }
            _ => None,
        }
    }

    /// Plan one input of a join and find its keys, appending a column for each key that is
    /// an expression rather than a column.
    fn join_input<'a>(
        &self,
        plan: &LogicalPlan,
        keys: impl Iterator<Item = &'a Expr>,
        side: &str,
    ) -> Result<JoinInput> {
        let mut node = self.to_node(plan)?;
        let schema = plan.schema();
        let mut columns = Vec::new();
        let mut computed: Vec<&Expr> = Vec::new();
        for key in keys {
            match key {
                Expr::Column(c) => columns.push(schema.index_of_column(c)?),
                other => {
                    columns.push(schema.fields().len() + computed.len());
                    computed.push(other);
                }
            }
        }
        if computed.is_empty() {
            return Ok(JoinInput { node, keys: columns, schema: schema.as_ref().clone() });
        }
        let mut exprs: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
        let mut display = Vec::new();
        for (i, f) in schema.fields().iter().enumerate() {
            exprs.push(Arc::new(datafusion::physical_expr::expressions::Column::new(f.name(), i)));
            display.push(f.name().clone());
        }
        let mut fields = Vec::new();
        for (i, e) in computed.iter().enumerate() {
            let (_, field) = e.to_field(schema)?;
            fields.push(Field::new(format!("__weir_{side}_key_{i}"), field.data_type().clone(), field.is_nullable()));
            exprs.push(self.physical(e, schema)?);
            display.push(e.human_display().to_string());
        }
        let extra = DFSchema::from_unqualified_fields(fields.into(), Default::default())?;
        let with_keys = schema.join(&extra)?;
        node = node.with_operator(OperatorSpec::Project {
            exprs,
            schema: Arc::new(with_keys.as_arrow().clone()),
            display,
        });
        Ok(JoinInput { node, keys: columns, schema: with_keys })
    }

    /// The time bounds of an interval join: conjuncts of the condition that bound one input's
    /// event-time column by the other's plus or minus a constant (`l.ts BETWEEN r.ts -
    /// INTERVAL '1' MINUTE AND r.ts`, or with `>=`, `<=`, `>`, `<`).
    fn interval_bounds(&self, join: &datafusion::logical_expr::Join) -> Option<Interval> {
        use datafusion::logical_expr::{BinaryExpr, Operator as Op};
        let filter = join.filter.as_ref()?;
        // A time column of either input and an offset in ms: (side, column, offset).
        let time_of = |e: &Expr| -> Option<(usize, usize, i64)> {
            let (column, offset) = match e {
                Expr::BinaryExpr(BinaryExpr { left, op: op @ (Op::Plus | Op::Minus), right }) => {
                    let ms = interval_millis(right)?;
                    (left.as_ref(), if *op == Op::Plus { ms } else { -ms })
                }
                other => (other, 0),
            };
            let Expr::Column(c) = column else { return None };
            if let Ok(i) = join.left.schema().index_of_column(c) {
                return matches!(self.time_attribute(&join.left, i), Some(TimeAttribute::Event))
                    .then_some((0, i, offset));
            }
            let i = join.right.schema().index_of_column(c).ok()?;
            matches!(self.time_attribute(&join.right, i), Some(TimeAttribute::Event)).then_some((1, i, offset))
        };
        let mut times: Option<[usize; 2]> = None;
        let (mut lower, mut upper): (Option<i64>, Option<i64>) = (None, None);
        let mut bound = |a: &Expr, op: Op, b: &Expr| {
            let (Some(x), Some(y)) = (time_of(a), time_of(b)) else { return };
            if x.0 == y.0 {
                return;
            }
            // x.time + x.off OP y.time + y.off, as left - right OP c.
            let (pair, op, c) = if x.0 == 0 {
                ([x.1, y.1], op, y.2 - x.2)
            } else {
                let flipped = match op {
                    Op::Gt => Op::Lt,
                    Op::GtEq => Op::LtEq,
                    Op::Lt => Op::Gt,
                    Op::LtEq => Op::GtEq,
                    other => other,
                };
                ([y.1, x.1], flipped, x.2 - y.2)
            };
            if times.is_some_and(|t| t != pair) {
                return;
            }
            times = Some(pair);
            match op {
                Op::Gt | Op::GtEq => lower = Some(lower.map_or(c, |l| l.max(c))),
                Op::Lt | Op::LtEq => upper = Some(upper.map_or(c, |u| u.min(c))),
                _ => {}
            }
        };
        for conjunct in datafusion::logical_expr::utils::split_conjunction(filter) {
            match conjunct {
                Expr::Between(b) if !b.negated => {
                    bound(&b.expr, Op::GtEq, &b.low);
                    bound(&b.expr, Op::LtEq, &b.high);
                }
                Expr::BinaryExpr(BinaryExpr { left, op, right }) => bound(left, *op, right),
                _ => {}
            }
        }
        let times = times?;
        (lower.is_some() && upper.is_some()).then_some(Interval { times, lower, upper })
    }

    /// `Some(window_end of each input)` if this is a window join: both inputs carry a window
    /// and are joined on its `window_start` and `window_end`.
    fn window_ends(
        &self,
        join: &datafusion::logical_expr::Join,
        left: &JoinInput,
        right: &JoinInput,
    ) -> Option<[usize; 2]> {
        let (left_start, left_end) = window_columns(&join.left)?;
        let (right_start, right_end) = window_columns(&join.right)?;
        let joined_on = |l: usize, r: usize| left.keys.iter().zip(&right.keys).any(|(a, b)| *a == l && *b == r);
        (joined_on(left_start, right_start) && joined_on(left_end, right_end)).then_some([left_end, right_end])
    }
}

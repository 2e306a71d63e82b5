//! From SQL to a streaming operator graph.
//!
//! DataFusion does the SQL work: name resolution, type coercion, the scalar function library,
//! views, and logical optimization. Every table is registered with DataFusion as a schema
//! only; DataFusion never executes anything. The optimized logical plan is then translated
//! node by node into Weir's [`Node`]s, each expression becoming a DataFusion physical
//! expression evaluated on whole batches by Weir's operators. Plan nodes a stream cannot run
//! yet are refused here with "not supported: …", never at run time.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::{cast, concat};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::DFSchema;
use datafusion::datasource::{TableType, ViewTable};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, FetchType, LogicalPlan, SkipType, WriteOp};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{Ident, Query, Statement as SqlStatement};
use datafusion::sql::sqlparser::tokenizer::TokenWithSpan;
use weir_core::{ConnectorFactory, Location, Options, Result, TableDef, WatermarkDef, WeirError, LATE_DATA_TABLE};
use weir_runtime::operators::{JoinKind, JoinSpec, LateOutput, SessionSpec, WindowKind, WindowSpec};
use weir_runtime::{Node, OperatorSpec, Partitioning, SinkTarget, StreamPlan};

use crate::catalog::{normalize, Catalog, ViewDef};
use crate::parser::{find_identifier, location, CreateTable, ObjectKind};
use crate::types::arrow_type;
use crate::windows::{TableSchemas, WindowFunction, WindowTable, WINDOW_COLUMNS};

/// The window table function a scan reads, if it reads one.
fn scanned_window(plan: &LogicalPlan) -> Option<Arc<dyn TableProvider>> {
    let LogicalPlan::TableScan(scan) = plan else { return None };
    let provider = datafusion::datasource::source_as_provider(&scan.source).ok()?;
    (provider.as_ref() as &dyn std::any::Any).is::<WindowTable>().then_some(provider)
}

/// Which output columns of `plan` are a window's `window_start` and `window_end`: those of a
/// window table function, followed through projections (renamed or not), filters, window
/// aggregates and window joins. `None` if the rows do not carry a window.
fn window_columns(plan: &LogicalPlan) -> Option<(usize, usize)> {
    fn column_index(e: &Expr, schema: &DFSchema) -> Option<usize> {
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
fn direct_window(plan: &LogicalPlan) -> Option<(String, WindowKind, Vec<String>)> {
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
fn session_window(plan: &LogicalPlan) -> Option<(i64, Vec<String>)> {
    match direct_window(plan)? {
        (_, WindowKind::Session { gap }, keys) => Some((gap, keys)),
        _ => None,
    }
}

/// A table as DataFusion sees it: a schema, nothing to scan.
#[derive(Debug)]
struct StreamTable {
    schema: SchemaRef,
}

#[async_trait]
impl TableProvider for StreamTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        Err(DataFusionError::Internal("Weir tables are not scanned by DataFusion".into()))
    }
}

fn ident_location(ident: &Ident) -> Option<Location> {
    (ident.span.start.line > 0).then(|| location(ident.span.start))
}

/// Give an error from DataFusion the position of the name it is about, when it has none:
/// the first name quoted in the message (or after "No field named") found among the tokens.
fn place(e: WeirError, tokens: &[TokenWithSpan], start: Location) -> WeirError {
    if e.location.is_some() {
        return e;
    }
    let mut names: Vec<String> = Vec::new();
    if let Some((_, rest)) = e.message.split_once("No field named ") {
        let word = rest.split([' ', ',']).next().unwrap_or("").trim_end_matches('.');
        names.push(word.rsplit('.').next().unwrap_or(word).trim_matches(['"', '\'']).to_string());
    }
    names.extend(e.message.split('\'').skip(1).step_by(2).map(|n| n.rsplit('.').next().unwrap_or(n).to_string()));
    let at = names.iter().find_map(|n| find_identifier(tokens, n)).unwrap_or(start);
    e.at(Some(at))
}

pub struct Planner {
    ctx: SessionContext,
    pub catalog: Catalog,
    connectors: Arc<dyn ConnectorFactory>,
    /// Table schemas for the window table functions, which run inside DataFusion's planner.
    schemas: TableSchemas,
    /// Set while planning the input of a session window aggregate: the only place a
    /// `SESSION` window table function may appear.
    session_input: std::sync::atomic::AtomicBool,
    /// Set while planning the input of a window aggregate whose table has a late-data
    /// table: the window function then passes every column of the table along.
    whole_rows: std::sync::atomic::AtomicBool,
}

impl Planner {
    pub fn new(connectors: Arc<dyn ConnectorFactory>) -> Self {
        let mut config = SessionConfig::new().with_information_schema(false);
        config.options_mut().sql_parser.collect_spans = true;
        let ctx = SessionContext::new_with_config(config);
        let schemas = TableSchemas::default();
        for kind in ["tumble", "hop", "cumulate", "session"] {
            ctx.register_udtf(&format!("__weir_{kind}"), Arc::new(WindowFunction { kind, tables: schemas.clone() }));
        }
        Self {
            ctx,
            catalog: Catalog::default(),
            connectors,
            schemas,
            session_input: Default::default(),
            whole_rows: Default::default(),
        }
    }

    pub fn connectors(&self) -> &Arc<dyn ConnectorFactory> {
        &self.connectors
    }

    fn already_exists(&self, name: &str, ident: &Ident) -> WeirError {
        let what = if self.catalog.views.contains_key(name) { "view" } else { "table" };
        WeirError::user(format!("{what} '{name}' already exists")).at(ident_location(ident))
    }

    /// `CREATE TABLE`. Returns false if it existed and `IF NOT EXISTS` was given.
    pub fn create_table(&mut self, ct: &CreateTable, text: &str) -> Result<bool> {
        let name = normalize(&ct.name);
        if self.catalog.exists(&name) {
            return if ct.if_not_exists { Ok(false) } else { Err(self.already_exists(&name, &ct.name)) };
        }
        let mut fields: Vec<Field> = Vec::with_capacity(ct.columns.len());
        for column in &ct.columns {
            let column_name = normalize(&column.name);
            if fields.iter().any(|f| f.name() == &column_name) {
                return Err(WeirError::user(format!("table '{name}': column '{column_name}' is declared twice"))
                    .at(Some(column.location)));
            }
            let data_type = arrow_type(&column.data_type)
                .map_err(|e| e.context(format!("table '{name}', column '{column_name}'")).at(Some(column.location)))?;
            fields.push(Field::new(column_name, data_type, !column.not_null));
        }
        if fields.is_empty() {
            return Err(WeirError::user(format!("table '{name}' has no columns")).at(ident_location(&ct.name)));
        }
        let schema = Arc::new(Schema::new(fields));
        let column_of = |ident: &Ident, role: &str| -> Result<String> {
            let column = normalize(ident);
            if schema.field_with_name(&column).is_err() {
                return Err(WeirError::user(format!("table '{name}' has no column '{column}' ({role})"))
                    .at(ident_location(ident)));
            }
            Ok(column)
        };
        let watermark = match &ct.watermark {
            None => None,
            Some((ident, expr)) => {
                let column = column_of(ident, "named in WATERMARK FOR")?;
                if !matches!(schema.field_with_name(&column).map(|f| f.data_type()), Ok(DataType::Timestamp(..))) {
                    return Err(WeirError::user(format!(
                        "table '{name}': the WATERMARK column '{column}' must be a TIMESTAMP or TIMESTAMP_LTZ"
                    ))
                    .at(ident_location(ident)));
                }
                Some(WatermarkDef { column, sql: expr.to_string() })
            }
        };
        if ct.options.iter().any(|(k, _, _)| k == LATE_DATA_TABLE) && watermark.is_none() {
            return Err(WeirError::user(format!(
                "table '{name}': '{LATE_DATA_TABLE}' needs event time: declare WATERMARK FOR a column"
            ))
            .at(ct.options.iter().find(|(k, _, _)| k == LATE_DATA_TABLE).map(|(_, _, at)| *at)));
        }
        for ident in &ct.primary_key {
            column_of(ident, "in PRIMARY KEY")?;
        }
        let partition_keys =
            ct.partitioned_by.iter().map(|i| column_of(i, "in PARTITIONED BY")).collect::<Result<Vec<_>>>()?;
        let mut options = Options::default();
        for (key, value, at) in &ct.options {
            if options.insert(key.clone(), value.clone(), Some(*at)).is_some() {
                return Err(WeirError::user(format!("table '{name}': option '{key}' is given twice")).at(Some(*at)));
            }
        }
        let table = TableDef {
            name: name.clone(),
            schema,
            watermark,
            partition_keys,
            options,
            definition: text.to_string(),
            metadata: ct
                .columns
                .iter()
                .filter_map(|c| c.metadata.as_ref().map(|key| (normalize(&c.name), key.clone())))
                .collect(),
        };
        self.connectors.validate(&table)?;
        if let Some(wm) = &table.watermark {
            let (expr, _) = self.watermark_expr(&table, &table.schema).map_err(|e| {
                e.context(format!("table '{name}': WATERMARK expression '{}'", wm.sql))
                    .at(ct.watermark.as_ref().and_then(|(i, _)| ident_location(i)))
            })?;
            let df_schema = DFSchema::try_from(table.schema.as_ref().clone())?;
            let data_type = expr.data_type(df_schema.as_arrow())?;
            if !matches!(data_type, DataType::Timestamp(..)) {
                return Err(WeirError::user(format!(
                    "table '{name}': the WATERMARK expression '{}' must be a timestamp, not {data_type}",
                    wm.sql
                ))
                .at(ct.watermark.as_ref().and_then(|(i, _)| ident_location(i))));
            }
        }
        self.ctx.register_table(name.as_str(), Arc::new(StreamTable { schema: table.schema.clone() }))?;
        if let Ok(mut schemas) = self.schemas.write() {
            schemas.insert(name.clone(), table.schema.clone());
        }
        self.catalog.tables.insert(name, Arc::new(table));
        Ok(true)
    }

    /// The physical watermark expression of `table` against `schema` (some of its columns),
    /// and the names of the columns it reads.
    fn watermark_expr(&self, table: &TableDef, schema: &SchemaRef) -> Result<(Arc<dyn PhysicalExpr>, Vec<String>)> {
        let wm = table.watermark.as_ref().ok_or_else(|| WeirError::internal("table has no watermark"))?;
        let state = self.ctx.state();
        let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
        let expr = state.create_logical_expr(&wm.sql, &df_schema)?;
        let columns = expr.column_refs().into_iter().map(|c| c.name.clone()).collect();
        Ok((state.create_physical_expr(expr, &df_schema)?, columns))
    }

    /// `CREATE VIEW`. The query is planned now, so a view that cannot stream is refused here.
    pub async fn create_view(
        &mut self,
        ident: &Ident,
        query: &Query,
        query_text: &str,
        or_replace: bool,
        if_not_exists: bool,
        tokens: &[TokenWithSpan],
        start: Location,
    ) -> Result<bool> {
        let name = normalize(ident);
        if self.catalog.tables.contains_key(&name) || (self.catalog.views.contains_key(&name) && !or_replace) {
            return if if_not_exists { Ok(false) } else { Err(self.already_exists(&name, ident)) };
        }
        let statement = SqlStatement::Query(Box::new(query.clone()));
        let plan = self.logical_plan(&statement, tokens, start).await?;
        self.to_node(&self.ctx.state().optimize(&plan)?).map_err(|e| place(e, tokens, start))?;
        let schema = Arc::new(plan.schema().as_arrow().clone());
        self.ctx.deregister_table(name.as_str())?;
        self.ctx.register_table(name.as_str(), Arc::new(ViewTable::new(plan, Some(query_text.to_string()))))?;
        self.catalog.views.insert(
            name.clone(),
            ViewDef { name: name.clone(), schema, definition: format!("CREATE VIEW {name} AS {query_text}") },
        );
        Ok(true)
    }

    /// `DROP TABLE` / `DROP VIEW`. Returns false if it did not exist and `IF EXISTS` was given.
    pub fn drop(&mut self, kind: ObjectKind, ident: &Ident, if_exists: bool) -> Result<bool> {
        let name = normalize(ident);
        let removed = match kind {
            ObjectKind::Table => self.catalog.tables.remove(&name).is_some(),
            ObjectKind::View => self.catalog.views.remove(&name).is_some(),
        };
        if !removed {
            if if_exists {
                return Ok(false);
            }
            let what = if kind == ObjectKind::Table { "table" } else { "view" };
            let hint = match kind {
                ObjectKind::Table if self.catalog.views.contains_key(&name) => " (it is a view: DROP VIEW)",
                ObjectKind::View if self.catalog.tables.contains_key(&name) => " (it is a table: DROP TABLE)",
                _ => "",
            };
            return Err(WeirError::user(format!("{what} '{name}' does not exist{hint}")).at(ident_location(ident)));
        }
        self.ctx.deregister_table(name.as_str())?;
        if let Ok(mut schemas) = self.schemas.write() {
            schemas.remove(&name);
        }
        Ok(true)
    }

    async fn logical_plan(
        &self,
        statement: &SqlStatement,
        tokens: &[TokenWithSpan],
        start: Location,
    ) -> Result<LogicalPlan> {
        let state = self.ctx.state();
        let mut statement = statement.clone();
        crate::flink_functions::rewrite(&mut statement)?;
        state
            .statement_to_plan(DFStatement::Statement(Box::new(statement)))
            .await
            .map_err(|e| place(WeirError::from(e), tokens, start))
    }

    /// Plan a bare query (rows to the caller) or an `INSERT INTO` (rows to a table).
    pub async fn plan(
        &self,
        statement: &SqlStatement,
        tokens: &[TokenWithSpan],
        start: Location,
    ) -> Result<StreamPlan> {
        let plan = self.logical_plan(statement, tokens, start).await.map_err(|e| match statement {
            SqlStatement::Insert(insert) if !e.message.contains(" not found") => {
                e.context(format!("INSERT INTO {}", insert.table))
            }
            _ => e,
        })?;
        let (input, sink) = match &plan {
            LogicalPlan::Dml(dml) => {
                if !matches!(dml.op, WriteOp::Insert(InsertOp::Append)) {
                    return Err(WeirError::not_supported(format!("{} (only INSERT INTO)", dml.op)).at(Some(start)));
                }
                let name = dml.table_name.table().to_string();
                let table = self.catalog.tables.get(&name).ok_or_else(|| {
                    WeirError::user(format!("cannot insert into '{name}': it is not a table")).at(Some(start))
                })?;
                (dml.input.as_ref().clone(), SinkTarget::Table(table.clone()))
            }
            other => (other.clone(), SinkTarget::Caller),
        };
        let optimized = self.ctx.state().optimize(&input)?;
        let root = self.to_node(&optimized).map_err(|e| place(e, tokens, start))?;
        Ok(StreamPlan { root, sink })
    }

    fn physical(&self, expr: &Expr, schema: &DFSchema) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(self.ctx.state().create_physical_expr(expr.clone(), schema)?)
    }

    /// Translate an optimized logical plan into Weir's operator graph.
    fn to_node(&self, plan: &LogicalPlan) -> Result<Node> {
        Ok(match plan {
            LogicalPlan::Projection(p) => {
                let input = self.to_node(&p.input)?;
                let exprs = p.expr.iter().map(|e| self.physical(e, p.input.schema())).collect::<Result<Vec<_>>>()?;
                let display = p.expr.iter().map(|e| e.human_display().to_string()).collect();
                let schema = Arc::new(p.schema.as_arrow().clone());
                input.with_operator(OperatorSpec::Project { exprs, schema, display })
            }
            LogicalPlan::Filter(f) => {
                let input = self.to_node(&f.input)?;
                let predicate = self.physical(&f.predicate, f.input.schema())?;
                input
                    .with_operator(OperatorSpec::Filter { predicate, display: f.predicate.human_display().to_string() })
            }
            LogicalPlan::SubqueryAlias(a) => self.to_node(&a.input)?,
            LogicalPlan::TableScan(scan) => self.scan_node(scan)?,
            LogicalPlan::Union(u) => {
                let schema = Arc::new(u.schema.as_arrow().clone());
                let indices: Vec<usize> = (0..schema.fields().len()).collect();
                let inputs = u
                    .inputs
                    .iter()
                    // Each input takes the union's column names and nullability.
                    .map(|i| {
                        Ok(self
                            .to_node(i)?
                            .with_operator(OperatorSpec::Select { indices: indices.clone(), schema: schema.clone() }))
                    })
                    .collect::<Result<Vec<_>>>()?;
                Node::Union { inputs, schema }
            }
            LogicalPlan::Limit(l) => {
                let skip = match l.get_skip_type()? {
                    SkipType::Literal(n) => n,
                    SkipType::UnsupportedExpr => {
                        return Err(WeirError::not_supported("an OFFSET that is not a constant"))
                    }
                };
                let fetch = match l.get_fetch_type()? {
                    FetchType::Literal(n) => n,
                    FetchType::UnsupportedExpr => {
                        return Err(WeirError::not_supported("a LIMIT that is not a constant"))
                    }
                };
                self.to_node(&l.input)?.with_operator(OperatorSpec::Limit { skip, fetch })
            }
            LogicalPlan::EmptyRelation(e) => {
                let schema = Arc::new(e.schema.as_arrow().clone());
                let batches = if e.produce_one_row {
                    vec![RecordBatch::try_new_with_options(
                        schema.clone(),
                        vec![],
                        &RecordBatchOptions::new().with_row_count(Some(1)),
                    )?]
                } else {
                    vec![]
                };
                Node::Values { batches, schema }
            }
            LogicalPlan::Values(v) => self.values_node(v)?,
            LogicalPlan::Sort(_) => {
                return Err(WeirError::not_supported("ORDER BY on a stream (a stream has no last row to sort up to)"))
            }
            LogicalPlan::Aggregate(agg) => self.aggregate_node(agg)?,
            LogicalPlan::Distinct(_) => {
                return Err(WeirError::not_supported("DISTINCT and UNION without ALL outside a window yet"))
            }
            LogicalPlan::Join(join) => self.join_node(join)?,
            LogicalPlan::Window(_) => return Err(WeirError::not_supported("OVER windows yet")),
            LogicalPlan::Subquery(_) => return Err(WeirError::not_supported("subqueries yet")),
            other => {
                let name = other.display().to_string();
                let name = name.split(':').next().unwrap_or("this plan").trim().to_string();
                return Err(WeirError::not_supported(format!("{name} in a streaming query")));
            }
        })
    }

    /// A source reading `wanted` columns of `table` (and the columns its watermark needs),
    /// with its watermark generated. Returns the node and the columns it outputs.
    fn watermarked_source(&self, table: &Arc<TableDef>, wanted: &[usize]) -> Result<(Node, Vec<usize>)> {
        let mut read = wanted.to_vec();
        let Some(wm) = &table.watermark else {
            let schema = Arc::new(table.schema.project(&read)?);
            return Ok((Node::Source { table: table.clone(), projection: Some(read.clone()), schema }, read));
        };
        let (_, needed) = self.watermark_expr(table, &table.schema)?;
        for column in needed {
            let index = table.schema.index_of(&column)?;
            if !read.contains(&index) {
                read.push(index);
            }
        }
        let read_schema = Arc::new(table.schema.project(&read)?);
        let (expr, _) = self.watermark_expr(table, &read_schema)?;
        let source = Node::Source { table: table.clone(), projection: Some(read.clone()), schema: read_schema };
        let display = format!("{} AS {}", wm.column, wm.sql);
        Ok((source.with_operator(OperatorSpec::Watermark { expr, display }), read))
    }

    fn scan_node(&self, scan: &datafusion::logical_expr::TableScan) -> Result<Node> {
        if !scan.filters.is_empty() {
            return Err(WeirError::internal("a filter was pushed into a table scan"));
        }
        let provider = datafusion::datasource::source_as_provider(&scan.source)?;
        let mut node = match (provider.as_ref() as &dyn std::any::Any).downcast_ref::<WindowTable>() {
            Some(window) => self.window_node(window, scan)?,
            None => {
                let name = scan.table_name.table();
                let table = self
                    .catalog
                    .tables
                    .get(name)
                    .ok_or_else(|| WeirError::internal(format!("scanned table '{name}' is not in the catalog")))?;
                let wanted = scan.projection.clone().unwrap_or_else(|| (0..table.schema.fields().len()).collect());
                let (node, read) = self.watermarked_source(table, &wanted)?;
                if read.len() == wanted.len() {
                    node
                } else {
                    let schema = Arc::new(table.schema.project(&wanted)?);
                    node.with_operator(OperatorSpec::Select { indices: (0..wanted.len()).collect(), schema })
                }
            }
        };
        if let Some(fetch) = scan.fetch {
            node = node.with_operator(OperatorSpec::Limit { skip: 0, fetch: Some(fetch) });
        }
        Ok(node)
    }

    /// A window table function: the table's source and watermark, then window assignment.
    fn window_node(&self, window: &WindowTable, scan: &datafusion::logical_expr::TableScan) -> Result<Node> {
        if matches!(window.kind, WindowKind::Session { .. })
            && !self.session_input.swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            return Err(WeirError::not_supported(
                "SESSION windows outside a window aggregate (GROUP BY window_start, window_end, partition keys)",
            ));
        }
        let table = self
            .catalog
            .tables
            .get(&window.table)
            .ok_or_else(|| WeirError::user(format!("table '{}' not found", window.table)))?;
        if table.watermark.as_ref().map(|w| &w.column) != Some(&window.time_column) {
            return Err(WeirError::user(format!(
                "the DESCRIPTOR column '{}' of a window must be the event time column of table '{}' \
                 (declared with WATERMARK FOR {} AS …)",
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
        let time = table.schema.index_of(&window.time_column)?;
        if !wanted.contains(&time) {
            wanted.push(time);
        }
        let (node, read) = self.watermarked_source(table, &wanted)?;
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

    /// `GROUP BY window_start, window_end, keys…` over a window table function (or over the
    /// output of a window aggregate or window join, whose rows carry their window).
    fn aggregate_node(&self, agg: &datafusion::logical_expr::Aggregate) -> Result<Node> {
        let input_schema = agg.input.schema();
        let outside = || {
            WeirError::not_supported(
                "aggregation outside a window yet: GROUP BY window_start, window_end of TUMBLE, HOP, CUMULATE or SESSION",
            )
        };
        let (start_column, end_column) = window_columns(&agg.input).ok_or_else(outside)?;
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
        let (Some(window_start), Some(window_end)) = (window_start, window_end) else { return Err(outside()) };
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
        // Each group's rows must meet in one task: exchange by the group columns.
        let exchange = Node::Exchange { partitioning: Partitioning::Hash(key_columns), input: Box::new(input) };
        Ok(exchange.with_operator(OperatorSpec::WindowAggregate { spec, display }))
    }

    /// Where a window aggregate over `input` (with `schema`) writes late rows: the
    /// `'late-data.table'` of the table its window function reads, if it has one.
    fn late_output(&self, input: &LogicalPlan, schema: &SchemaRef) -> Result<Option<LateOutput>> {
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

    /// A window join: two windowed inputs joined on their `window_start` and `window_end`
    /// (and any other equal keys), each window joined once the watermark passes its end.
    fn join_node(&self, join: &datafusion::logical_expr::Join) -> Result<Node> {
        use datafusion::common::JoinType;
        let kind = match join.join_type {
            JoinType::Inner => JoinKind::Inner,
            JoinType::Left => JoinKind::Left,
            JoinType::Right => JoinKind::Right,
            JoinType::Full => JoinKind::Full,
            JoinType::LeftSemi => JoinKind::LeftSemi,
            JoinType::LeftAnti => JoinKind::LeftAnti,
            JoinType::RightSemi => JoinKind::RightSemi,
            JoinType::RightAnti => JoinKind::RightAnti,
            other => return Err(WeirError::not_supported(format!("{other} joins in a window join"))),
        };
        let not_window = || {
            WeirError::not_supported(
                "joins other than window joins yet: join two windowed inputs \
                 ON l.window_start = r.window_start AND l.window_end = r.window_end (and other keys)",
            )
        };
        let (left_start, left_end) = window_columns(&join.left).ok_or_else(not_window)?;
        let (right_start, right_end) = window_columns(&join.right).ok_or_else(not_window)?;
        let mut keys = [Vec::new(), Vec::new()];
        for (l, r) in &join.on {
            let (Expr::Column(lc), Expr::Column(rc)) = (l, r) else {
                return Err(WeirError::not_supported(format!(
                    "the join key {} = {} (join on columns; compute expressions in a subquery)",
                    l.human_display(),
                    r.human_display()
                )));
            };
            keys[0].push(join.left.schema().index_of_column(lc)?);
            keys[1].push(join.right.schema().index_of_column(rc)?);
        }
        let joined_on = |l: usize, r: usize| keys[0].iter().zip(&keys[1]).any(|(a, b)| *a == l && *b == r);
        if !joined_on(left_start, right_start) || !joined_on(left_end, right_end) {
            return Err(not_window());
        }
        // The condition reads a left row and a right row side by side, whatever the join type.
        let pairs = join.left.schema().join(join.right.schema())?;
        let filter = join.filter.as_ref().map(|f| self.physical(f, &pairs)).transpose()?;
        let left = self.to_node(&join.left)?;
        let right = self.to_node(&join.right)?;
        let (left_schema, right_schema) = (left.schema(), right.schema());
        for (l, r) in keys[0].iter().zip(&keys[1]) {
            let (lf, rf) = (left_schema.field(*l), right_schema.field(*r));
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
        let display = format!(
            "{} on {}{}",
            join.join_type,
            join.on
                .iter()
                .map(|(l, r)| format!("{} = {}", l.human_display(), r.human_display()))
                .collect::<Vec<_>>()
                .join(" AND "),
            join.filter.as_ref().map(|f| format!(" filter {}", f.human_display())).unwrap_or_default()
        );
        let spec = JoinSpec {
            kind,
            ends: [left_end, right_end],
            schemas: [left_schema, right_schema],
            filter,
            pair_schema: Arc::new(pairs.as_arrow().clone()),
            schema: Arc::new(join.schema.as_arrow().clone()),
            keys: keys.clone(),
        };
        let [left_keys, right_keys] = keys;
        Ok(Node::Join {
            left: Box::new(Node::Exchange { partitioning: Partitioning::Hash(left_keys), input: Box::new(left) }),
            right: Box::new(Node::Exchange { partitioning: Partitioning::Hash(right_keys), input: Box::new(right) }),
            spec: OperatorSpec::WindowJoin { spec, display },
        })
    }

    /// `VALUES (…), (…)`: each expression evaluated once, column by column.
    fn values_node(&self, values: &datafusion::logical_expr::Values) -> Result<Node> {
        let schema = Arc::new(values.schema.as_arrow().clone());
        let one_row = RecordBatch::try_new_with_options(
            Arc::new(Schema::empty()),
            vec![],
            &RecordBatchOptions::new().with_row_count(Some(1)),
        )?;
        let empty = DFSchema::empty();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        for (j, field) in schema.fields().iter().enumerate() {
            let mut parts = Vec::with_capacity(values.values.len());
            for row in &values.values {
                let value = self.physical(&row[j], &empty)?.evaluate(&one_row)?.into_array(1)?;
                parts.push(cast(&value, field.data_type())?);
            }
            let refs: Vec<_> = parts.iter().map(|a| a.as_ref()).collect();
            columns.push(concat(&refs)?);
        }
        let batch = RecordBatch::try_new(schema.clone(), columns)?;
        Ok(Node::Values { batches: vec![batch], schema })
    }

    /// The schema of a table or view, for `DESCRIBE`.
    pub fn schema_of(&self, ident: &Ident) -> Result<(SchemaRef, Option<Arc<TableDef>>)> {
        let name = normalize(ident);
        if let Some(t) = self.catalog.tables.get(&name) {
            return Ok((t.schema.clone(), Some(t.clone())));
        }
        if let Some(v) = self.catalog.views.get(&name) {
            return Ok((v.schema.clone(), None));
        }
        Err(WeirError::user(format!("table or view '{name}' does not exist")).at(ident_location(ident)))
    }
}

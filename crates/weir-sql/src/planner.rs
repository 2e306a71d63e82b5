//! From SQL to a streaming operator graph.
//!
//! DataFusion does the SQL work: name resolution, type coercion, the scalar function library,
//! views, and logical optimization. Every table is registered with DataFusion as a schema
//! only; DataFusion never executes anything. The optimized logical plan is then translated
//! node by node into Weir's [`Node`]s, each expression becoming a DataFusion physical
//! expression evaluated on whole batches by Weir's operators. Plan nodes a stream cannot run
//! yet are refused here with "not supported: …", never at run time.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::{cast, concat};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::TableProvider;
use datafusion::common::{DFSchema, TableReference};
use datafusion::datasource::{TableType, ViewTable};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, FetchType, LogicalPlan, SkipType, WriteOp};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{Ident, Query, Statement as SqlStatement};
use datafusion::sql::sqlparser::tokenizer::TokenWithSpan;
use weir_core::{ConnectorFactory, Location, Result, TableDef, WeirError, LATE_DATA_TABLE};
use weir_runtime::operators::{LateOutput, SessionSpec, WindowKind, WindowSpec};
use weir_runtime::{Node, OperatorSpec, Partitioning, SinkTarget, StreamPlan};

use crate::catalog::{normalize, Catalog, ViewDef};
use crate::parser::{find_identifier, location};
use crate::windows::{TableSchemas, WindowFunction, WindowTable, WINDOW_COLUMNS};

mod current_watermark;
mod ddl;
mod derived;
mod grouped;
mod grouping_sets;
mod joins;
mod matching;
mod ordering;
mod over;
mod ranking;
mod shared_exprs;
mod sources;
mod static_partitions;
mod windowed;

/// A table as DataFusion sees it: a schema, nothing to scan.
#[derive(Debug)]
struct StreamTable {
    schema: SchemaRef,
}

crate::windows::planned_only_table!(StreamTable, TableType::Base);

/// Whether a computed column's expression is `PROCTIME()`: a processing-time attribute.
fn is_proctime(sql: &str) -> bool {
    sql.replace(' ', "").eq_ignore_ascii_case("PROCTIME()")
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
    // A refused construct by its keyword (`not supported: MATCH_RECOGNIZE`).
    if let Some(rest) = e.message.strip_prefix("not supported: ") {
        let word = rest.split_whitespace().next().unwrap_or_default();
        names.push(word.trim_end_matches(|c: char| !c.is_alphanumeric() && c != '_').to_string());
    }
    names.extend(e.message.split('\'').skip(1).step_by(2).map(|n| n.rsplit('.').next().unwrap_or(n).to_string()));
    let at = names.iter().find_map(|n| find_identifier(tokens, n)).unwrap_or(start);
    e.at(Some(at))
}

pub struct Planner {
    ctx: SessionContext,
    pub catalog: Catalog,
    /// Functions registered as having side effects (a replay runs them again).
    pub side_effects: std::collections::BTreeSet<String>,
    /// Every function the embedding program registered.
    pub functions: std::collections::BTreeSet<String>,
    /// `'table.exec.state.ttl'`: how long, in event time, group aggregates keep a key.
    pub state_ttl: Option<std::time::Duration>,
    connectors: Arc<dyn ConnectorFactory>,
    /// Table schemas for the window table functions, which run inside DataFusion's planner.
    schemas: TableSchemas,
    /// View schemas for the window table functions (windows over a `PROCTIME()` column).
    view_schemas: TableSchemas,
    /// Each view's logical plan, for a window table function that reads the view.
    view_plans: std::collections::BTreeMap<String, LogicalPlan>,
    /// Set while planning the input of a session window aggregate: the only place a
    /// `SESSION` window table function may appear.
    session_input: std::sync::atomic::AtomicBool,
    /// The time attribute each `FOR SYSTEM_TIME AS OF` (table, time) reads, found before the
    /// optimizer prunes an unused `PROCTIME()` column.
    temporal_times: std::sync::Mutex<std::collections::HashMap<(String, String), joins::TimeAttribute>>,
    /// Set while planning the input of a window aggregate whose table has a late-data
    /// table: the window function then passes every column of the table along.
    whole_rows: std::sync::atomic::AtomicBool,
    /// `CAST(ts AS STRING)` as Flink writes it ([`crate::time_functions::flink_casts`]).
    timestamp_text: Arc<datafusion::logical_expr::ScalarUDF>,
    /// What a relative `'path'` given in an `OPTIONS` hint is relative to (the engine's
    /// base directory, as for `CREATE TABLE`); the working directory when `None`.
    pub base_dir: Option<std::path::PathBuf>,
}

/// Flink's legacy connector options (`'connector.type' = 'filesystem'`, `'connector.path'`,
/// `'format.type'`, as Nexmark q13's side input is declared) under their current names.
fn legacy_option(key: &str, value: &str) -> (String, String) {
    match key {
        "connector.type" => ("connector".into(), value.into()),
        "connector.path" => ("path".into(), value.strip_prefix("file://").unwrap_or(value).into()),
        "format.type" => ("format".into(), value.into()),
        _ => (key.into(), value.into()),
    }
}

impl Planner {
    pub fn new(connectors: Arc<dyn ConnectorFactory>) -> Self {
        let mut config = SessionConfig::new().with_information_schema(false);
        config.options_mut().sql_parser.collect_spans = true;
        // Flink keeps the case of unquoted names: q23's `A.dateTime` must find `dateTime`.
        config.options_mut().sql_parser.enable_ident_normalization = false;
        // Flink's (Calcite's) NULLs are the lowest values: first in ascending order, last in
        // descending, in ORDER BY and in Top-N alike.
        config.options_mut().sql_parser.default_null_ordering = "nulls_min".to_string();
        let ctx = SessionContext::new_with_config(config);
        let schemas = TableSchemas::default();
        let view_schemas = TableSchemas::default();
        ctx.register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(crate::date_format::DateFormat::default()));
        ctx.register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(crate::temporal::ProcTime::default()));
        ctx.register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(crate::temporal::WallClock::now()));
        ctx.register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(crate::temporal::WallClock::local()));
        ctx.register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(crate::temporal::WallClock::local_time()));
        ctx.register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(
            crate::time_functions::ToTimestampLtz::default(),
        ));
        ctx.register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(
            crate::time_functions::TimestampDiff::default(),
        ));
        ctx.register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(
            crate::time_functions::TimestampAdd::default(),
        ));
        ctx.register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(
            crate::time_functions::ConvertTz::default(),
        ));
        for json in [
            crate::json_functions::JsonPathFunction::value(),
            crate::json_functions::JsonPathFunction::query(),
            crate::json_functions::JsonPathFunction::exists(),
        ] {
            ctx.register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(json));
        }
        ctx.register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(
            crate::json_functions::JsonString::default(),
        ));
        for udf in [
            datafusion::logical_expr::ScalarUDF::new_from_impl(crate::json_construct::JsonObject::default()),
            datafusion::logical_expr::ScalarUDF::new_from_impl(crate::json_construct::JsonArray::default()),
            datafusion::logical_expr::ScalarUDF::new_from_impl(crate::predicates::IsJson::default()),
            datafusion::logical_expr::ScalarUDF::new_from_impl(crate::predicates::Overlaps::default()),
            datafusion::logical_expr::ScalarUDF::new_from_impl(crate::text_functions::Bin::default()),
            datafusion::logical_expr::ScalarUDF::new_from_impl(crate::text_functions::Sha1::default()),
            datafusion::logical_expr::ScalarUDF::new_from_impl(crate::text_functions::Encode::default()),
            datafusion::logical_expr::ScalarUDF::new_from_impl(crate::text_functions::Decode::default()),
            datafusion::logical_expr::ScalarUDF::new_from_impl(crate::text_functions::ParseUrl::default()),
            datafusion::logical_expr::ScalarUDF::new_from_impl(crate::text_functions::StrToMap::default()),
            datafusion::logical_expr::ScalarUDF::new_from_impl(crate::regexp_extract::RegexpExtract::default()),
            datafusion::logical_expr::ScalarUDF::new_from_impl(crate::value_functions::TypeOf::default()),
            datafusion::logical_expr::ScalarUDF::new_from_impl(crate::value_functions::Element::default()),
            datafusion::logical_expr::ScalarUDF::new_from_impl(crate::value_functions::OrNullElement::default()),
            datafusion::logical_expr::ScalarUDF::new_from_impl(crate::date_format::UnixTimestamp::default()),
            datafusion::logical_expr::ScalarUDF::new_from_impl(current_watermark::CurrentWatermark::default()),
            datafusion::logical_expr::ScalarUDF::new_from_impl(crate::json_aggregates::JsonValue::default()),
        ] {
            ctx.register_udf(udf);
        }
        for udaf in crate::moments::functions() {
            ctx.register_udaf(udaf);
        }
        ctx.register_udaf(datafusion::logical_expr::AggregateUDF::new_from_impl(
            crate::json_aggregates::JsonAgg::array(),
        ));
        ctx.register_udaf(datafusion::logical_expr::AggregateUDF::new_from_impl(
            crate::json_aggregates::JsonAgg::object(),
        ));
        // Registering only inserts it in a list (its `Result` is always `Ok`).
        let _ = ctx.register_relation_planner(Arc::new(crate::match_recognize::MatchRecognizePlanner));
        ctx.register_udtf("__weir_temporal", Arc::new(crate::temporal::TemporalFunction { tables: schemas.clone() }));
        ctx.register_udtf(crate::hints::FUNCTION, Arc::new(crate::hints::HintedFunction { tables: schemas.clone() }));
        for kind in ["tumble", "hop", "cumulate", "session"] {
            ctx.register_udtf(
                &format!("__weir_{kind}"),
                Arc::new(WindowFunction { kind, tables: schemas.clone(), views: view_schemas.clone() }),
            );
        }
        Self {
            ctx,
            catalog: Catalog::default(),
            state_ttl: None,
            connectors,
            schemas,
            view_schemas,
            view_plans: Default::default(),
            session_input: Default::default(),
            whole_rows: Default::default(),
            side_effects: Default::default(),
            functions: Default::default(),
            temporal_times: Default::default(),
            timestamp_text: Arc::new(datafusion::logical_expr::ScalarUDF::new_from_impl(
                crate::time_functions::TimestampText::default(),
            )),
            base_dir: None,
        }
    }

    pub fn connectors(&self) -> &Arc<dyn ConnectorFactory> {
        &self.connectors
    }

    fn already_exists(&self, name: &str, ident: &Ident) -> WeirError {
        let what = if self.catalog.views.contains_key(name) { "view" } else { "table" };
        WeirError::user(format!("{what} '{name}' already exists")).at(ident_location(ident))
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
        let node = self.stream_node(&plan).map_err(|e| place(e, tokens, start))?;
        node.check_changelog().map_err(|e| place(e, tokens, start))?;
        let schema = Arc::new(plan.schema().as_arrow().clone());
        self.ctx.deregister_table(TableReference::bare(name.as_str()))?;
        self.ctx.register_table(
            TableReference::bare(name.as_str()),
            Arc::new(ViewTable::new(plan.clone(), Some(query_text.to_string()))),
        )?;
        if let Ok(mut views) = self.view_schemas.write() {
            views.insert(name.clone(), schema.clone());
        }
        self.view_plans.insert(name.clone(), plan);
        self.catalog.views.insert(
            name.clone(),
            ViewDef { name: name.clone(), schema, definition: format!("CREATE VIEW {name} AS {query_text}") },
        );
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
        crate::set_ops::refuse_bag_set_operations(&statement).map_err(|e| place(e, tokens, start))?;
        crate::legacy_windows::rewrite(&mut statement).map_err(|e| e.at(Some(start)))?;
        crate::unnest::rewrite(&mut statement).map_err(|e| place(e, tokens, start))?;
        crate::flink_functions::rewrite(&mut statement)?;
        state
            .statement_to_plan(DFStatement::Statement(Box::new(statement)))
            .await
            .map_err(|e| place(WeirError::from(e), tokens, start))
    }

    /// Plan a bare query (rows to the caller) or an `INSERT INTO` (rows to a table).
    /// The functions a query can call, sorted: DataFusion's, Flink's that Weir adds, and the
    /// embedding program's (Weir's internal ones, `__weir_…`, left out).
    pub fn function_names(&self) -> Vec<String> {
        let state = self.ctx.state();
        let mut names: Vec<String> = state
            .scalar_functions()
            .keys()
            .chain(state.aggregate_functions().keys())
            .chain(state.window_functions().keys())
            .filter(|n| !n.starts_with("__weir"))
            .cloned()
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Register a scalar function of the embedding program. Its signature's volatility says
    /// whether it is deterministic (`Volatile`: its value may differ between calls, as
    /// `RANDOM()`); `side_effects` that it acts on the world (a replay runs it again).
    pub fn register_function(&mut self, udf: datafusion::logical_expr::ScalarUDF, side_effects: bool) {
        self.functions.insert(udf.name().to_ascii_lowercase());
        if side_effects {
            self.side_effects.insert(udf.name().to_ascii_lowercase());
        } else {
            self.side_effects.remove(&udf.name().to_ascii_lowercase());
        }
        self.ctx.register_udf(udf);
    }

    pub async fn plan(
        &self,
        statement: &SqlStatement,
        tokens: &[TokenWithSpan],
        start: Location,
    ) -> Result<StreamPlan> {
        let mut statement = statement.clone();
        if let SqlStatement::Insert(insert) = &mut statement {
            self.static_partitions(insert).map_err(|e| e.at(Some(start)))?;
            self.name_stored_columns(insert)?;
        }
        let statement = &statement;
        let plan = self.logical_plan(statement, tokens, start).await.map_err(|e| match statement {
            SqlStatement::Insert(insert) if !e.message.contains(" not found") => {
                e.context(format!("INSERT INTO {}", insert.table))
            }
            _ => e,
        })?;
        let (input, sink) = match &plan {
            LogicalPlan::Dml(dml) => {
                match dml.op {
                    WriteOp::Insert(InsertOp::Append) => {}
                    WriteOp::Insert(InsertOp::Overwrite) => {
                        return Err(WeirError::not_supported(
                            "INSERT OVERWRITE on a stream (Flink runs it in batch mode only: a stream never ends to \
                             replace the table with)",
                        )
                        .at(Some(start)))
                    }
                    _ => return Err(WeirError::not_supported(format!("{} (only INSERT INTO)", dml.op)).at(Some(start))),
                }
                let name = dml.table_name.table().to_string();
                let mut table = self.catalog.tables.get(&name).cloned().ok_or_else(|| {
                    WeirError::user(format!("cannot insert into '{name}': it is not a table")).at(Some(start))
                })?;
                if let Some((options, at)) = crate::hints::insert_options(tokens)? {
                    table = self.with_hinted_options(&table, &options).map_err(|e| e.at(Some(at)))?;
                }
                (dml.input.as_ref().clone(), SinkTarget::Table(table))
            }
            other => (other.clone(), SinkTarget::Caller),
        };
        let mut root = self.stream_node(&input).map_err(|e| place(e, tokens, start))?;
        // A sink writes its persisted columns: computed and VIRTUAL ones (NULL here) are dropped.
        let sink = match sink {
            SinkTarget::Table(table) if !table.computed.is_empty() || !table.virtual_metadata.is_empty() => {
                let persisted = table.persisted();
                let indices = (0..table.schema.fields().len()).filter(|i| table.persisted_at(*i)).collect();
                root = root.with_operator(OperatorSpec::Select { indices, schema: persisted.schema.clone() });
                SinkTarget::Table(persisted)
            }
            other => other,
        };
        root.check_changelog().map_err(|e| place(e, tokens, start))?;
        weir_runtime::check_keyed_inputs(&root).map_err(|e| place(e, tokens, start))?;
        if let SinkTarget::Table(table) = &sink {
            let primary_key: Vec<usize> =
                table.primary_key.iter().filter_map(|k| table.schema.index_of(k).ok()).collect();
            root = materialize_for(root, table, &primary_key);
            self.connectors
                .check_sink_input(table, &root.changelog(), root.unique_key_for(&primary_key).as_deref())
                .map_err(|e| place(e, tokens, start))?;
        }
        Ok(StreamPlan { root, sink })
    }

    /// `INSERT INTO t` where `t` has computed or `VIRTUAL` metadata columns writes only its
    /// persisted columns, as in Flink: they are named, so that DataFusion expects no value for
    /// the others.
    fn name_stored_columns(&self, insert: &mut datafusion::sql::sqlparser::ast::Insert) -> Result<()> {
        use datafusion::sql::sqlparser::ast::{ObjectName, TableObject};
        let TableObject::TableName(name) = &insert.table else { return Ok(()) };
        let Some(table) = name.0.last().and_then(|p| p.as_ident()).and_then(|i| self.catalog.tables.get(&normalize(i)))
        else {
            return Ok(());
        };
        if table.computed.is_empty() && table.virtual_metadata.is_empty() {
            return Ok(());
        }
        for column in &insert.columns {
            let ident = column.0.last().and_then(|p| p.as_ident());
            let index = ident.and_then(|i| table.schema.index_of(&normalize(i)).ok());
            if let Some(i) = index.filter(|i| !table.persisted_at(*i)) {
                let what = if table.computed_at(i).is_some() { "computed" } else { "a VIRTUAL metadata column" };
                return Err(WeirError::user(format!(
                    "INSERT INTO {}: column '{column}' is {what}, and cannot be written",
                    table.name
                ))
                .at(ident.and_then(ident_location)));
            }
        }
        if insert.columns.is_empty() {
            insert.columns = (0..table.schema.fields().len())
                .filter(|i| table.persisted_at(*i))
                .map(|i| ObjectName::from(vec![Ident::with_quote('"', table.schema.field(i).name())]))
                .collect();
        }
        Ok(())
    }

    /// A query's logical plan, optimized, as Weir's operator graph. Time attributes of
    /// temporal joins are read first, before the optimizer prunes an unused `PROCTIME()`.
    /// A call that a filter and its projection both make is then made once
    /// ([`shared_exprs`]).
    fn stream_node(&self, plan: &LogicalPlan) -> Result<Node> {
        self.find_temporal_times(plan);
        let plan = shared_exprs::share_filter_calls(self.ctx.state().optimize(plan)?)?;
        self.to_node(&plan)
    }

    fn physical(&self, expr: &Expr, schema: &DFSchema) -> Result<Arc<dyn PhysicalExpr>> {
        let expr = crate::time_functions::flink_casts(expr.clone(), schema, &self.timestamp_text)?;
        Ok(self.ctx.state().create_physical_expr(expr, schema)?)
    }

    /// Translate an optimized logical plan into Weir's operator graph.
    fn to_node(&self, plan: &LogicalPlan) -> Result<Node> {
        Ok(match plan {
            LogicalPlan::Projection(p) => self.project(self.to_node(&p.input)?, p)?,
            LogicalPlan::Filter(f) if let Some(ranked) = self.rank_node(f)? => ranked,
            LogicalPlan::Filter(f) => {
                let input = self.to_node(&f.input)?;
                let display = f.predicate.human_display().to_string();
                let (input, extended, predicate) =
                    self.with_current_watermark(input, &f.input, std::slice::from_ref(&f.predicate))?;
                let schema = extended.as_deref().unwrap_or(f.input.schema());
                let predicate = self.physical(&predicate[0], schema)?;
                let filtered = input.with_operator(OperatorSpec::Filter { predicate, display });
                match extended {
                    // The watermark column goes again once the filter has read it.
                    Some(_) => filtered.with_operator(OperatorSpec::Select {
                        indices: (0..f.input.schema().fields().len()).collect(),
                        schema: Arc::new(f.input.schema().as_arrow().clone()),
                    }),
                    None => filtered,
                }
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
                // `ORDER BY … LIMIT`, with the select list's projection between them or not.
                match l.input.as_ref() {
                    LogicalPlan::Sort(sort) => return self.sort_node(sort, skip, fetch),
                    LogicalPlan::Projection(p) => {
                        if let LogicalPlan::Sort(sort) = p.input.as_ref() {
                            return self.project(self.sort_node(sort, skip, fetch)?, p);
                        }
                    }
                    _ => {}
                }
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
            LogicalPlan::Sort(sort) => self.sort_node(sort, 0, None)?,
            LogicalPlan::Aggregate(agg) => self.aggregate_node(agg)?,
            // DataFusion's optimizer turns DISTINCT (and UNION) into a grouping: what is left is
            // DISTINCT ON.
            LogicalPlan::Distinct(_) => return Err(WeirError::not_supported("DISTINCT ON")),
            LogicalPlan::Join(join) => self.join_node(join)?,
            LogicalPlan::Window(w) => self.over_node(w)?,
            LogicalPlan::Subquery(_) => return Err(WeirError::not_supported("subqueries yet")),
            LogicalPlan::Unnest(u) => self.unnest_node(u)?,
            LogicalPlan::Extension(e)
                if let Some(m) = e.node.as_any().downcast_ref::<crate::match_recognize::MatchNode>() =>
            {
                self.match_node(m)?
            }
            other => {
                let name = other.display().to_string();
                let name = name.split(':').next().unwrap_or("this plan").trim().to_string();
                return Err(WeirError::not_supported(format!("{name} in a streaming query")));
            }
        })
    }

    /// `unnest(list)` (the rewrite of `CROSS JOIN UNNEST`): one row per element, in the task.
    fn unnest_node(&self, u: &datafusion::logical_expr::Unnest) -> Result<Node> {
        if !u.struct_type_columns.is_empty() {
            return Err(WeirError::not_supported("UNNEST of a ROW (select its fields instead)"));
        }
        if u.list_type_columns.iter().any(|(_, l)| l.depth != 1) {
            return Err(WeirError::not_supported("UNNEST of nested arrays in one step (UNNEST each level)"));
        }
        let input = self.to_node(&u.input)?;
        if let weir_core::Changelog::Upsert(_) = input.changelog() {
            return Err(WeirError::not_supported("UNNEST of an upsert stream (a key's row would become several)"));
        }
        let display = u.exec_columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>().join(", ");
        let spec = weir_runtime::operators::UnnestSpec {
            lists: u.list_type_columns.iter().map(|(i, _)| *i).collect(),
            outputs: u.dependency_indices.clone(),
            schema: Arc::new(u.schema.as_arrow().clone()),
        };
        Ok(input.with_operator(OperatorSpec::Unnest { spec, display }))
    }

    /// The projection `p` over `input`, planned.
    fn project(&self, input: Node, p: &datafusion::logical_expr::Projection) -> Result<Node> {
        let display = p.expr.iter().map(|e| e.human_display().to_string()).collect();
        let (input, extended, exprs) = self.with_current_watermark(input, &p.input, &p.expr)?;
        let schema = extended.as_deref().unwrap_or(p.input.schema());
        let exprs = exprs.iter().map(|e| self.physical(e, schema)).collect::<Result<Vec<_>>>()?;
        let schema = Arc::new(p.schema.as_arrow().clone());
        Ok(input.with_operator(OperatorSpec::Project { exprs, schema, display }))
    }

    fn scan_node(&self, scan: &datafusion::logical_expr::TableScan) -> Result<Node> {
        if !scan.filters.is_empty() {
            return Err(WeirError::internal("a filter was pushed into a table scan"));
        }
        let provider = datafusion::datasource::source_as_provider(&scan.source)?;
        let any = provider.as_ref() as &dyn std::any::Any;
        let mut node = match any.downcast_ref::<WindowTable>() {
            Some(window) => self.window_node(window, scan)?,
            None => {
                // A temporal table is read as the table is; the join above knows it by its scan.
                let name = match (
                    any.downcast_ref::<crate::temporal::TemporalTable>(),
                    any.downcast_ref::<crate::hints::HintedTable>(),
                ) {
                    (Some(temporal), _) => temporal.table.as_str(),
                    (_, Some(hinted)) => hinted.table.as_str(),
                    _ => scan.table_name.table(),
                };
                let table = self
                    .catalog
                    .tables
                    .get(name)
                    .ok_or_else(|| WeirError::internal(format!("scanned table '{name}' is not in the catalog")))?;
                let hinted;
                let table = match any.downcast_ref::<crate::hints::HintedTable>() {
                    Some(hint) => {
                        hinted = self.with_hinted_options(table, &hint.options)?;
                        &hinted
                    }
                    None => table,
                };
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

/// The query of `INSERT INTO t query`, as a statement of its own (`CREATE TABLE … AS SELECT`
/// plans it to learn the table's columns).
pub fn query_of_insert(statement: &SqlStatement) -> Result<SqlStatement> {
    match statement {
        SqlStatement::Insert(insert) => match &insert.source {
            Some(query) => Ok(SqlStatement::Query(query.clone())),
            None => Err(WeirError::internal("an INSERT without a query")),
        },
        _ => Err(WeirError::internal("not an INSERT")),
    }
}

/// An updating result written by key into a table whose primary key is not the result's own
/// unique key: each key's rows are kept and the latest is its value, as Flink's
/// `SinkUpsertMaterializer` (after an exchange by that key). Other sinks, appending results and
/// results already keyed as the table go as they are.
fn materialize_for(root: Node, table: &TableDef, primary_key: &[usize]) -> Node {
    let by_key = matches!(table.options.get("connector"), Some("upsert-kafka" | "jdbc"));
    if !by_key || primary_key.is_empty() || root.changelog().is_append_only() {
        return root;
    }
    let mut wanted = primary_key.to_vec();
    wanted.sort_unstable();
    let mut have = root.unique_key_for(primary_key);
    if let Some(h) = &mut have {
        h.sort_unstable();
    }
    if have.as_deref() == Some(wanted.as_slice()) {
        return root;
    }
    let spec = weir_runtime::operators::MaterializeSpec { key: primary_key.to_vec(), schema: root.schema() };
    Node::Exchange { partitioning: Partitioning::Hash(primary_key.to_vec()), input: Box::new(root) }
        .with_operator(OperatorSpec::UpsertMaterialize { spec })
}

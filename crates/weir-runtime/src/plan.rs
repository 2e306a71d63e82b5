//! The streaming operator graph the planner builds and the runtime runs.

use std::fmt::Write;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::physical_expr::PhysicalExpr;
use weir_core::{Changelog, Operator, Result, TableDef, WeirError};

use crate::exchange::Partitioning;
use crate::operators::{
    AppendWatermark, Filter, FirstRow, GroupAggregate, GroupSpec, JoinKind, JoinSpec, Keyed, Limit, LookupJoin,
    MatchRecognize, MatchSpec, MaterializeSpec, OverAggregate, OverSpec, ProcessingTimeWatermark, Project, Select,
    SessionAggregate, SessionSpec, StateContext, StreamJoin, TableLookupJoin, TimeSort, TimeSortSpec, TopN, TopNSpec,
    Unnest, UnnestSpec, UpsertMaterialize, UpsertNormalize, UpsertSpec, VersionedJoin, WatermarkGenerator,
    WindowAggregate, WindowAssign, WindowJoin, WindowKind, WindowSpec, WindowTopN,
};

/// A stateless operator as planned; [`OperatorSpec::instantiate`] makes a running copy.
#[derive(Debug, Clone)]
pub enum OperatorSpec {
    /// Compute the output columns. `display` holds the SQL text of each, for `EXPLAIN`.
    Project { exprs: Vec<Arc<dyn PhysicalExpr>>, schema: SchemaRef, display: Vec<String> },
    /// Keep rows where the predicate is true.
    Filter { predicate: Arc<dyn PhysicalExpr>, display: String },
    /// Keep some columns, by index.
    Select { indices: Vec<usize>, schema: SchemaRef },
    /// Append the operator's current watermark as a column (`CURRENT_WATERMARK`): `schema` is
    /// the input's and that column.
    AppendWatermark { schema: SchemaRef },
    /// One row per element of the rows' list columns (`CROSS JOIN UNNEST`).
    Unnest { spec: UnnestSpec, display: String },
    /// End the stream after `fetch` rows (after skipping `skip`).
    Limit { skip: usize, fetch: Option<usize> },
    /// Derive watermarks from `expr`, the table's `WATERMARK FOR … AS expr`.
    Watermark { expr: Arc<dyn PhysicalExpr>, display: String },
    /// Watermarks of processing time (the wall clock) for windows over `PROCTIME()` column
    /// `time_column`, in place of the source's.
    ProcessingTimeWatermark { time_column: usize },
    /// Add `window_start`, `window_end`, `window_time` (a row per window it belongs to).
    WindowAssign { kind: WindowKind, time_column: usize, schema: SchemaRef },
    /// Aggregate each window's groups; emit a window when the watermark passes its end.
    WindowAggregate { spec: WindowSpec, display: String },
    /// Aggregate each key's session windows; emit a session when the watermark passes its end.
    SessionAggregate { spec: SessionSpec, display: String },
    /// Join two inputs' rows of the same window when the watermark passes its end (the
    /// operator that starts a [`Node::Join`] task).
    WindowJoin { spec: JoinSpec, ends: [usize; 2], display: String },
    /// Join two inputs' rows as they come, both kept in state (the operator that starts a
    /// [`Node::Join`] task): a retracting changelog unless both inputs append and the join
    /// is inner.
    Join { spec: JoinSpec, display: String },
    /// Join each row of the left input with a bounded right input (a file), loaded first
    /// (`FOR SYSTEM_TIME AS OF` a processing time).
    LookupJoin { spec: JoinSpec, display: String },
    /// Join each row of its input with the rows of a database table of its key, asked as
    /// rows come (`FOR SYSTEM_TIME AS OF` a processing time, a `jdbc` table).
    TableLookup { spec: JoinSpec, lookup: LookupOf, display: String },
    /// Join each row of the left input, once the watermark passes its time, with the
    /// version of the right input (a versioned table) valid then; `times` are both
    /// inputs' time columns (`FOR SYSTEM_TIME AS OF` an event time).
    VersionedJoin { spec: JoinSpec, times: [usize; 2], display: String },
    /// Aggregate each group outside a window, updating its result as rows come and go.
    GroupAggregate { spec: GroupSpec, display: String },
    /// An upsert stream (each key's new row, or its deletion) as a retracting changelog.
    UpsertNormalize { spec: UpsertSpec },
    /// The first rows of each partition by an order (Top-N, deduplication), kept up to date.
    TopN { spec: TopNSpec, display: String },
    /// The first rows of each partition of each window (`window_end` is its column), once
    /// the watermark passes the window's end.
    WindowTopN { spec: TopNSpec, window_end: usize, display: String },
    /// Each partition's first row by event time (`time` is its column), once the watermark
    /// passes it.
    FirstRow { spec: TopNSpec, time: usize, display: String },
    /// `ORDER BY` an event time (then other columns): rows emitted in order as the watermark
    /// passes them, all in one task.
    TimeSort { spec: TimeSortSpec, display: String },
    /// Aggregates over each partition's rows in event-time order (`agg(x) OVER (PARTITION BY
    /// … ORDER BY rowtime …)`): each row emitted with its values once the watermark passes it.
    OverAggregate { spec: OverSpec, display: String },
    /// `MATCH_RECOGNIZE`: each partition's rows in event-time order through a pattern, one
    /// row per match once the watermark passes its rows.
    MatchRecognize { spec: MatchSpec, display: String },
    /// The rows that hold each sink key, the latest its value, for a sink written by another
    /// key than the query's (Flink's `SinkUpsertMaterializer`).
    UpsertMaterialize { spec: MaterializeSpec },
}

/// The lookups a [`OperatorSpec::TableLookup`] makes, one per task.
#[derive(Clone)]
pub struct LookupOf(pub weir_core::LookupFactory);

impl std::fmt::Debug for LookupOf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LookupOf")
    }
}

/// Where a running operator keeps state.
#[derive(Debug, Clone)]
pub struct InstanceContext {
    /// Unique per operator instance of the job, stable across restarts.
    pub key: String,
    /// `Some((local root, the checkpoints' shared files))` with the RocksDB state backend.
    pub rocksdb: Option<(std::path::PathBuf, std::sync::Arc<dyn weir_storage::Storage>)>,
    /// The job's key groups, and the ones this operator's task owns.
    pub key_groups: weir_state::KeyGroups,
    pub owned: std::ops::Range<u16>,
}

impl InstanceContext {
    /// Keyed state in the job's backend: RocksDB in a directory of this instance's own.
    fn state(&self) -> StateContext {
        let backend = match &self.rocksdb {
            Some((local, shared)) => {
                weir_state::Backend::RocksDb { local: local.join(&self.key), shared: shared.clone() }
            }
            None => weir_state::Backend::Memory,
        };
        StateContext { backend, key_groups: self.key_groups, owned: self.owned.clone() }
    }
}

impl OperatorSpec {
    /// A running copy, with its state where `ctx` says.
    pub fn instantiate_in(&self, ctx: &InstanceContext) -> weir_core::Result<Box<dyn Operator>> {
        match self {
            OperatorSpec::WindowAggregate { spec, .. } => {
                Ok(Box::new(Keyed(WindowAggregate::new(spec.clone(), &ctx.state())?)))
            }
            OperatorSpec::SessionAggregate { spec, .. } => {
                Ok(Box::new(Keyed(SessionAggregate::new(spec.clone(), &ctx.state())?)))
            }
            OperatorSpec::WindowJoin { spec, ends, .. } => {
                Ok(Box::new(Keyed(WindowJoin::new(spec.clone(), *ends, &ctx.state())?)))
            }
            OperatorSpec::Join { spec, .. } => Ok(Box::new(Keyed(StreamJoin::new(spec.clone(), &ctx.state())?))),
            OperatorSpec::LookupJoin { spec, .. } => Ok(Box::new(Keyed(LookupJoin::new(spec.clone(), &ctx.state())?))),
            OperatorSpec::VersionedJoin { spec, times, .. } => {
                Ok(Box::new(Keyed(VersionedJoin::new(spec.clone(), *times, &ctx.state())?)))
            }
            OperatorSpec::GroupAggregate { spec, .. } => {
                Ok(Box::new(Keyed(GroupAggregate::new(spec.clone(), &ctx.state())?)))
            }
            OperatorSpec::UpsertNormalize { spec } => {
                Ok(Box::new(Keyed(UpsertNormalize::new(spec.clone(), &ctx.state())?)))
            }
            OperatorSpec::TopN { spec, .. } => Ok(Box::new(Keyed(TopN::new(spec.clone(), &ctx.state())?))),
            OperatorSpec::WindowTopN { spec, window_end, .. } => {
                Ok(Box::new(Keyed(WindowTopN::new(spec.clone(), *window_end, &ctx.state())?)))
            }
            OperatorSpec::FirstRow { spec, time, .. } => {
                Ok(Box::new(Keyed(FirstRow::new(spec.clone(), *time, &ctx.state())?)))
            }
            OperatorSpec::TimeSort { spec, .. } => Ok(Box::new(Keyed(TimeSort::new(spec.clone(), &ctx.state())?))),
            OperatorSpec::OverAggregate { spec, .. } => {
                Ok(Box::new(Keyed(OverAggregate::new(spec.clone(), &ctx.state())?)))
            }
            OperatorSpec::MatchRecognize { spec, .. } => {
                Ok(Box::new(Keyed(MatchRecognize::new(spec.clone(), &ctx.state())?)))
            }
            OperatorSpec::UpsertMaterialize { spec } => {
                Ok(Box::new(Keyed(UpsertMaterialize::new(spec.clone(), &ctx.state())?)))
            }
            _ => self.instantiate(),
        }
    }

    /// A running copy with its state in memory.
    pub fn instantiate(&self) -> weir_core::Result<Box<dyn Operator>> {
        Ok(match self.clone() {
            OperatorSpec::Project { exprs, schema, .. } => Box::new(Project::new(exprs, schema)),
            OperatorSpec::Filter { predicate, .. } => Box::new(Filter::new(predicate)),
            OperatorSpec::Select { indices, schema } => Box::new(Select::new(indices, schema)),
            OperatorSpec::AppendWatermark { schema } => Box::new(AppendWatermark::new(schema)),
            OperatorSpec::Unnest { spec, .. } => Box::new(Unnest::new(spec)),
            OperatorSpec::Limit { skip, fetch } => Box::new(Limit::new(skip, fetch)),
            OperatorSpec::Watermark { expr, .. } => Box::new(WatermarkGenerator::new(expr)),
            OperatorSpec::ProcessingTimeWatermark { time_column } => {
                Box::new(ProcessingTimeWatermark::new(time_column))
            }
            OperatorSpec::WindowAssign { kind, time_column, schema } => {
                Box::new(WindowAssign::new(kind, time_column, schema))
            }
            OperatorSpec::WindowAggregate { spec, .. } => {
                Box::new(Keyed(WindowAggregate::new(spec, &StateContext::memory())?))
            }
            OperatorSpec::SessionAggregate { spec, .. } => {
                Box::new(Keyed(SessionAggregate::new(spec, &StateContext::memory())?))
            }
            OperatorSpec::WindowJoin { spec, ends, .. } => {
                Box::new(Keyed(WindowJoin::new(spec, ends, &StateContext::memory())?))
            }
            OperatorSpec::Join { spec, .. } => Box::new(Keyed(StreamJoin::new(spec, &StateContext::memory())?)),
            OperatorSpec::LookupJoin { spec, .. } => Box::new(Keyed(LookupJoin::new(spec, &StateContext::memory())?)),
            OperatorSpec::TableLookup { spec, lookup, .. } => Box::new(TableLookupJoin::new(spec, (lookup.0)()?)?),
            OperatorSpec::VersionedJoin { spec, times, .. } => {
                Box::new(Keyed(VersionedJoin::new(spec, times, &StateContext::memory())?))
            }
            OperatorSpec::GroupAggregate { spec, .. } => {
                Box::new(Keyed(GroupAggregate::new(spec, &StateContext::memory())?))
            }
            OperatorSpec::UpsertNormalize { spec } => {
                Box::new(Keyed(UpsertNormalize::new(spec, &StateContext::memory())?))
            }
            OperatorSpec::TopN { spec, .. } => Box::new(Keyed(TopN::new(spec, &StateContext::memory())?)),
            OperatorSpec::WindowTopN { spec, window_end, .. } => {
                Box::new(Keyed(WindowTopN::new(spec, window_end, &StateContext::memory())?))
            }
            OperatorSpec::FirstRow { spec, time, .. } => {
                Box::new(Keyed(FirstRow::new(spec, time, &StateContext::memory())?))
            }
            OperatorSpec::TimeSort { spec, .. } => Box::new(Keyed(TimeSort::new(spec, &StateContext::memory())?)),
            OperatorSpec::OverAggregate { spec, .. } => {
                Box::new(Keyed(OverAggregate::new(spec, &StateContext::memory())?))
            }
            OperatorSpec::MatchRecognize { spec, .. } => {
                Box::new(Keyed(MatchRecognize::new(spec, &StateContext::memory())?))
            }
            OperatorSpec::UpsertMaterialize { spec } => {
                Box::new(Keyed(UpsertMaterialize::new(spec, &StateContext::memory())?))
            }
        })
    }

    /// Whether the operator needs an append-only input (it treats every row as an insert).
    fn needs_append_only(&self) -> bool {
        matches!(
            self,
            OperatorSpec::WindowAssign { .. }
                | OperatorSpec::WindowAggregate { .. }
                | OperatorSpec::SessionAggregate { .. }
                | OperatorSpec::WindowJoin { .. }
                | OperatorSpec::WindowTopN { .. }
                | OperatorSpec::FirstRow { .. }
                | OperatorSpec::TimeSort { .. }
                | OperatorSpec::OverAggregate { .. }
                | OperatorSpec::MatchRecognize { .. }
                | OperatorSpec::Limit { .. }
                | OperatorSpec::TableLookup { .. }
        )
    }

    /// What the operator's output carries, given its input's.
    fn changelog(&self, input: Changelog) -> Changelog {
        match self {
            OperatorSpec::GroupAggregate { .. }
            | OperatorSpec::UpsertNormalize { .. }
            | OperatorSpec::UpsertMaterialize { .. }
            | OperatorSpec::TopN { .. } => Changelog::Retract,
            _ if self.needs_append_only() => Changelog::AppendOnly,
            _ => input,
        }
    }

    /// The table late rows are written to, if the operator has one.
    pub fn late_table(&self) -> Option<&Arc<TableDef>> {
        match self {
            OperatorSpec::WindowAggregate { spec, .. } => spec.late.as_ref().map(|l| &l.table),
            OperatorSpec::SessionAggregate { spec, .. } => spec.spec.late.as_ref().map(|l| &l.table),
            _ => None,
        }
    }

    /// Whether the operator needs every row in one task (a global `LIMIT`): its input is
    /// gathered from all parallel tasks into one.
    pub fn single_task(&self) -> bool {
        matches!(self, OperatorSpec::Limit { .. } | OperatorSpec::TimeSort { .. })
    }

    /// Whether the operator may keep state in checkpoints (and so has a stable identity):
    /// all but the row-by-row ones.
    pub fn is_stateful(&self) -> bool {
        !matches!(
            self,
            OperatorSpec::Project { .. }
                | OperatorSpec::Filter { .. }
                | OperatorSpec::Select { .. }
                | OperatorSpec::Unnest { .. }
                | OperatorSpec::WindowAssign { .. }
        )
    }

    pub fn describe(&self) -> String {
        match self {
            OperatorSpec::Project { display, .. } => format!("Project: {}", display.join(", ")),
            OperatorSpec::Filter { display, .. } => format!("Filter: {display}"),
            OperatorSpec::Unnest { display, .. } => format!("Unnest: {display}"),
            OperatorSpec::AppendWatermark { .. } => "CurrentWatermark: the watermark as a column".into(),
            OperatorSpec::Select { schema, .. } => {
                let names: Vec<_> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                format!("Select: {}", names.join(", "))
            }
            OperatorSpec::Limit { skip, fetch } => match fetch {
                Some(n) => format!("Limit: skip {skip}, fetch {n}"),
                None => format!("Limit: skip {skip}"),
            },
            OperatorSpec::Watermark { display, .. } => format!("Watermark: {display}"),
            OperatorSpec::ProcessingTimeWatermark { .. } => "Watermark: processing time (the wall clock)".to_string(),
            OperatorSpec::WindowAssign { kind, .. } => format!("Window: {}", kind.describe()),
            OperatorSpec::WindowAggregate { display, .. } => format!("WindowAggregate: {display}"),
            OperatorSpec::SessionAggregate { display, .. } => format!("SessionAggregate: {display}"),
            OperatorSpec::WindowJoin { display, .. } => format!("WindowJoin: {display}"),
            OperatorSpec::Join { display, .. } => format!("Join: {display}"),
            OperatorSpec::TopN { display, .. } => format!("TopN: {display}"),
            OperatorSpec::WindowTopN { display, .. } => format!("WindowTopN: {display}"),
            OperatorSpec::FirstRow { display, .. } => format!("FirstRow: {display}"),
            OperatorSpec::TimeSort { display, .. } => format!("TimeSort: {display}"),
            OperatorSpec::OverAggregate { display, .. } => format!("OverAggregate: {display}"),
            OperatorSpec::MatchRecognize { display, .. } => format!("MatchRecognize: {display}"),
            OperatorSpec::UpsertMaterialize { spec } => {
                let names: Vec<_> = spec.key.iter().map(|k| spec.schema.field(*k).name().as_str()).collect();
                format!(
                    "UpsertMaterialize: by the sink's key ({}), which is not the query's: each key's rows kept, the \
                     latest its value",
                    names.join(", ")
                )
            }
            OperatorSpec::LookupJoin { display, .. } => format!("LookupJoin: {display}"),
            OperatorSpec::TableLookup { display, .. } => format!("TableLookup: {display}"),
            OperatorSpec::VersionedJoin { display, .. } => format!("VersionedJoin: {display}"),
            OperatorSpec::GroupAggregate { display, .. } => format!("GroupAggregate: {display}"),
            OperatorSpec::UpsertNormalize { spec } => {
                let names: Vec<_> = spec.key.iter().map(|k| spec.schema.field(*k).name().as_str()).collect();
                format!("UpsertNormalize: by key ({})", names.join(", "))
            }
        }
    }
}

#[derive(Debug, Clone)]
pub enum Node {
    /// Read a table through its connector, only the `projection` columns.
    Source {
        table: Arc<TableDef>,
        projection: Option<Vec<usize>>,
        schema: SchemaRef,
        /// What the source reads: appended rows, or a changelog (Debezium events).
        changelog: Changelog,
    },
    /// Literal rows (`VALUES`, or `SELECT` without `FROM`).
    Values {
        batches: Vec<RecordBatch>,
        schema: SchemaRef,
    },
    Operator {
        spec: OperatorSpec,
        input: Box<Node>,
    },
    /// `UNION ALL` of inputs with the same schema.
    Union {
        inputs: Vec<Node>,
        schema: SchemaRef,
    },
    /// Rows of every task of `input` spread over the next stage's tasks.
    Exchange {
        partitioning: Partitioning,
        input: Box<Node>,
    },
    /// Two inputs, each exchanged by its join keys, into a two-input operator (`spec`, a
    /// [`OperatorSpec::WindowJoin`]).
    Join {
        left: Box<Node>,
        right: Box<Node>,
        spec: OperatorSpec,
    },
}

impl Node {
    /// Call `each` with the table of every source of the plan.
    pub fn visit_sources(&self, each: &mut dyn FnMut(&Arc<TableDef>)) {
        match self {
            Node::Source { table, .. } => each(table),
            Node::Values { .. } => {}
            Node::Operator { input, .. } | Node::Exchange { input, .. } => input.visit_sources(each),
            Node::Union { inputs, .. } => inputs.iter().for_each(|i| i.visit_sources(each)),
            Node::Join { left, right, .. } => {
                left.visit_sources(each);
                right.visit_sources(each);
            }
        }
    }

    /// The tables the plan reads, once each, in the order met.
    pub fn source_tables(&self) -> Vec<Arc<TableDef>> {
        let mut tables: Vec<Arc<TableDef>> = Vec::new();
        self.visit_sources(&mut |t| {
            if !tables.iter().any(|s| s.name == t.name) {
                tables.push(t.clone());
            }
        });
        tables
    }

    pub fn schema(&self) -> SchemaRef {
        match self {
            Node::Source { schema, .. } | Node::Values { schema, .. } | Node::Union { schema, .. } => schema.clone(),
            Node::Exchange { input, .. } => input.schema(),
            Node::Join {
                spec:
                    OperatorSpec::WindowJoin { spec, .. }
                    | OperatorSpec::Join { spec, .. }
                    | OperatorSpec::LookupJoin { spec, .. }
                    | OperatorSpec::VersionedJoin { spec, .. },
                ..
            } => spec.schema.clone(),
            Node::Join { left, .. } => left.schema(),
            Node::Operator { spec, input } => match spec {
                OperatorSpec::Project { schema, .. }
                | OperatorSpec::Select { schema, .. }
                | OperatorSpec::AppendWatermark { schema }
                | OperatorSpec::Unnest { spec: UnnestSpec { schema, .. }, .. }
                | OperatorSpec::WindowAssign { schema, .. } => schema.clone(),
                OperatorSpec::WindowAggregate { spec, .. } => spec.schema.clone(),
                OperatorSpec::SessionAggregate { spec, .. } => spec.spec.schema.clone(),
                OperatorSpec::WindowJoin { spec, .. }
                | OperatorSpec::Join { spec, .. }
                | OperatorSpec::TableLookup { spec, .. } => spec.schema.clone(),
                OperatorSpec::GroupAggregate { spec, .. } => spec.schema.clone(),
                OperatorSpec::TopN { spec, .. }
                | OperatorSpec::WindowTopN { spec, .. }
                | OperatorSpec::FirstRow { spec, .. } => spec.schema.clone(),
                OperatorSpec::OverAggregate { spec, .. } => spec.schema.clone(),
                OperatorSpec::MatchRecognize { spec, .. } => spec.schema.clone(),
                _ => input.schema(),
            },
        }
    }

    pub fn with_operator(self, spec: OperatorSpec) -> Node {
        Node::Operator { spec, input: Box::new(self) }
    }

    /// What changes the node's output carries.
    pub fn changelog(&self) -> Changelog {
        match self {
            Node::Source { changelog, .. } => changelog.clone(),
            Node::Join { left, right, spec: OperatorSpec::Join { spec, .. } } => {
                let appending = left.changelog().is_append_only() && right.changelog().is_append_only();
                let no_retraction = matches!(spec.kind, JoinKind::Inner | JoinKind::LeftSemi | JoinKind::RightSemi);
                if appending && (no_retraction || spec.interval.is_some()) {
                    Changelog::AppendOnly
                } else {
                    Changelog::Retract
                }
            }
            Node::Values { .. } | Node::Join { .. } => Changelog::AppendOnly,
            Node::Operator { spec, input } => spec.changelog(input.changelog()),
            Node::Exchange { input, .. } => input.changelog(),
            Node::Union { inputs, .. } => {
                inputs.iter().fold(Changelog::AppendOnly, |mode, input| mode.union(&input.changelog()))
            }
        }
    }

    /// Refuse an operator that needs an append-only input over an updating one, naming it.
    pub fn check_changelog(&self) -> Result<()> {
        let updating = |node: &Node, spec: &OperatorSpec| -> Result<()> {
            let mode = node.changelog();
            if spec.needs_append_only() && !mode.is_append_only() {
                let what = spec.describe();
                let hint = match spec {
                    OperatorSpec::Limit { .. } => "",
                    _ => " (its results are final once the watermark passes; an updating input would take rows back)",
                };
                return Err(WeirError::not_supported(format!(
                    "{what}: it needs an append-only input, but its input is updating ({}: updates come from a \
                     GROUP BY outside a window, DISTINCT, UNION, an outer or anti join, a Top-N or a changelog source){hint}",
                    mode.describe()
                )));
            }
            Ok(())
        };
        match self {
            Node::Source { .. } | Node::Values { .. } => Ok(()),
            Node::Operator { spec, input } => {
                input.check_changelog()?;
                updating(input, spec)
            }
            Node::Exchange { input, .. } => input.check_changelog(),
            Node::Union { inputs, .. } => inputs.iter().try_for_each(|i| i.check_changelog()),
            Node::Join { left, right, spec } => {
                left.check_changelog()?;
                right.check_changelog()?;
                if let OperatorSpec::LookupJoin { .. } | OperatorSpec::VersionedJoin { .. } = spec {
                    // The table may be a changelog; the rows that look it up may not.
                    if !left.changelog().is_append_only() {
                        return Err(WeirError::not_supported(format!(
                            "{}: the rows joined FOR SYSTEM_TIME AS OF must be append-only, but they are updating",
                            spec.describe()
                        )));
                    }
                    return Ok(());
                }
                updating(left, spec)?;
                updating(right, spec)
            }
        }
    }

    fn describe(&self, depth: usize, out: &mut String) {
        let pad = "  ".repeat(depth);
        match self {
            Node::Source { table, schema, .. } => {
                let cols: Vec<_> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                let connector = table.options.get("connector").unwrap_or("?");
                let format = table.options.get("format").map(|f| format!(" {f}")).unwrap_or_default();
                let _ =
                    writeln!(out, "{pad}Source: {} ({connector}{format}) columns [{}]", table.name, cols.join(", "));
            }
            Node::Values { batches, .. } => {
                let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
                let _ = writeln!(out, "{pad}Values: {rows} row(s)");
            }
            Node::Operator { spec, input } => {
                let mode = self.changelog();
                let tag = if mode.is_append_only() { String::new() } else { format!(" [{}]", mode.describe()) };
                let _ = writeln!(out, "{pad}{}{tag}", spec.describe());
                if let OperatorSpec::MatchRecognize { spec, .. } = spec {
                    let _ = writeln!(out, "{pad}  state: {}", spec.pattern.state());
                }
                input.describe(depth + 1, out);
            }
            Node::Exchange { partitioning, input } => {
                let _ = writeln!(out, "{pad}Exchange: {}", partitioning.describe(&input.schema()));
                input.describe(depth + 1, out);
            }
            Node::Join { left, right, spec } => {
                let mode = self.changelog();
                let tag = if mode.is_append_only() { String::new() } else { format!(" [{}]", mode.describe()) };
                let _ = writeln!(out, "{pad}{}{tag}", spec.describe());
                if let OperatorSpec::Join { spec, .. } = spec {
                    let _ = writeln!(out, "{pad}  state: {}", join_state(spec));
                }
                left.describe(depth + 1, out);
                right.describe(depth + 1, out);
            }
            Node::Union { inputs, .. } => {
                let _ = writeln!(out, "{pad}Union All ({} inputs, watermark = min of inputs)", inputs.len());
                for input in inputs {
                    input.describe(depth + 1, out);
                }
            }
        }
    }
}

/// What bounds a regular join's state, for `EXPLAIN`.
fn join_state(spec: &JoinSpec) -> String {
    if spec.interval.is_some() {
        return "both inputs' rows, each dropped once the watermark passes the last time it can be joined".into();
    }
    match spec.ttl {
        Some(ttl) => format!(
            "both inputs' rows, each forgotten {ttl} ms of event time after it was written ('table.exec.state.ttl')"
        ),
        None => "warning: both inputs' rows are kept forever, so the state grows without bound; set \
                 'table.exec.state.ttl' to bound it"
            .into(),
    }
}

/// Where a plan's rows go.
#[derive(Debug, Clone)]
pub enum SinkTarget {
    Table(Arc<TableDef>),
    /// Back to the caller of a bare `SELECT`.
    Caller,
}

#[derive(Debug, Clone)]
pub struct StreamPlan {
    pub root: Node,
    pub sink: SinkTarget,
}

impl StreamPlan {
    /// The operator graph as `EXPLAIN` shows it, sink first, then the stable identities of
    /// its state, for a job of this INSERT alone.
    pub fn explain(&self) -> String {
        let connector = self.sink_connector();
        let sink = self.sink_name();
        let branch = crate::identity::Branch { root: &self.root, sink: &sink, connector: &connector };
        self.explain_in(&crate::identity::Identities::of(&[branch]), 0)
    }

    /// The sink's table name (`caller` for a bare `SELECT`).
    pub fn sink_name(&self) -> String {
        match &self.sink {
            SinkTarget::Table(t) => t.name.clone(),
            SinkTarget::Caller => "caller".into(),
        }
    }

    /// The sink's connector, as the job's identities take it.
    pub fn sink_connector(&self) -> String {
        match &self.sink {
            SinkTarget::Table(t) => t.options.get("connector").unwrap_or("?").to_string(),
            SinkTarget::Caller => "caller".into(),
        }
    }

    /// As [`StreamPlan::explain`], as INSERT `k` of the job whose identities are `ids`.
    pub fn explain_in(&self, ids: &crate::identity::Identities, k: usize) -> String {
        let mut out = self.explain_graph();
        if matches!(self.sink, SinkTarget::Caller) {
            // A bare query's job keeps no checkpoints.
            return out;
        }
        out.push_str("State, by stable id (a checkpoint restores each part whose id is unchanged):\n");
        let mut parts = Vec::new();
        self.root.visit_state(ids, &mut parts);
        parts.extend(ids.sink(k).cloned());
        for part in parts {
            let _ = writeln!(out, "  {}  {}  {}", part.id, part.slot, part.name);
        }
        out
    }

    fn explain_graph(&self) -> String {
        let mut out = String::new();
        let mode = self.root.changelog();
        let updating = if mode.is_append_only() { String::new() } else { format!(" [{}]", mode.describe()) };
        match &self.sink {
            SinkTarget::Table(t) => {
                let connector = t.options.get("connector").unwrap_or("?");
                let _ = writeln!(out, "Sink: {} ({connector}){updating}", t.name);
            }
            SinkTarget::Caller => {
                let _ = writeln!(out, "Sink: results to the caller{updating}");
            }
        }
        self.root.describe(1, &mut out);
        out.push_str(
            "Tasks: each source and the operators above it up to a union run fused in one task; \
             unions and the sink run in their own tasks.\n",
        );
        out
    }

    /// What a checkpoint's state must fit: the stages in plan order, each node's kind, the
    /// columns and types it passes on, the sources and sinks, and the state each stateful
    /// operator keeps (group key types, each aggregate's state types, join inputs). Not the
    /// `EXPLAIN` text: how an expression is displayed does not change the state, and two
    /// plans that display alike can keep different state.
    pub fn state_shape(&self) -> String {
        let mut out = String::new();
        match &self.sink {
            SinkTarget::Table(t) => {
                let _ = writeln!(out, "sink {} {}", t.name, t.options.get("connector").unwrap_or("?"));
            }
            SinkTarget::Caller => out.push_str("sink caller\n"),
        }
        self.root.state_shape(&mut out);
        out
    }
}

//! Which values of a plan depend on when the job runs (`NOW()`, `CURRENT_TIMESTAMP`,
//! `RANDOM()`, `UUID()`, `PROCTIME()`, any volatile function), followed through the plan
//! column by column, and where such a value decides something a replay would decide
//! otherwise: which rows pass a filter, which rows join, which group or window a row falls
//! in, how rows rank. A value that is only carried to the sink is harmless for a sink that
//! writes by a key of other columns; one that decides is not.
//!
//! A pure function of the plan: no I/O, so that `EXPLAIN` and the checks at `INSERT` agree.

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::logical_expr::Volatility;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};

use weir_runtime::{Node, OperatorSpec};

/// Functions whose value depends on when they run, whatever their declared volatility
/// (DataFusion calls `now()` stable: the same within one query, which a stream never ends).
const TIME_FUNCTIONS: &[&str] =
    &["now", "current_timestamp", "current_date", "current_time", "localtimestamp", "localtime", "proctime"];

/// What the analysis found.
#[derive(Debug, Clone, Default)]
pub struct Nondeterminism {
    /// Per output column: its values depend on when the job ran.
    pub columns: Vec<bool>,
    /// Where such a value decides rows, groups or order: one description each.
    pub decisions: Vec<String>,
    /// The functions found, by name.
    pub functions: BTreeSet<String>,
    /// Functions with side effects found (of those named to [`analyze_with`]).
    pub side_effects: BTreeSet<String>,
}

impl Nondeterminism {
    fn of_width(n: usize) -> Self {
        Self { columns: vec![false; n], ..Default::default() }
    }

    fn any(&self) -> bool {
        self.columns.iter().any(|c| *c)
    }

    fn decide(&mut self, what: String) {
        if !self.decisions.contains(&what) {
            self.decisions.push(what);
        }
    }

    fn column(&self, i: usize) -> bool {
        self.columns.get(i).copied().unwrap_or(false)
    }
}

/// Functions of `names` that the expressions of `node` call.
/// The functions among `names` (lowercase) that the plan calls, as `NAME()`.
pub fn called(node: &Node, names: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    calls(node, names, &mut out);
    out.into_iter().map(|n| n.to_uppercase()).collect()
}

fn calls(node: &Node, names: &BTreeSet<String>, out: &mut BTreeSet<String>) {
    fn visit(e: &Arc<dyn PhysicalExpr>, names: &BTreeSet<String>, out: &mut BTreeSet<String>) {
        if let Some(f) = e.downcast_ref::<ScalarFunctionExpr>() {
            let name = f.name().to_ascii_lowercase();
            if names.contains(&name) {
                out.insert(format!("{name}()"));
            }
        }
        for c in e.children() {
            visit(c, names, out);
        }
    }
    match node {
        Node::Operator { spec, input } => {
            match spec {
                OperatorSpec::Project { exprs, .. } => exprs.iter().for_each(|e| visit(e, names, out)),
                OperatorSpec::Filter { predicate, .. } | OperatorSpec::Watermark { expr: predicate, .. } => {
                    visit(predicate, names, out)
                }
                _ => {}
            }
            calls(input, names, out);
        }
        Node::Exchange { input, .. } => calls(input, names, out),
        Node::Union { inputs, .. } => inputs.iter().for_each(|i| calls(i, names, out)),
        Node::Join { left, right, .. } => {
            calls(left, names, out);
            calls(right, names, out);
        }
        Node::Source { .. } | Node::Values { .. } => {}
    }
}

/// [`analyze`], also finding calls of the functions named in `side_effects`.
pub fn analyze_with(node: &Node, side_effects: &BTreeSet<String>) -> Nondeterminism {
    let mut out = analyze(node);
    calls(node, side_effects, &mut out.side_effects);
    out
}

/// Whether `expr` gives values that depend on when it runs, given which input columns do.
fn expr_varies(expr: &Arc<dyn PhysicalExpr>, input: &Nondeterminism, found: &mut BTreeSet<String>) -> bool {
    let mut varies = false;
    if let Some(f) = expr.downcast_ref::<ScalarFunctionExpr>() {
        let name = f.name().to_ascii_lowercase();
        if TIME_FUNCTIONS.contains(&name.as_str()) || f.fun().signature().volatility == Volatility::Volatile {
            found.insert(format!("{}()", name.to_uppercase()));
            varies = true;
        }
    }
    if let Some(c) = expr.downcast_ref::<Column>() {
        varies |= input.column(c.index());
    }
    for child in expr.children() {
        varies |= expr_varies(child, input, found);
    }
    varies
}

/// The analysis of `node`'s output.
pub fn analyze(node: &Node) -> Nondeterminism {
    let width = node.schema().fields().len();
    match node {
        Node::Source { .. } | Node::Values { .. } => Nondeterminism::of_width(width),
        Node::Exchange { input, .. } => analyze(input),
        Node::Union { inputs, .. } => {
            let mut out = Nondeterminism::of_width(width);
            for i in inputs {
                let a = analyze(i);
                for (o, c) in out.columns.iter_mut().zip(&a.columns) {
                    *o |= *c;
                }
                out.decisions
                    .extend(a.decisions.into_iter().filter(|d| !out.decisions.contains(d)).collect::<Vec<_>>());
                out.functions.extend(a.functions);
            }
            out
        }
        Node::Join { left, right, spec } => {
            let (l, r) = (analyze(left), analyze(right));
            two_inputs(spec, l, r, width)
        }
        Node::Operator { spec, input } => {
            let a = analyze(input);
            match spec {
                OperatorSpec::Join { .. }
                | OperatorSpec::WindowJoin { .. }
                | OperatorSpec::LookupJoin { .. }
                | OperatorSpec::VersionedJoin { .. } => a,
                OperatorSpec::TableLookup { spec: join, display, .. } => {
                    let mut out = two_inputs(spec, a, Nondeterminism::of_width(join.schemas[1].fields().len()), width);
                    out.decide(format!("a lookup join as of processing time against a database table ({display})"));
                    out
                }
                _ => one_input(spec, a, width),
            }
        }
    }
}

fn two_inputs(spec: &OperatorSpec, l: Nondeterminism, r: Nondeterminism, width: usize) -> Nondeterminism {
    let mut out = Nondeterminism::of_width(width);
    out.functions.extend(l.functions.iter().cloned());
    out.functions.extend(r.functions.iter().cloned());
    out.decisions.extend(l.decisions.iter().cloned());
    out.decisions.extend(r.decisions.iter().filter(|&d| !l.decisions.contains(d)).cloned());
    let joined: Vec<bool> = l.columns.iter().chain(&r.columns).copied().collect();
    // A right semi or anti join emits the right input's columns alone.
    let right_only = matches!(
        spec,
        OperatorSpec::Join { spec, .. } | OperatorSpec::WindowJoin { spec, .. } if spec.kind.one_side().is_some_and(|(s, _)| s == 1)
    );
    let emitted = if right_only { &r.columns } else { &joined };
    for (i, o) in out.columns.iter_mut().enumerate() {
        *o = emitted.get(i).copied().unwrap_or(l.any() || r.any());
    }
    let join = match spec {
        OperatorSpec::Join { spec, .. }
        | OperatorSpec::WindowJoin { spec, .. }
        | OperatorSpec::LookupJoin { spec, .. }
        | OperatorSpec::VersionedJoin { spec, .. }
        | OperatorSpec::TableLookup { spec, .. } => spec,
        _ => return out,
    };
    let keyed = join.keys[0].iter().any(|k| l.column(*k)) || join.keys[1].iter().any(|k| r.column(*k));
    if keyed {
        out.decide(format!("the join keys of {}", spec.describe()));
    }
    if let Some(filter) = &join.filter {
        let pairs = Nondeterminism { columns: joined, ..Default::default() };
        if expr_varies(filter, &pairs, &mut out.functions) {
            out.decide(format!("the join condition of {}", spec.describe()));
        }
    }
    out
}

fn one_input(spec: &OperatorSpec, a: Nondeterminism, width: usize) -> Nondeterminism {
    let mut out = Nondeterminism {
        columns: vec![false; width],
        decisions: a.decisions.clone(),
        functions: a.functions.clone(),
        side_effects: BTreeSet::new(),
    };
    match spec {
        OperatorSpec::Project { exprs, .. } => {
            for (o, e) in out.columns.iter_mut().zip(exprs) {
                *o = expr_varies(e, &a, &mut out.functions);
            }
        }
        OperatorSpec::Filter { predicate, display } => {
            out.columns = a.columns.clone();
            if expr_varies(predicate, &a, &mut out.functions) {
                out.decide(format!("the filter {display}"));
            }
        }
        OperatorSpec::Watermark { expr, display } => {
            out.columns = a.columns.clone();
            if expr_varies(expr, &a, &mut out.functions) {
                out.decide(format!("the watermark {display}"));
            }
        }
        OperatorSpec::Select { indices, .. } => {
            out.columns = indices.iter().map(|i| a.column(*i)).collect();
        }
        OperatorSpec::AppendWatermark { .. } => {
            // Which watermark a row meets depends on how rows were batched, which a replay
            // need not repeat.
            out.columns = a.columns.iter().copied().chain([true]).collect();
            out.functions.insert("CURRENT_WATERMARK()".to_string());
        }
        OperatorSpec::Unnest { spec, .. } => {
            out.columns = spec.outputs.iter().map(|i| a.column(*i)).collect();
        }
        OperatorSpec::ProcessingTimeWatermark { .. } => {
            // The windows it closes are the decision (`WindowAssign`, over the same column).
            out.columns = a.columns.clone();
            out.functions.insert("PROCTIME()".to_string());
        }
        OperatorSpec::WindowAssign { kind, time_column, .. } => {
            let t = a.column(*time_column);
            out.columns = a
                .columns
                .iter()
                .copied()
                .chain(std::iter::repeat_n(t, width.saturating_sub(a.columns.len())))
                .collect();
            if t {
                out.decide(format!("the windows of {} (over a time that is not in the data)", kind.describe()));
            }
        }
        OperatorSpec::WindowAggregate { spec: w, display }
        | OperatorSpec::SessionAggregate { spec: weir_runtime::operators::SessionSpec { spec: w, .. }, display } => {
            let keys: Vec<bool> = w.group_exprs.iter().map(|e| expr_varies(e, &a, &mut out.functions)).collect();
            if keys.iter().any(|k| *k) {
                out.decide(format!("the groups of {display}"));
            }
            let mut cols = keys;
            for agg in &w.aggregates {
                cols.push(agg.expressions().iter().any(|e| expr_varies(e, &a, &mut out.functions)));
            }
            if w.filters.iter().flatten().any(|f| expr_varies(f, &a, &mut out.functions)) {
                out.decide(format!("an aggregate's FILTER in {display}"));
            }
            out.columns = cols.into_iter().chain(std::iter::repeat(false)).take(width).collect();
            if matches!(spec, OperatorSpec::SessionAggregate { .. })
                && a.any()
                && !out.decisions.iter().any(|d| d.contains(display))
            {
                // A session's bounds come from its rows' times, which the spec does not name.
                out.decide(format!("the sessions of {display}"));
            }
        }
        OperatorSpec::GroupAggregate { spec: g, display } => {
            if (0..g.keys).any(|k| a.column(k)) {
                out.decide(format!("the groups of {display}"));
            }
            for (i, o) in out.columns.iter_mut().enumerate() {
                *o = if i < g.keys {
                    a.column(i)
                } else {
                    g.aggregates.get(i - g.keys).is_some_and(|d| d.arg.is_some_and(|c| a.column(c)))
                };
            }
            if g.aggregates.iter().any(|d| d.filter.is_some_and(|f| a.column(f))) {
                out.decide(format!("an aggregate's FILTER in {display}"));
            }
        }
        OperatorSpec::TopN { spec: t, display }
        | OperatorSpec::WindowTopN { spec: t, display, .. }
        | OperatorSpec::FirstRow { spec: t, display, .. } => {
            if t.partition.iter().chain(t.order.iter().map(|(c, _)| c)).any(|c| a.column(*c)) {
                out.decide(format!("the ranking of {display}"));
            }
            for (i, o) in out.columns.iter_mut().enumerate() {
                *o = a.columns.get(i).copied().unwrap_or_else(|| t.order.iter().any(|(c, _)| a.column(*c)));
            }
        }
        OperatorSpec::MatchRecognize { spec: m, display } => {
            // Which rows match depends on every column the pattern reads and on the order.
            if m.partition.iter().chain([&m.time]).chain(&m.columns).any(|c| a.column(*c)) {
                out.decide(format!("the matches of {display}"));
            }
            let any = m.columns.iter().any(|c| a.column(*c));
            let measures = m.measures.iter().map(|e| any || e.reads_clock());
            out.columns = m.partition.iter().map(|c| a.column(*c)).chain(measures).collect();
        }
        OperatorSpec::OverAggregate { spec: o, display } => {
            if o.partition.iter().chain([&o.time]).any(|c| a.column(*c)) {
                out.decide(format!("the partitions and order of {display}"));
            }
            let reads = |f: &weir_runtime::operators::OverFunction| match f {
                weir_runtime::operators::OverFunction::Aggregate(d) => d.arg.is_some_and(|c| a.column(c)),
                weir_runtime::operators::OverFunction::Lag { arg, .. } => a.column(*arg),
            };
            out.columns = a.columns.iter().copied().chain(o.functions.iter().map(reads)).take(width).collect();
        }
        _ => {
            out.columns = a.columns.iter().copied().chain(std::iter::repeat(false)).take(width).collect();
        }
    }
    out
}

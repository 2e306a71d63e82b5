//! `MATCH_RECOGNIZE`, Flink's subset of SQL:2016 row pattern recognition.
//!
//! sqlparser parses the clause (after [`syntax`] takes out what it lacks); DataFusion hands
//! it to [`MatchRecognizePlanner`], a relation planner, which plans the input, checks the
//! clause against what Flink accepts (refusing the rest with Flink's reason), compiles
//! `DEFINE` and `MEASURES` ([`compile`]) and returns a [`MatchNode`]. Weir's planner turns
//! that into an exchange by the partition columns and the operator
//! (`weir_runtime::operators::MatchRecognize`), after checking that the order is an event
//! time.

mod compile;
pub mod syntax;

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::Field;
use datafusion::common::{DFSchema, DFSchemaRef};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::planner::{PlannedRelation, RelationPlanner, RelationPlannerContext, RelationPlanning};
use datafusion::logical_expr::{Expr, Extension, LogicalPlan, UserDefinedLogicalNodeCore};
use datafusion::sql::sqlparser::ast::{
    AfterMatchSkip, Expr as SqlExpr, MatchRecognizePattern, MatchRecognizeSymbol, RepetitionQuantifier, RowsPerMatch,
    TableFactor, Value,
};
use weir_runtime::operators::{MatchExpr, Pattern, Skip, Step};

use self::compile::Compiler;
use self::syntax::{Extras, EXTRAS};

fn refuse(what: impl Into<String>) -> DataFusionError {
    DataFusionError::NotImplemented(what.into())
}

fn plan_err(what: impl Into<String>) -> DataFusionError {
    DataFusionError::Plan(what.into())
}

/// A planned `MATCH_RECOGNIZE` over `input`.
#[derive(Debug, Clone)]
pub struct MatchNode {
    pub input: LogicalPlan,
    pub schema: DFSchemaRef,
    /// Input columns.
    pub partition: Vec<usize>,
    /// The input column of `ORDER BY`.
    pub time: usize,
    /// Input columns the expressions read (slots).
    pub columns: Vec<usize>,
    pub pattern: Pattern,
    pub measures: Vec<MatchExpr>,
    /// The clause for `EXPLAIN`.
    pub display: String,
}

impl PartialEq for MatchNode {
    fn eq(&self, other: &Self) -> bool {
        self.display == other.display && self.input == other.input
    }
}

impl Eq for MatchNode {}

impl std::hash::Hash for MatchNode {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.display.hash(state);
        self.input.hash(state);
    }
}

impl PartialOrd for MatchNode {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        self.display.partial_cmp(&other.display)
    }
}

impl UserDefinedLogicalNodeCore for MatchNode {
    fn name(&self) -> &str {
        "MatchRecognize"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "MatchRecognize: {}", self.display)
    }

    fn with_exprs_and_inputs(&self, _exprs: Vec<Expr>, mut inputs: Vec<LogicalPlan>) -> DfResult<Self> {
        let input = inputs.pop().ok_or_else(|| DataFusionError::Internal("MatchRecognize has one input".into()))?;
        Ok(Self { input, ..self.clone() })
    }
}

/// Plans `MATCH_RECOGNIZE` table factors (DataFusion plans every other one).
#[derive(Debug)]
pub struct MatchRecognizePlanner;

impl RelationPlanner for MatchRecognizePlanner {
    fn plan_relation(
        &self,
        relation: TableFactor,
        context: &mut dyn RelationPlannerContext,
    ) -> DfResult<RelationPlanning> {
        let TableFactor::MatchRecognize {
            table,
            partition_by,
            order_by,
            mut measures,
            rows_per_match,
            after_match_skip,
            pattern,
            symbols,
            alias,
        } = relation
        else {
            return Ok(RelationPlanning::Original(Box::new(relation)));
        };
        let extras = match measures.first() {
            Some(m) if m.alias.value == EXTRAS => match &m.expr {
                SqlExpr::Value(v) => match &v.value {
                    Value::SingleQuotedString(s) => Extras::decode(s),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        }
        .ok_or_else(|| DataFusionError::Internal("MATCH_RECOGNIZE was not rewritten".into()))?;
        measures.remove(0);
        if matches!(rows_per_match, Some(RowsPerMatch::AllRows(_))) {
            return Err(refuse("ALL ROWS PER MATCH (as Flink: only ONE ROW PER MATCH)"));
        }
        let input = context.plan(*table)?;
        let schema = input.schema().clone();
        let column = |e: &SqlExpr, what: &str| -> DfResult<usize> {
            let name = match e {
                SqlExpr::Identifier(i) => i.value.clone(),
                SqlExpr::CompoundIdentifier(p) => p.last().map(|i| i.value.clone()).unwrap_or_default(),
                other => {
                    return Err(refuse(format!("{what} by an expression ({other}) in MATCH_RECOGNIZE: use a column")))
                }
            };
            schema
                .fields()
                .iter()
                .position(|f| f.name().eq_ignore_ascii_case(&name))
                .ok_or_else(|| plan_err(format!("MATCH_RECOGNIZE: no column named '{name}' in its input")))
        };
        let partition = partition_by.iter().map(|e| column(e, "PARTITION BY")).collect::<DfResult<Vec<_>>>()?;
        let time = match order_by.as_slice() {
            [first] if first.options.asc != Some(false) => column(&first.expr, "ORDER BY")?,
            [] => {
                return Err(plan_err(
                    "MATCH_RECOGNIZE needs ORDER BY a time attribute (its event-time column), ascending",
                ))
            }
            [_] => return Err(refuse("MATCH_RECOGNIZE ordered by a time attribute descending (as Flink)")),
            _ => return Err(refuse("MATCH_RECOGNIZE ordered by more than its time attribute")),
        };

        let mut vars: Vec<String> = Vec::new();
        let mut steps = Vec::new();
        let mut quantifiers = extras.reluctant.iter().copied();
        pattern_steps(&pattern, &mut quantifiers, &mut vars, &mut steps)?;
        // After a greedy range (`A{1,3}`), Flink's NFA compiler guards the next variable's
        // first row against the range's variable.
        for i in 1..steps.len() {
            let p = &steps[i - 1];
            steps[i].guarded = p.greedy && p.max.is_some_and(|m| m != p.min);
        }
        let last = steps.last().ok_or_else(|| plan_err("MATCH_RECOGNIZE: an empty PATTERN"))?;
        if last.greedy && last.max != Some(last.min) {
            return Err(refuse(
                "PATTERN with a greedy quantifier on its last variable in MATCH_RECOGNIZE (as Flink: finish the \
                 pattern with a simple variable or a reluctant quantifier, like B*?)",
            ));
        }
        if steps.iter().all(|s| s.min == 0) {
            return Err(refuse("PATTERN whose variables are all optional in MATCH_RECOGNIZE (it would match no rows)"));
        }
        let var_of = |name: &str| vars.iter().position(|v| v.eq_ignore_ascii_case(name)).map(|i| i as u16);
        let skip = match &after_match_skip {
            // Flink's default (Calcite's) is SKIP TO NEXT ROW.
            Some(AfterMatchSkip::PastLastRow) => Skip::PastLastRow,
            None | Some(AfterMatchSkip::ToNextRow) => Skip::ToNextRow,
            Some(AfterMatchSkip::ToFirst(v)) | Some(AfterMatchSkip::ToLast(v)) => {
                let var = var_of(&v.value).ok_or_else(|| {
                    plan_err(format!("AFTER MATCH SKIP TO '{}': not a variable of the pattern", v.value))
                })?;
                if matches!(after_match_skip, Some(AfterMatchSkip::ToFirst(_))) {
                    Skip::ToFirst(var)
                } else {
                    Skip::ToLast(var)
                }
            }
        };

        let provider = context.context_provider();
        let functions = |name: &str| provider.get_function_meta(name);
        let mut compiler = Compiler { schema: &schema, vars: &vars, columns: partition.clone(), functions: &functions };
        let mut conditions: Vec<Option<MatchExpr>> = vec![None; vars.len()];
        for s in &symbols {
            let var = var_of(&s.symbol.value).ok_or_else(|| {
                plan_err(format!("DEFINE '{}': not a variable of the MATCH_RECOGNIZE pattern", s.symbol.value))
            })?;
            conditions[var as usize] = Some(compiler.define(&s.definition)?);
        }
        let mut fields: Vec<Field> = partition.iter().map(|c| schema.field(*c).as_ref().clone()).collect();
        let mut compiled = Vec::with_capacity(measures.len());
        for m in &measures {
            let e = compiler.measure(&m.expr)?;
            fields.push(Field::new(m.alias.value.clone(), compiler.type_of(&e), true));
            compiled.push(e);
        }
        let columns = compiler.columns;
        let display = display(&partition_by, &order_by, &pattern, &extras, &after_match_skip, &measures);
        let pattern = Pattern { steps, conditions, names: vars, skip, within: extras.within };
        let out_schema = Arc::new(DFSchema::from_unqualified_fields(fields.into(), Default::default())?);
        let node =
            MatchNode { input, schema: out_schema, partition, time, columns, pattern, measures: compiled, display };
        let plan = LogicalPlan::Extension(Extension { node: Arc::new(node) });
        Ok(RelationPlanning::Planned(Box::new(PlannedRelation::new(plan, alias))))
    }
}

/// The pattern's variables as steps, checking it is of Flink's subset.
fn pattern_steps(
    p: &MatchRecognizePattern,
    reluctant: &mut impl Iterator<Item = bool>,
    vars: &mut Vec<String>,
    steps: &mut Vec<Step>,
) -> DfResult<()> {
    let mut var = |s: &MatchRecognizeSymbol| -> DfResult<u16> {
        match s {
            MatchRecognizeSymbol::Named(n) => {
                let name = n.value.to_ascii_uppercase();
                Ok(match vars.iter().position(|v| *v == name) {
                    Some(i) => i as u16,
                    None => {
                        vars.push(name);
                        (vars.len() - 1) as u16
                    }
                })
            }
            _ => Err(refuse(
                "PATTERN with anchors (^, $) in MATCH_RECOGNIZE (as Flink: a stream has no beginning or end to anchor to)",
            )),
        }
    };
    match p {
        MatchRecognizePattern::Symbol(s) => {
            let v = var(s)?;
            steps.push(Step { var: v, min: 1, max: Some(1), greedy: true, guarded: false });
        }
        MatchRecognizePattern::Concat(items) => {
            for item in items {
                pattern_steps(item, reluctant, vars, steps)?;
            }
        }
        MatchRecognizePattern::Group(inner) => pattern_steps(inner, reluctant, vars, steps)?,
        MatchRecognizePattern::Repetition(inner, q) => {
            let lazy = reluctant.next().unwrap_or(false);
            let MatchRecognizePattern::Symbol(s) = inner.as_ref() else {
                return Err(refuse(
                    "PATTERN with a quantifier on a group in MATCH_RECOGNIZE (as Flink: quantifiers apply to one \
                     variable, not to (A B)+)",
                ));
            };
            let v = var(s)?;
            let (min, max) = match *q {
                RepetitionQuantifier::ZeroOrMore => (0, None),
                RepetitionQuantifier::OneOrMore => (1, None),
                RepetitionQuantifier::AtMostOne => (0, Some(1)),
                RepetitionQuantifier::Exactly(n) => (n, Some(n)),
                RepetitionQuantifier::AtLeast(n) => (n, None),
                RepetitionQuantifier::AtMost(n) => (0, Some(n)),
                RepetitionQuantifier::Range(n, m) => (n, Some(m)),
            };
            if max.is_some_and(|m| m < min || m == 0) {
                return Err(plan_err(format!("MATCH_RECOGNIZE: the quantifier {q} matches nothing")));
            }
            if lazy && min == 0 && max == Some(1) {
                return Err(refuse(
                    "PATTERN with the reluctant optional quantifier (??) in MATCH_RECOGNIZE (as Flink: only the greedy \
                     optional quantifier ?)",
                ));
            }
            // Flink leaves `?` without its greedy property (both ways stay open).
            let greedy = !lazy && max != Some(1);
            steps.push(Step { var: v, min, max, greedy, guarded: false });
        }
        MatchRecognizePattern::Alternation(_) => {
            return Err(refuse("PATTERN with alternation (|) in MATCH_RECOGNIZE (as Flink)"))
        }
        MatchRecognizePattern::Permute(_) => return Err(refuse("PERMUTE in a MATCH_RECOGNIZE pattern (as Flink)")),
        MatchRecognizePattern::Exclude(_) => {
            return Err(refuse(
                "PATTERN with exclusion ({- … -}) in MATCH_RECOGNIZE (as Flink: it needs ALL ROWS PER MATCH)",
            ))
        }
    }
    Ok(())
}

fn display(
    partition_by: &[SqlExpr],
    order_by: &[datafusion::sql::sqlparser::ast::OrderByExpr],
    pattern: &MatchRecognizePattern,
    extras: &Extras,
    skip: &Option<AfterMatchSkip>,
    measures: &[datafusion::sql::sqlparser::ast::Measure],
) -> String {
    let list = |items: Vec<String>| items.join(", ");
    let mut text = String::new();
    if !partition_by.is_empty() {
        text.push_str(&format!("PARTITION BY {} ", list(partition_by.iter().map(|e| e.to_string()).collect())));
    }
    text.push_str(&format!("ORDER BY {} ", list(order_by.iter().map(|e| e.to_string()).collect())));
    text.push_str(&format!("PATTERN ({pattern})"));
    if extras.reluctant.iter().any(|r| *r) {
        text.push_str(" (reluctant: ");
        text.push_str(&extras.reluctant.iter().map(|r| if *r { "?" } else { "-" }).collect::<String>());
        text.push(')');
    }
    if let Some(w) = extras.within {
        text.push_str(&format!(" WITHIN {w} ms"));
    }
    text.push_str(&format!(
        " AFTER MATCH SKIP {}",
        skip.as_ref().map_or("TO NEXT ROW".to_string(), |s| s.to_string().trim().to_string())
    ));
    text.push_str(&format!(" MEASURES {}", list(measures.iter().map(|m| m.to_string()).collect())));
    text
}

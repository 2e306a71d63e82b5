//! `DEFINE` conditions and `MEASURES` as the operator's expressions: column references
//! resolved to the input's columns, pattern variables to their numbers, Flink's
//! navigation (`A.price`, `LAST(A.price, 1)`, `FIRST(…)`) and aggregates over a variable's
//! rows made explicit, and each measure's type inferred.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, FieldRef, TimeUnit};
use datafusion::common::config::ConfigOptions;
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::type_coercion::functions::fields_with_udf;
use datafusion::logical_expr::{ReturnFieldArgs, ScalarUDF};
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, DuplicateTreatment, Expr as SqlExpr, FunctionArg, FunctionArgExpr, FunctionArguments,
    UnaryOperator, Value,
};
use weir_runtime::operators::{BinOp, Call, MatchAgg, MatchExpr, Nav};

fn refuse(what: impl Into<String>) -> DataFusionError {
    DataFusionError::NotImplemented(what.into())
}

fn plan_err(what: impl Into<String>) -> DataFusionError {
    DataFusionError::Plan(what.into())
}

/// What an expression is compiled against.
pub struct Compiler<'a> {
    pub schema: &'a DFSchema,
    /// Pattern variables, by number.
    pub vars: &'a [String],
    /// Input columns read, by slot (grows as columns are met).
    pub columns: Vec<usize>,
    /// The session's scalar functions, by name.
    pub functions: &'a dyn Fn(&str) -> Option<Arc<ScalarUDF>>,
}

/// Where an expression sits.
#[derive(Clone, Copy)]
struct At {
    /// Inside `FIRST`/`LAST`: the row they name. Inside an aggregate: [`Nav::Row`].
    nav: Option<Nav>,
    /// In `DEFINE` (else in `MEASURES`).
    define: bool,
}

impl Compiler<'_> {
    pub fn define(&mut self, e: &SqlExpr) -> DfResult<MatchExpr> {
        self.compile(e, At { nav: None, define: true })
    }

    pub fn measure(&mut self, e: &SqlExpr) -> DfResult<MatchExpr> {
        self.compile(e, At { nav: None, define: false })
    }

    fn var(&self, name: &str) -> Option<u16> {
        self.vars.iter().position(|v| v.eq_ignore_ascii_case(name)).map(|i| i as u16)
    }

    fn slot(&mut self, name: &str) -> DfResult<usize> {
        let column = self
            .schema
            .fields()
            .iter()
            .position(|f| f.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| plan_err(format!("MATCH_RECOGNIZE: no column named '{name}' in its input")))?;
        Ok(self.columns.iter().position(|c| *c == column).unwrap_or_else(|| {
            self.columns.push(column);
            self.columns.len() - 1
        }))
    }

    /// A column reference `[var.]column`.
    fn column(&mut self, var: Option<&str>, name: &str, at: At) -> DfResult<MatchExpr> {
        let var = match var {
            None => None,
            Some(v) => Some(self.var(v).ok_or_else(|| {
                plan_err(format!("MATCH_RECOGNIZE: '{v}' is not a variable of the pattern (in '{v}.{name}')"))
            })?),
        };
        let nav = match at.nav {
            Some(nav) => nav,
            None => Nav::Last { var, offset: 0 },
        };
        Ok(MatchExpr::Column { nav, slot: self.slot(name)? })
    }

    fn compile(&mut self, e: &SqlExpr, at: At) -> DfResult<MatchExpr> {
        let boxed = |c: &mut Self, e: &SqlExpr| -> DfResult<Box<MatchExpr>> { Ok(Box::new(c.compile(e, at)?)) };
        Ok(match e {
            SqlExpr::Identifier(i) => self.column(None, &i.value, at)?,
            SqlExpr::CompoundIdentifier(parts) if parts.len() == 2 => {
                self.column(Some(&parts[0].value), &parts[1].value, at)?
            }
            SqlExpr::Nested(inner) => self.compile(inner, at)?,
            SqlExpr::Value(v) => MatchExpr::Literal(literal(&v.value)?),
            SqlExpr::BinaryOp { left, op, right } => {
                let op = binary(op)?;
                MatchExpr::Binary { op, left: boxed(self, left)?, right: boxed(self, right)? }
            }
            SqlExpr::UnaryOp { op: UnaryOperator::Not, expr } => MatchExpr::Not(boxed(self, expr)?),
            SqlExpr::UnaryOp { op: UnaryOperator::Minus, expr } => MatchExpr::Negate(boxed(self, expr)?),
            SqlExpr::UnaryOp { op: UnaryOperator::Plus, expr } => self.compile(expr, at)?,
            SqlExpr::IsNull(expr) => MatchExpr::IsNull { expr: boxed(self, expr)?, negated: false },
            SqlExpr::IsNotNull(expr) => MatchExpr::IsNull { expr: boxed(self, expr)?, negated: true },
            SqlExpr::Between { expr, negated, low, high } => {
                let (x, lo, hi) = (self.compile(expr, at)?, self.compile(low, at)?, self.compile(high, at)?);
                let both = MatchExpr::Binary {
                    op: BinOp::And,
                    left: Box::new(MatchExpr::Binary {
                        op: BinOp::GtEq,
                        left: Box::new(x.clone()),
                        right: Box::new(lo),
                    }),
                    right: Box::new(MatchExpr::Binary { op: BinOp::LtEq, left: Box::new(x), right: Box::new(hi) }),
                };
                if *negated {
                    MatchExpr::Not(Box::new(both))
                } else {
                    both
                }
            }
            SqlExpr::Case { operand, conditions, else_result, .. } => {
                let operand = operand.as_ref().map(|o| self.compile(o, at)).transpose()?;
                let mut branches = Vec::with_capacity(conditions.len());
                for c in conditions {
                    let when = self.compile(&c.condition, at)?;
                    let when = match &operand {
                        Some(o) => {
                            MatchExpr::Binary { op: BinOp::Eq, left: Box::new(o.clone()), right: Box::new(when) }
                        }
                        None => when,
                    };
                    branches.push((when, self.compile(&c.result, at)?));
                }
                let otherwise = else_result.as_ref().map(|e| boxed(self, e)).transpose()?;
                MatchExpr::Case { branches, otherwise }
            }
            SqlExpr::Function(f) => self.function(f, at)?,
            SqlExpr::Cast { expr, data_type, .. } => {
                let to = crate::types::arrow_type(data_type).map_err(|e| plan_err(e.to_string()))?;
                MatchExpr::Cast { expr: boxed(self, expr)?, to }
            }
            other => {
                return Err(refuse(format!(
                "{other} in MATCH_RECOGNIZE (Weir evaluates columns, literals, arithmetic, comparisons, AND/OR/NOT, \
                     IS NULL, BETWEEN, CASE, FIRST/LAST and aggregates there)"
            )))
            }
        })
    }

    fn function(&mut self, f: &datafusion::sql::sqlparser::ast::Function, at: At) -> DfResult<MatchExpr> {
        let name = f.name.to_string().to_ascii_uppercase();
        let (args, distinct) = match &f.args {
            FunctionArguments::List(l) => {
                (l.args.iter().collect::<Vec<_>>(), matches!(l.duplicate_treatment, Some(DuplicateTreatment::Distinct)))
            }
            FunctionArguments::None => (Vec::new(), false),
            FunctionArguments::Subquery(_) => return Err(refuse(format!("{name} of a subquery in MATCH_RECOGNIZE"))),
        };
        if f.over.is_some() || f.filter.is_some() {
            return Err(refuse(format!("{name} with OVER or FILTER in MATCH_RECOGNIZE")));
        }
        let expr_arg = |i: usize| -> DfResult<&SqlExpr> {
            match args.get(i) {
                Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(e))) => Ok(e),
                _ => Err(plan_err(format!("{name}: argument {} must be an expression", i + 1))),
            }
        };
        match name.as_str() {
            "FIRST" | "LAST" => {
                if at.nav.is_some() {
                    return Err(refuse(format!("{name} inside FIRST, LAST or an aggregate in MATCH_RECOGNIZE")));
                }
                let inner = expr_arg(0)?;
                let offset = match args.len() {
                    1 => 0,
                    2 => match expr_arg(1)? {
                        SqlExpr::Value(v) => match &v.value {
                            Value::Number(n, _) => n.parse::<usize>().ok(),
                            _ => None,
                        },
                        _ => None,
                    }
                    .ok_or_else(|| plan_err(format!("{name}: its offset must be a non-negative whole number")))?,
                    _ => return Err(plan_err(format!("{name} takes a column reference and an optional offset"))),
                };
                let var = single_var(inner, self.vars, &name)?;
                let nav = if name == "FIRST" { Nav::First { var, offset } } else { Nav::Last { var, offset } };
                self.compile(inner, At { nav: Some(nav), ..at })
            }
            "PREV" | "NEXT" => Err(refuse(format!(
                "{name} in MATCH_RECOGNIZE (physical offsets, as Flink: navigate with LAST(v.x, n) or FIRST(v.x, n))"
            ))),
            "SUM" | "COUNT" | "AVG" | "MIN" | "MAX" => {
                if distinct {
                    return Err(refuse(format!("{name} with DISTINCT in MATCH_RECOGNIZE (as Flink)")));
                }
                if at.nav.is_some() {
                    return Err(refuse(format!("{name} inside FIRST, LAST or another aggregate in MATCH_RECOGNIZE")));
                }
                let agg = match name.as_str() {
                    "SUM" => MatchAgg::Sum,
                    "COUNT" => MatchAgg::Count,
                    "AVG" => MatchAgg::Avg,
                    "MIN" => MatchAgg::Min,
                    _ => MatchAgg::Max,
                };
                match args.first() {
                    Some(FunctionArg::Unnamed(FunctionArgExpr::Wildcard)) if agg == MatchAgg::Count => {
                        Ok(MatchExpr::Aggregate { agg, var: None, arg: None })
                    }
                    Some(FunctionArg::Unnamed(FunctionArgExpr::QualifiedWildcard(v))) if agg == MatchAgg::Count => {
                        let v = v.to_string();
                        let var = self.var(&v).ok_or_else(|| {
                            plan_err(format!(
                                "MATCH_RECOGNIZE: '{v}' is not a variable of the pattern (in COUNT({v}.*))"
                            ))
                        })?;
                        Ok(MatchExpr::Aggregate { agg, var: Some(var), arg: None })
                    }
                    _ => {
                        let inner = expr_arg(0)?;
                        let var = single_var(inner, self.vars, &name)?;
                        let arg = self.compile(inner, At { nav: Some(Nav::Row), ..at })?;
                        Ok(MatchExpr::Aggregate { agg, var, arg: Some(Box::new(arg)) })
                    }
                }
            }
            "MATCH_ROWTIME" if !at.define && args.is_empty() => Ok(MatchExpr::MatchRowtime),
            "CLASSIFIER" | "MATCH_NUMBER" => Err(refuse(format!("{name}() in MATCH_RECOGNIZE (as Flink)"))),
            "MATCH_PROCTIME" if !at.define && args.is_empty() => Ok(MatchExpr::MatchProctime),
            "MATCH_PROCTIME" => Err(refuse("MATCH_PROCTIME in MATCH_RECOGNIZE's DEFINE (write it among the MEASURES)")),
            "MATCH_ROWTIME" => Err(refuse(format!(
                "MATCH_ROWTIME{} in MATCH_RECOGNIZE{} (write MATCH_ROWTIME() among the MEASURES)",
                if args.is_empty() { "()" } else { "(column)" },
                if at.define { "'s DEFINE" } else { "" }
            ))),
            _ => {
                let Some(udf) = (self.functions)(&name.to_ascii_lowercase()) else {
                    return Err(plan_err(format!("MATCH_RECOGNIZE: no function named '{name}'")));
                };
                if distinct {
                    return Err(refuse(format!("{name} with DISTINCT in MATCH_RECOGNIZE")));
                }
                let args = (0..args.len()).map(|i| self.compile(expr_arg(i)?, at)).collect::<DfResult<Vec<_>>>()?;
                let fields: Vec<FieldRef> =
                    args.iter().map(|a| Arc::new(Field::new("arg", value_type(self.type_of(a)), true))).collect();
                let arg_fields = fields_with_udf(&fields, udf.as_ref())?;
                let literals: Vec<Option<&ScalarValue>> =
                    args.iter().map(|a| if let MatchExpr::Literal(v) = a { Some(v) } else { None }).collect();
                let return_field = udf
                    .return_field_from_args(ReturnFieldArgs { arg_fields: &arg_fields, scalar_arguments: &literals })?;
                let config = Arc::new(ConfigOptions::default());
                Ok(MatchExpr::Function(Box::new(Call { udf, args, arg_fields, return_field, config })))
            }
        }
    }

    /// The type of a measure's values.
    pub fn type_of(&self, e: &MatchExpr) -> DataType {
        let int = |t: &DataType| t.is_integer();
        match e {
            MatchExpr::Literal(v) => v.data_type(),
            MatchExpr::Column { slot, .. } => self.schema.field(self.columns[*slot]).data_type().clone(),
            MatchExpr::Aggregate { agg: MatchAgg::Count, .. } => DataType::Int64,
            MatchExpr::Aggregate { agg, arg: Some(a), .. } => {
                let t = self.type_of(a);
                match agg {
                    MatchAgg::Min | MatchAgg::Max => t,
                    _ if int(&t) => DataType::Int64,
                    _ => DataType::Float64,
                }
            }
            MatchExpr::Aggregate { .. } => DataType::Int64,
            MatchExpr::Binary { op, left, right } => match op {
                BinOp::Plus | BinOp::Minus | BinOp::Multiply | BinOp::Divide | BinOp::Modulo => {
                    if int(&self.type_of(left)) && int(&self.type_of(right)) {
                        DataType::Int64
                    } else {
                        DataType::Float64
                    }
                }
                _ => DataType::Boolean,
            },
            MatchExpr::Not(_) | MatchExpr::IsNull { .. } => DataType::Boolean,
            MatchExpr::Negate(e) => self.type_of(e),
            MatchExpr::Case { branches, otherwise } => branches
                .first()
                .map(|(_, t)| self.type_of(t))
                .or_else(|| otherwise.as_ref().map(|o| self.type_of(o)))
                .unwrap_or(DataType::Null),
            MatchExpr::Cast { to, .. } => to.clone(),
            MatchExpr::Function(c) => c.return_field.data_type().clone(),
            MatchExpr::MatchRowtime | MatchExpr::MatchProctime => DataType::Timestamp(TimeUnit::Millisecond, None),
        }
    }
}

/// The type of a value as expressions hold it ([`weir_runtime::operators::normalise`]).
fn value_type(t: DataType) -> DataType {
    match t {
        t if t.is_integer() => DataType::Int64,
        DataType::Float16 | DataType::Float32 | DataType::Decimal128(..) | DataType::Decimal256(..) => {
            DataType::Float64
        }
        DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
        t => t,
    }
}

/// The one pattern variable an expression inside `FIRST`/`LAST` or an aggregate reads
/// (`None`: unqualified columns, all rows). Flink's rule: one variable per such expression.
fn single_var(e: &SqlExpr, vars: &[String], function: &str) -> DfResult<Option<u16>> {
    let mut found: Vec<String> = Vec::new();
    let mut plain = false;
    collect_vars(e, &mut found, &mut plain);
    found.sort();
    found.dedup();
    match (found.as_slice(), plain) {
        ([], _) => Ok(None),
        ([v], false) => Ok(vars.iter().position(|w| w.eq_ignore_ascii_case(v)).map(|i| i as u16)),
        _ => Err(refuse(format!(
            "{function} over columns of several pattern variables in MATCH_RECOGNIZE (as Flink: one variable per \
             {function})"
        ))),
    }
}

fn collect_vars(e: &SqlExpr, found: &mut Vec<String>, plain: &mut bool) {
    use datafusion::sql::sqlparser::ast::{Visit, Visitor};
    struct V<'a>(&'a mut Vec<String>, &'a mut bool);
    impl Visitor for V<'_> {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &SqlExpr) -> std::ops::ControlFlow<()> {
            match e {
                SqlExpr::CompoundIdentifier(p) if p.len() == 2 => self.0.push(p[0].value.to_ascii_uppercase()),
                SqlExpr::Identifier(_) => *self.1 = true,
                _ => {}
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let _ = e.visit(&mut V(found, plain));
}

fn literal(v: &Value) -> DfResult<ScalarValue> {
    Ok(match v {
        Value::Number(n, _) => match n.parse::<i64>() {
            Ok(i) => ScalarValue::Int64(Some(i)),
            Err(_) => ScalarValue::Float64(Some(n.parse().map_err(|_| plan_err(format!("bad number {n}")))?)),
        },
        Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => ScalarValue::Utf8(Some(s.clone())),
        Value::Boolean(b) => ScalarValue::Boolean(Some(*b)),
        Value::Null => ScalarValue::Null,
        other => return Err(refuse(format!("the literal {other} in MATCH_RECOGNIZE"))),
    })
}

fn binary(op: &BinaryOperator) -> DfResult<BinOp> {
    Ok(match op {
        BinaryOperator::Plus => BinOp::Plus,
        BinaryOperator::Minus => BinOp::Minus,
        BinaryOperator::Multiply => BinOp::Multiply,
        BinaryOperator::Divide => BinOp::Divide,
        BinaryOperator::Modulo => BinOp::Modulo,
        BinaryOperator::Eq => BinOp::Eq,
        BinaryOperator::NotEq => BinOp::NotEq,
        BinaryOperator::Lt => BinOp::Lt,
        BinaryOperator::LtEq => BinOp::LtEq,
        BinaryOperator::Gt => BinOp::Gt,
        BinaryOperator::GtEq => BinOp::GtEq,
        BinaryOperator::And => BinOp::And,
        BinaryOperator::Or => BinOp::Or,
        other => return Err(refuse(format!("the operator {other} in MATCH_RECOGNIZE"))),
    })
}

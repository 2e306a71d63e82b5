//! Planning `GROUP BY` outside a window (and a global aggregate): the group key and each
//! aggregate's argument and `FILTER` computed as columns by a projection, an exchange by the
//! key columns, then the group aggregate.

use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::ExprSchemable;
use weir_runtime::operators::{AggKind, AggregateDef, BagKind, GroupSpec};

use super::*;

impl Planner {
    pub(super) fn group_aggregate_node(&self, agg: &datafusion::logical_expr::Aggregate) -> Result<Node> {
        let input = self.to_node(&agg.input)?;
        let retracting_input = !input.changelog().is_append_only();
        let input_schema = agg.input.schema();
        let output = agg.schema.as_arrow().clone();
        let keys = agg.group_expr.len();
        let mut exprs = Vec::new();
        let mut fields: Vec<Field> = Vec::new();
        let mut display = Vec::new();
        for (i, e) in agg.group_expr.iter().enumerate() {
            exprs.push(self.physical(e, input_schema)?);
            fields.push(output.field(i).clone());
            display.push(e.human_display().to_string());
        }
        // Each argument and filter becomes a column after the key columns, once: aggregates of
        // one argument share its column (and DISTINCT ones their state).
        let mut computed: Vec<(Expr, usize)> = Vec::new();
        let mut column_of = |e: &Expr, name: String| -> Result<usize> {
            if let Some((_, c)) = computed.iter().find(|(seen, _)| seen == e) {
                return Ok(*c);
            }
            computed.push((e.clone(), fields.len()));
            let data_type = e.get_type(input_schema)?;
            exprs.push(self.physical(e, input_schema)?);
            fields.push(Field::new(name, data_type, true));
            display.push(e.human_display().to_string());
            Ok(fields.len() - 1)
        };
        let mut aggregates = Vec::new();
        for (i, e) in agg.aggr_expr.iter().enumerate() {
            let inner = match e {
                Expr::Alias(a) => a.expr.as_ref(),
                e => e,
            };
            let Expr::AggregateFunction(AggregateFunction { func, params }) = inner else {
                return Err(WeirError::internal(format!("aggregate expression {}", e.human_display())));
            };
            let name = func.name().to_ascii_lowercase();
            let kind = match name.as_str() {
                plain if let Some(kind) = AggKind::of_name(plain) => kind,
                "string_agg" => AggKind::Bag(BagKind::ListAgg),
                crate::json_aggregates::ARRAY_AGG => {
                    AggKind::Bag(BagKind::JsonArray { absent_on_null: absent_on_null(&params.args) })
                }
                crate::json_aggregates::OBJECT_AGG => {
                    AggKind::Bag(BagKind::JsonObject { absent_on_null: absent_on_null(&params.args) })
                }
                _ if retracting_input => {
                    return Err(WeirError::not_supported(format!(
                        "{name}() over an updating input: it cannot take rows back (COUNT, SUM, AVG, MIN, MAX, the deviations and variances can)"
                    )))
                }
                _ => {
                    return Err(WeirError::not_supported(format!(
                        "{name}() in a GROUP BY outside a window yet (COUNT, SUM, AVG, MIN, MAX, STDDEV_POP, STDDEV_SAMP, \
                         VAR_POP and VAR_SAMP are supported; over a window every aggregate is)"
                    )))
                }
            };
            if !params.order_by.is_empty() {
                return Err(WeirError::not_supported("ordered aggregates (WITHIN GROUP / ORDER BY in an aggregate)"));
            }
            let label = e.human_display().to_string();
            let mut second = None;
            let mut separator = ",".to_string();
            let args: &[Expr] = match (kind, params.args.as_slice()) {
                // LISTAGG's separator, and the JSON aggregates' ON NULL, are constants.
                (AggKind::Bag(BagKind::ListAgg), [a, Expr::Literal(sep, _)]) => {
                    separator = match sep {
                        datafusion::common::ScalarValue::Utf8(Some(s))
                        | datafusion::common::ScalarValue::LargeUtf8(Some(s))
                        | datafusion::common::ScalarValue::Utf8View(Some(s)) => s.clone(),
                        _ => return Err(WeirError::user("LISTAGG's separator is a string constant")),
                    };
                    std::slice::from_ref(a)
                }
                (AggKind::Bag(BagKind::ListAgg), [_, _]) => {
                    return Err(WeirError::user("LISTAGG's separator is a string constant"))
                }
                (AggKind::Bag(BagKind::JsonArray { .. }), [a, _]) => std::slice::from_ref(a),
                (AggKind::Bag(BagKind::JsonObject { .. }), [k, v, _]) => {
                    second = Some(column_of(v, format!("{label} value {i}"))?);
                    std::slice::from_ref(k)
                }
                (_, args) => args,
            };
            if params.distinct && matches!(kind, AggKind::Bag(_)) {
                return Err(WeirError::not_supported(format!("{name}(DISTINCT …) in a GROUP BY outside a window")));
            }
            let (arg, arg_type) = match args {
                [] => (None, DataType::Null),
                // COUNT(*), COUNT(1): every row counts.
                [Expr::Literal(v, _)] if kind == AggKind::Count && !v.is_null() => (None, DataType::Null),
                [a] => {
                    let t = a.get_type(input_schema)?;
                    (Some(column_of(a, format!("{label} arg {i}"))?), t)
                }
                _ => return Err(WeirError::not_supported(format!("{name}() of several arguments"))),
            };
            let filter = params.filter.as_ref().map(|f| column_of(f, format!("{label} filter {i}"))).transpose()?;
            let distinct = params.distinct && !matches!(kind, AggKind::Min | AggKind::Max);
            if matches!(kind, AggKind::Sum | AggKind::Avg | AggKind::Moment(_))
                && weir_runtime::operators::Lane::of(&arg_type).is_none()
            {
                return Err(WeirError::user(format!("{name}() of a {arg_type} value: it takes numbers")));
            }
            aggregates.push(AggregateDef {
                kind,
                arg,
                arg_type,
                filter,
                distinct,
                output: output.field(keys + i).data_type().clone(),
                second,
                separator,
            });
        }
        let schema = Arc::new(Schema::new(fields));
        let project = input.with_operator(OperatorSpec::Project { exprs, schema, display });
        let exchange =
            Node::Exchange { partitioning: Partitioning::Hash((0..keys).collect()), input: Box::new(project) };
        let text = format!(
            "group by [{}], [{}]",
            agg.group_expr.iter().map(|e| e.human_display().to_string()).collect::<Vec<_>>().join(", "),
            agg.aggr_expr.iter().map(|e| e.human_display().to_string()).collect::<Vec<_>>().join(", ")
        );
        let ttl = self.state_ttl.map(|d| d.as_millis().min(i64::MAX as u128) as i64);
        let text = match ttl {
            Some(ms) => format!("{text}, state ttl {ms} ms (event time)"),
            None => text,
        };
        let spec = GroupSpec { keys, aggregates, retracting_input, schema: Arc::new(output), ttl };
        Ok(exchange.with_operator(OperatorSpec::GroupAggregate { spec, display: text }))
    }
}

/// The `ON NULL` constant a JSON aggregate's call ends with: `'ABSENT'` or `'NULL'`.
fn absent_on_null(args: &[Expr]) -> bool {
    matches!(args.last(), Some(Expr::Literal(datafusion::common::ScalarValue::Utf8(Some(s)), _)) if s == "ABSENT")
}

//! Planning OVER aggregates, as Flink runs them on a stream: `agg(x) OVER (PARTITION BY …
//! ORDER BY rowtime [ROWS|RANGE BETWEEN … PRECEDING AND CURRENT ROW])`, every aggregate of
//! the query over the same window. Arguments and partition keys that are expressions are
//! computed by a projection before the exchange by the partition key, and dropped after.
//!
//! What Flink refuses is refused with its reason: a frame reaching `FOLLOWING` rows, an
//! order that is not one time attribute ascending, windows that differ within a query.

use datafusion::common::ScalarValue;
use datafusion::logical_expr::expr::{WindowFunction, WindowFunctionParams};
use datafusion::logical_expr::{ExprSchemable, WindowFrameBound, WindowFrameUnits, WindowFunctionDefinition};
use weir_runtime::operators::{AggKind, AggregateDef, BagKind, OverFunction, OverSpec, Preceding};

use super::joins::TimeAttribute;
use super::ranking::{column_of, placed, rank_function, whole_number};
use super::*;

/// The window function of an OVER expression.
fn window_function(e: &Expr) -> Result<&WindowFunction> {
    let inner = match e {
        Expr::Alias(a) => a.expr.as_ref(),
        e => e,
    };
    match inner {
        Expr::WindowFunction(w) => Ok(w),
        other => Err(WeirError::internal(format!("window expression {}", other.human_display()))),
    }
}

/// An expression as the user wrote it: a column by its name alone.
fn short(e: &Expr) -> String {
    match e {
        Expr::Column(c) => c.name.clone(),
        e => e.human_display().to_string(),
    }
}

/// A frame's start, as far back as it reaches.
fn preceding(params: &WindowFunctionParams) -> Result<Preceding> {
    let frame = &params.window_frame;
    if !matches!(frame.end_bound, WindowFrameBound::CurrentRow) {
        return Err(WeirError::not_supported(
            "OVER windows whose frame ends after the current row (FOLLOWING): a row would wait for rows after it; \
             Flink's streaming OVER windows end at CURRENT ROW",
        ));
    }
    let rows = match frame.units {
        WindowFrameUnits::Rows => true,
        WindowFrameUnits::Range => false,
        WindowFrameUnits::Groups => {
            return Err(WeirError::not_supported("OVER windows with a GROUPS frame (Flink has ROWS and RANGE)"))
        }
    };
    Ok(match (&frame.start_bound, rows) {
        (WindowFrameBound::Preceding(v), _) if v.is_null() => Preceding::Unbounded,
        (WindowFrameBound::CurrentRow, _) => {
            return Err(WeirError::not_supported(
                "OVER windows whose frame starts at the current row: Flink 1.20 refuses them too (\"OVER RANGE \
                 FOLLOWING windows are not supported yet\"); a frame starts at n PRECEDING or UNBOUNDED PRECEDING",
            ))
        }
        (WindowFrameBound::Preceding(v), true) => match v.cast_to(&DataType::UInt64) {
            Ok(ScalarValue::UInt64(Some(n))) => Preceding::Rows(n),
            _ => return Err(WeirError::user(format!("ROWS {v} PRECEDING: the number of rows is a whole constant"))),
        },
        (WindowFrameBound::Preceding(v), false) => match interval_ms(v) {
            Some(ms) => Preceding::Range(ms),
            None => {
                return Err(WeirError::not_supported(format!(
                    "RANGE {v} PRECEDING: a RANGE frame over a time attribute reaches back an INTERVAL of days or \
                     less (RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND CURRENT ROW)"
                )))
            }
        },
        (WindowFrameBound::Following(_), _) => {
            return Err(WeirError::not_supported("OVER windows whose frame starts after the current row (FOLLOWING)"))
        }
    })
}

/// Whether the frame is the default one of an ordered window (`RANGE BETWEEN UNBOUNDED
/// PRECEDING AND CURRENT ROW`); `None` without an order.
fn range_units_unbounded(params: &WindowFunctionParams) -> Option<bool> {
    let frame = &params.window_frame;
    (!params.order_by.is_empty()).then(|| {
        frame.units == WindowFrameUnits::Range
            && matches!(&frame.start_bound, WindowFrameBound::Preceding(v) if v.is_null())
            && matches!(frame.end_bound, WindowFrameBound::CurrentRow)
    })
}

/// A constant interval of days or less, in milliseconds.
fn interval_ms(v: &ScalarValue) -> Option<i64> {
    match v {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months == 0 => {
            Some(v.days as i64 * 86_400_000 + v.nanoseconds / 1_000_000)
        }
        ScalarValue::IntervalDayTime(Some(v)) => Some(v.days as i64 * 86_400_000 + v.milliseconds as i64),
        _ => None,
    }
}

impl Planner {
    pub(super) fn over_node(&self, window: &datafusion::logical_expr::Window) -> Result<Node> {
        // DataFusion stacks the windows of one SELECT, with at most projections between.
        let mut below = window.input.as_ref();
        while let LogicalPlan::Projection(p) = below {
            below = p.input.as_ref();
        }
        if matches!(below, LogicalPlan::Window(_)) {
            return Err(WeirError::not_supported(
                "OVER windows that differ within one query: on a stream every OVER aggregate of a query must use \
                 the same window (partition, order and frame), as in Flink",
            ));
        }
        let mut input = self.to_node(&window.input)?;
        if !input.changelog().is_append_only() {
            return Err(WeirError::not_supported(
                "an OVER aggregate over an updating input: it aggregates appended rows only (as Flink's)",
            ));
        }
        let input_schema = window.input.schema();
        let width = input_schema.fields().len();
        let functions: Vec<&WindowFunction> = window.window_expr.iter().map(window_function).collect::<Result<_>>()?;
        let Some(first) = functions.first() else { return self.to_node(&window.input) };
        let params = &first.params;
        for (e, f) in window.window_expr.iter().zip(&functions) {
            if rank_function(e).is_some() {
                return Err(WeirError::not_supported(format!(
                    "{}() OVER without a bound on it: on a stream a rank keeps the first rows of a partition (WHERE \
                     rn <= N, a Top-N), or every row would be renumbered forever",
                    f.fun.name().to_ascii_uppercase()
                )));
            }
            let p = &f.params;
            if p.partition_by != params.partition_by
                || p.order_by != params.order_by
                || p.window_frame != params.window_frame
            {
                return Err(WeirError::not_supported(
                    "OVER windows that differ within one query: on a stream every OVER aggregate of a query must use \
                     the same window (partition, order and frame), as in Flink",
                ));
            }
        }
        let time =
            match params.order_by.as_slice() {
                [s] if s.asc => column_of(&s.expr, input_schema),
                [s] => {
                    return Err(WeirError::not_supported(format!(
                    "OVER windows ordered by {} DESC: a stream's OVER window is ordered by a time attribute ascending",
                    short(&s.expr)
                )))
                }
                [] => return Err(WeirError::not_supported(
                    "OVER windows without ORDER BY: a stream's OVER window is ordered by a time attribute ascending",
                )),
                _ => return Err(WeirError::not_supported(
                    "OVER windows ordered by several columns: a stream's OVER window is ordered by one time attribute",
                )),
            };
        let order = short(&params.order_by[0].expr);
        let (time, proctime) = match time.map(|t| (t, self.time_attribute(&window.input, t))) {
            Some((t, Some(TimeAttribute::Event))) => (t, false),
            Some((t, Some(TimeAttribute::Processing))) => (t, true),
            _ => {
                return Err(WeirError::not_supported(format!(
                    "OVER windows ordered by {order}: a stream's OVER window is ordered by a time attribute ascending \
                     (a column with a WATERMARK)"
                )))
            }
        };
        let preceding = preceding(params)?;
        let range = params.window_frame.units == WindowFrameUnits::Range;

        let mut computed: Vec<&Expr> = Vec::new();
        let partition: Vec<usize> =
            params.partition_by.iter().map(|e| placed(e, input_schema, &mut computed)).collect();
        let mut specs = Vec::with_capacity(functions.len());
        for (i, (e, f)) in window.window_expr.iter().zip(&functions).enumerate() {
            let output = window.schema.field(width + i).data_type().clone();
            let name = f.fun.name().to_ascii_lowercase();
            let p = &f.params;
            if p.filter.is_some() {
                return Err(WeirError::not_supported(format!("FILTER in an OVER aggregate ({})", e.human_display())));
            }
            // FIRST_VALUE and LAST_VALUE are DataFusion window functions: Flink's aggregates
            // (NULLs skipped), below.
            let value_function = matches!(name.as_str(), "first_value" | "last_value");
            if let (WindowFunctionDefinition::WindowUDF(_), false) = (&f.fun, value_function) {
                let spec = match (name.as_str(), p.args.as_slice()) {
                    ("lag", _) if range_units_unbounded(p) == Some(false) => {
                        return Err(WeirError::not_supported(
                            "LAG over a window with a frame (ROWS, or a bounded RANGE): LAG counts rows back \
                             whatever the frame, and Flink 1.20 refuses one (\"ROW/RANGE not allowed with RANK, \
                             DENSE_RANK or ROW_NUMBER functions\"); leave the frame out",
                        ))
                    }
                    ("lag", [x, rest @ ..]) if rest.len() <= 2 => {
                        let offset = match rest.first() {
                            None => 1,
                            Some(o) => match whole_number(o) {
                                Some(n) if n >= 0 => n as usize,
                                _ => {
                                    return Err(WeirError::user(format!(
                                        "LAG's offset ({}) is a whole constant of 0 or more",
                                        o.human_display()
                                    )))
                                }
                            },
                        };
                        let default = match rest.get(1) {
                            None => ScalarValue::Null,
                            Some(Expr::Literal(v, _)) => v.clone(),
                            Some(d) => {
                                return Err(WeirError::user(format!(
                                    "LAG's default ({}) is a constant",
                                    d.human_display()
                                )))
                            }
                        };
                        let arg_type = x.get_type(input_schema)?;
                        let arg = placed(x, input_schema, &mut computed);
                        OverFunction::Lag { arg, arg_type, offset, default, output }
                    }
                    ("lead", _) => {
                        return Err(WeirError::not_supported(
                            "LEAD in an OVER window on a stream: it reads rows after the current one (Flink 1.20: \
                             \"LEAD Function is not supported in stream mode\")",
                        ))
                    }
                    _ => return Err(WeirError::not_supported(format!("{} in an OVER window", e.human_display()))),
                };
                specs.push(spec);
                continue;
            }
            let kind = match AggKind::of_name(&name) {
                Some(kind @ (AggKind::Count | AggKind::Sum | AggKind::Avg | AggKind::Min | AggKind::Max)) => kind,
                Some(kind @ AggKind::Bag(BagKind::FirstValue | BagKind::LastValue)) => kind,
                _ => {
                    return Err(WeirError::not_supported(format!(
                        "{name}() in an OVER window (COUNT, SUM, AVG, MIN, MAX, FIRST_VALUE, LAST_VALUE and LAG are)"
                    )))
                }
            };
            let (arg, arg_type) = match p.args.as_slice() {
                [] => (None, DataType::Null),
                [Expr::Literal(v, _)] if kind == AggKind::Count && !v.is_null() => (None, DataType::Null),
                [a] => (Some(placed(a, input_schema, &mut computed)), a.get_type(input_schema)?),
                _ => return Err(WeirError::not_supported(format!("{name}() of several arguments in an OVER window"))),
            };
            if matches!(kind, AggKind::Sum | AggKind::Avg) && weir_runtime::operators::Lane::of(&arg_type).is_none() {
                return Err(WeirError::user(format!("{name}() of a {arg_type} value: it takes numbers")));
            }
            if p.distinct && kind != AggKind::Count {
                return Err(WeirError::not_supported(format!(
                    "{name}(DISTINCT …) in an OVER window (COUNT(DISTINCT …) is)"
                )));
            }
            let mut def = AggregateDef::new(kind, arg, arg_type, output);
            def.distinct = p.distinct;
            specs.push(OverFunction::Aggregate(def));
        }

        if !computed.is_empty() {
            input = self.with_computed(input, input_schema, &computed, "__weir_over")?;
        }
        let input_schema_arrow = input.schema();
        let mut fields: Vec<Field> = input_schema_arrow.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.extend((0..specs.len()).map(|i| window.schema.field(width + i).as_ref().clone()));
        let frame = match preceding {
            Preceding::Unbounded => "UNBOUNDED PRECEDING".to_string(),
            Preceding::Rows(n) => format!("{n} PRECEDING"),
            Preceding::Range(ms) => format!("INTERVAL {ms} ms PRECEDING"),
        };
        let display = format!(
            "[{}] over (partition by [{}] order by {order} {} BETWEEN {frame} AND CURRENT ROW)",
            window
                .window_expr
                .iter()
                .map(|e| window_function(e).map(|f| f.fun.name().to_string()).unwrap_or_default())
                .collect::<Vec<_>>()
                .join(", "),
            params.partition_by.iter().map(|e| e.human_display().to_string()).collect::<Vec<_>>().join(", "),
            if range { "RANGE" } else { "ROWS" },
        );
        let spec = OverSpec {
            partition: partition.clone(),
            time,
            proctime,
            preceding,
            range,
            functions: specs,
            input_schema: input_schema_arrow,
            schema: Arc::new(Schema::new(fields)),
        };
        let extended = !computed.is_empty();
        let mut node = Node::Exchange { partitioning: Partitioning::Hash(partition), input: Box::new(input) }
            .with_operator(OperatorSpec::OverAggregate { spec, display });
        if extended {
            let all = node.schema().fields().len();
            let aggs = window.window_expr.len();
            let indices: Vec<usize> = (0..width).chain(all - aggs..all).collect();
            node = node
                .with_operator(OperatorSpec::Select { indices, schema: Arc::new(window.schema.as_arrow().clone()) });
        }
        Ok(node)
    }
}

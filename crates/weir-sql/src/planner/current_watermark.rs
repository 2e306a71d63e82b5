//! `CURRENT_WATERMARK(rowtime)` in a `SELECT` list or a `WHERE` clause: the input gets the
//! operator's watermark appended as a column (weir-runtime's `AppendWatermark`), and each call
//! reads that column, cast to its argument's type (`TIMESTAMP(3)` or `TIMESTAMP_LTZ(3)`, as
//! in Flink). The argument must be an event-time attribute, as Flink requires.

use datafusion::arrow::datatypes::TimeUnit;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility};
use datafusion::logical_expr::{ExprSchemable, TypeSignature};

use super::joins::TimeAttribute;
use super::*;

pub const NAME: &str = "current_watermark";
const COLUMN: &str = "__weir_current_watermark";

/// The function as DataFusion sees it: typed like its argument; never evaluated itself.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CurrentWatermark {
    signature: Signature,
}

impl Default for CurrentWatermark {
    fn default() -> Self {
        // Volatile: never folded, never moved below the operator that evaluates it.
        Self { signature: Signature::new(TypeSignature::Any(1), Volatility::Volatile) }
    }
}

impl ScalarUDFImpl for CurrentWatermark {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> datafusion::error::Result<DataType> {
        match args {
            [t @ DataType::Timestamp(_, _)] => Ok(t.clone()),
            [other] => Err(datafusion::error::DataFusionError::Plan(format!(
                "CURRENT_WATERMARK takes an event-time attribute (TIMESTAMP(3) or TIMESTAMP_LTZ(3)), not {}",
                weir_core::sql_type_name(other)
            ))),
            _ => Err(datafusion::error::DataFusionError::Plan("CURRENT_WATERMARK takes one argument".into())),
        }
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        Err(datafusion::error::DataFusionError::NotImplemented(
            "CURRENT_WATERMARK here: Weir evaluates it in a SELECT list or a WHERE clause".into(),
        ))
    }
}

fn calls_it(e: &Expr) -> bool {
    e.exists(|e| Ok(matches!(e, Expr::ScalarFunction(f) if f.name() == NAME))).unwrap_or(false)
}

impl Planner {
    /// Where `exprs` (over `plan`'s output) call `CURRENT_WATERMARK`: `input` with the
    /// watermark column appended, the schema with it, and the expressions reading it.
    pub(super) fn with_current_watermark(
        &self,
        input: Node,
        plan: &LogicalPlan,
        exprs: &[Expr],
    ) -> Result<(Node, Option<Arc<DFSchema>>, Vec<Expr>)> {
        if !exprs.iter().any(calls_it) {
            return Ok((input, None, exprs.to_vec()));
        }
        let schema = plan.schema();
        let field = Field::new(COLUMN, DataType::Timestamp(TimeUnit::Millisecond, None), true);
        let extended = Arc::new(schema.join(&DFSchema::try_from(Schema::new(vec![field]))?)?);
        let column = Expr::Column(datafusion::common::Column::from_name(COLUMN));
        let rewritten = exprs
            .iter()
            .map(|e| {
                e.clone()
                    .transform_up(|e| match &e {
                        Expr::ScalarFunction(f) if f.name() == NAME => {
                            let [arg] = f.args.as_slice() else { return Ok(Transformed::no(e)) };
                            let index = match arg {
                                Expr::Column(c) => schema.index_of_column(c).ok(),
                                _ => None,
                            };
                            if index.and_then(|i| self.time_attribute(plan, i)) != Some(TimeAttribute::Event) {
                                return Err(datafusion::error::DataFusionError::Plan(format!(
                                    "the argument of CURRENT_WATERMARK must be an event-time attribute (a column \
                                     with a WATERMARK, or a window's window_time), not {}",
                                    arg.human_display()
                                )));
                            }
                            let to = arg.get_type(schema)?;
                            Ok(Transformed::yes(Expr::Cast(datafusion::logical_expr::Cast::new(
                                Box::new(column.clone()),
                                to,
                            ))))
                        }
                        _ => Ok(Transformed::no(e)),
                    })
                    .map(|t| t.data)
            })
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        let appended = Arc::new(extended.as_arrow().clone());
        Ok((input.with_operator(OperatorSpec::AppendWatermark { schema: appended }), Some(extended), rewritten))
    }
}

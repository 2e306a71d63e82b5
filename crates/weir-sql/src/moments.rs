//! Flink's deviations and variances as DataFusion aggregate functions, in place of
//! DataFusion's own (which return DOUBLE and use another algorithm): the result type and
//! values are Flink's (weir-runtime's `Moment`). The window operators run this accumulator;
//! the group aggregate keeps the same three sums in its own state and retracts them.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Float64Type, Int64Type};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility};
use weir_runtime::operators::{Lane, Moment};

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FlinkMoment {
    moment: Moment,
    name: &'static str,
    aliases: Vec<String>,
    signature: Signature,
}

/// Every name Flink and DataFusion give these functions, each as Flink's.
pub fn functions() -> Vec<AggregateUDF> {
    [
        (Moment::StddevPop, "stddev_pop", &[][..]),
        (Moment::StddevSamp, "stddev_samp", &["stddev"][..]),
        (Moment::VarPop, "var_pop", &["var_population"][..]),
        (Moment::VarSamp, "var_samp", &["var", "variance", "var_sample"][..]),
    ]
    .into_iter()
    .map(|(moment, name, aliases)| {
        AggregateUDF::new_from_impl(FlinkMoment {
            moment,
            name,
            aliases: aliases.iter().map(|a| a.to_string()).collect(),
            signature: Signature::any(1, Volatility::Immutable),
        })
    })
    .collect()
}

impl AggregateUDFImpl for FlinkMoment {
    fn name(&self) -> &str {
        self.name
    }

    fn aliases(&self) -> &[String] {
        &self.aliases
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        args.first().and_then(Moment::result_type).ok_or_else(|| {
            DataFusionError::Plan(format!(
                "{}() takes numbers, not {}",
                self.name.to_uppercase(),
                args.first().map_or("nothing".into(), weir_core::sql_type_name)
            ))
        })
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if args.is_distinct {
            return Err(DataFusionError::NotImplemented(format!(
                "{}(DISTINCT …) over a window",
                self.name.to_uppercase()
            )));
        }
        let arg = args.expr_fields.first().map(|f| f.data_type().clone()).unwrap_or(DataType::Float64);
        let lane = Moment::lane(&arg).unwrap_or(Lane::Float);
        Ok(Box::new(MomentAccumulator { moment: self.moment, out: args.return_type().clone(), sums: Sums::of(lane) }))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let arg = args.input_fields.first().map(|f| f.data_type().clone()).unwrap_or(DataType::Float64);
        let t = match Moment::lane(&arg) {
            Some(Lane::Int) => DataType::Int64,
            _ => DataType::Float64,
        };
        Ok(vec![
            Arc::new(Field::new(format!("{}[count]", args.name), DataType::Int64, true)),
            Arc::new(Field::new(format!("{}[sum]", args.name), t.clone(), true)),
            Arc::new(Field::new(format!("{}[squares]", args.name), t, true)),
        ])
    }
}

/// The count, sum and sum of squares, in the lane.
#[derive(Debug)]
enum Sums {
    Int(i64, i64, i64),
    Float(i64, f64, f64),
}

impl Sums {
    fn of(lane: Lane) -> Sums {
        match lane {
            Lane::Int => Sums::Int(0, 0, 0),
            _ => Sums::Float(0, 0.0, 0.0),
        }
    }
}

#[derive(Debug)]
struct MomentAccumulator {
    moment: Moment,
    out: DataType,
    sums: Sums,
}

impl MomentAccumulator {
    fn add(&mut self, values: &ArrayRef, sign: i64) -> Result<()> {
        match &mut self.sums {
            Sums::Int(n, sum, squares) => {
                let values = cast(values, &DataType::Int64)?;
                for v in values.as_primitive::<Int64Type>().iter().flatten() {
                    *n += sign;
                    *sum = sum.wrapping_add(v.wrapping_mul(sign));
                    *squares = squares.wrapping_add(v.wrapping_mul(v).wrapping_mul(sign));
                }
            }
            Sums::Float(n, sum, squares) => {
                let values = cast(values, &DataType::Float64)?;
                for v in values.as_primitive::<Float64Type>().iter().flatten() {
                    *n += sign;
                    *sum += v * sign as f64;
                    *squares += v * v * sign as f64;
                }
            }
        }
        Ok(())
    }
}

impl Accumulator for MomentAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        values.first().map_or(Ok(()), |v| self.add(v, 1))
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        values.first().map_or(Ok(()), |v| self.add(v, -1))
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        use weir_runtime::operators::Num;
        let value = match self.sums {
            Sums::Int(n, sum, squares) => self.moment.value(n, Num::I(sum), Num::I(squares)),
            Sums::Float(n, sum, squares) => self.moment.value(n, Num::F(sum), Num::F(squares)),
        };
        let scalar = match value {
            Some(Num::I(v)) => ScalarValue::Int64(Some(v)),
            Some(Num::F(v)) => ScalarValue::Float64(Some(v)),
            _ => ScalarValue::try_from(&self.out)?,
        };
        scalar.cast_to(&self.out)
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(match self.sums {
            Sums::Int(n, sum, squares) => {
                vec![ScalarValue::Int64(Some(n)), ScalarValue::Int64(Some(sum)), ScalarValue::Int64(Some(squares))]
            }
            Sums::Float(n, sum, squares) => {
                vec![ScalarValue::Int64(Some(n)), ScalarValue::Float64(Some(sum)), ScalarValue::Float64(Some(squares))]
            }
        })
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let [n, sum, squares] = states else {
            return Err(DataFusionError::Internal("a variance's state is three columns".into()));
        };
        let n = cast(n, &DataType::Int64)?;
        let n = n.as_primitive::<Int64Type>();
        match &mut self.sums {
            Sums::Int(count, s, q) => {
                let (sum, squares) = (cast(sum, &DataType::Int64)?, cast(squares, &DataType::Int64)?);
                let (sum, squares) = (sum.as_primitive::<Int64Type>(), squares.as_primitive::<Int64Type>());
                for i in (0..n.len()).filter(|i| n.is_valid(*i)) {
                    *count += n.value(i);
                    *s = s.wrapping_add(sum.value(i));
                    *q = q.wrapping_add(squares.value(i));
                }
            }
            Sums::Float(count, s, q) => {
                let (sum, squares) = (cast(sum, &DataType::Float64)?, cast(squares, &DataType::Float64)?);
                let (sum, squares) = (sum.as_primitive::<Float64Type>(), squares.as_primitive::<Float64Type>());
                for i in (0..n.len()).filter(|i| n.is_valid(*i)) {
                    *count += n.value(i);
                    *s += sum.value(i);
                    *q += squares.value(i);
                }
            }
        }
        Ok(())
    }
}

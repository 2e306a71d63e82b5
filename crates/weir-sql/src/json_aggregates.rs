//! Flink's `JSON_ARRAYAGG(v [NULL | ABSENT ON NULL])` and `JSON_OBJECTAGG([KEY] k VALUE v
//! [NULL | ABSENT ON NULL])`. sqlparser reads neither, so [`crate::json_construct::rewrite`]
//! turns them into calls of these aggregate functions, each value first made its JSON text by
//! [`JsonValue`] (a string quoted, a number as is, a nested constructor's JSON as JSON, as in
//! Flink):
//!
//! `__weir_json_arrayagg(__weir_json_value('v', v), 'ABSENT')`
//! `__weir_json_objectagg(k, __weir_json_value('v', v), 'NULL')`
//!
//! The accumulator here runs in window aggregates; in a `GROUP BY` outside a window the group
//! aggregate keeps the values itself and takes them back (weir-runtime's `BagKind`). Flink's
//! defaults: `ABSENT ON NULL` for arrays, `NULL ON NULL` for objects; an object's keys are
//! sorted, and a key twice fails the query, as in Flink.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{exec_err, ScalarValue};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

use crate::udf::udf;

pub const ARRAY_AGG: &str = "__weir_json_arrayagg";
pub const OBJECT_AGG: &str = "__weir_json_objectagg";
pub const VALUE: &str = "__weir_json_value";

udf!(JsonValue, VALUE, Signature::any(2, Volatility::Immutable), DataType::Utf8);

impl JsonValue {
    /// Each row's value as JSON text (NULL for NULL); `'r'`: the value is a nested
    /// constructor's JSON.
    fn run(args: &ScalarFunctionArgs, rows: usize) -> Result<ArrayRef> {
        let raw = matches!(args.args.first(), Some(ColumnarValue::Scalar(ScalarValue::Utf8(Some(m)))) if m == "r");
        let values = args.args.get(1).map(|v| v.to_array(rows)).transpose()?;
        let values = values.ok_or_else(|| DataFusionError::Plan("JSON value without its argument".into()))?;
        let mut out = StringBuilder::with_capacity(rows, rows * 8);
        for i in 0..rows {
            match crate::json_construct::member(&values, i, raw)? {
                Some(v) => out.append_value(v.to_string()),
                None => out.append_null(),
            }
        }
        Ok(Arc::new(out.finish()))
    }
}

/// The `ON NULL` setting of a call: its last argument, a constant.
fn absent_on_null(args: &[Arc<dyn datafusion::physical_expr::PhysicalExpr>]) -> bool {
    args.last()
        .and_then(|e| e.downcast_ref::<datafusion::physical_expr::expressions::Literal>())
        .is_some_and(|l| matches!(l.value(), ScalarValue::Utf8(Some(s)) if s == "ABSENT"))
}

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct JsonAgg {
    object: bool,
    signature: Signature,
}

impl JsonAgg {
    pub fn array() -> Self {
        Self { object: false, signature: Signature::any(2, Volatility::Immutable) }
    }

    pub fn object() -> Self {
        Self { object: true, signature: Signature::any(3, Volatility::Immutable) }
    }
}

impl AggregateUDFImpl for JsonAgg {
    fn name(&self) -> &str {
        if self.object {
            OBJECT_AGG
        } else {
            ARRAY_AGG
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn is_nullable(&self) -> bool {
        false
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if args.is_distinct {
            return Err(DataFusionError::NotImplemented("JSON_ARRAYAGG/JSON_OBJECTAGG with DISTINCT".into()));
        }
        Ok(Box::new(JsonAccumulator {
            object: self.object,
            absent: absent_on_null(args.exprs),
            items: Vec::new(),
            members: BTreeMap::new(),
        }))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(format!("{}[items]", args.name), DataType::Utf8, true))])
    }
}

/// The values so far: an array's JSON texts in order, or an object's members by key.
#[derive(Debug)]
struct JsonAccumulator {
    object: bool,
    absent: bool,
    items: Vec<String>,
    members: BTreeMap<String, String>,
}

impl JsonAccumulator {
    fn member(&mut self, key: String, value: String) -> Result<()> {
        if self.members.contains_key(&key) {
            return exec_err!(
                "JSON_OBJECTAGG: key '{key}' is already present. Duplicate keys are not allowed in JSON_OBJECTAGG"
            );
        }
        self.members.insert(key, value);
        Ok(())
    }
}

impl Accumulator for JsonAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let text = |a: &ArrayRef| cast(a, &DataType::Utf8);
        if self.object {
            let (Some(keys), Some(vals)) = (values.first(), values.get(1)) else { return Ok(()) };
            let (keys, vals) = (text(keys)?, text(vals)?);
            let (keys, vals) = (keys.as_string::<i32>(), vals.as_string::<i32>());
            for i in 0..keys.len() {
                if keys.is_null(i) {
                    return exec_err!("JSON_OBJECTAGG: a key is NULL (keys must not be NULL)");
                }
                match (vals.is_valid(i), self.absent) {
                    (true, _) => self.member(keys.value(i).to_string(), vals.value(i).to_string())?,
                    (false, false) => self.member(keys.value(i).to_string(), "null".into())?,
                    (false, true) => {}
                }
            }
        } else if let Some(vals) = values.first() {
            let vals = text(vals)?;
            let vals = vals.as_string::<i32>();
            for i in 0..vals.len() {
                match (vals.is_valid(i), self.absent) {
                    (true, _) => self.items.push(vals.value(i).to_string()),
                    (false, false) => self.items.push("null".into()),
                    (false, true) => {}
                }
            }
        }
        Ok(())
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let text = if self.object {
            let members: Vec<String> =
                self.members.iter().map(|(k, v)| format!("{}:{v}", serde_json::Value::String(k.clone()))).collect();
            format!("{{{}}}", members.join(","))
        } else {
            format!("[{}]", self.items.join(","))
        };
        Ok(ScalarValue::Utf8(Some(text)))
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
            + self.items.iter().map(|s| s.len()).sum::<usize>()
            + self.members.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
    }

    /// The values as a JSON array: an array's texts, or an object's `[key, value]` pairs.
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let state = if self.object {
            serde_json::to_string(&self.members.iter().collect::<Vec<_>>())
        } else {
            serde_json::to_string(&self.items)
        };
        Ok(vec![ScalarValue::Utf8(Some(state.map_err(|e| DataFusionError::Internal(e.to_string()))?))])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let Some(states) = states.first() else { return Ok(()) };
        let states = states.as_string::<i32>();
        let damaged = |e: serde_json::Error| DataFusionError::Internal(format!("a JSON aggregate's state: {e}"));
        for state in states.iter().flatten() {
            if self.object {
                for (k, v) in serde_json::from_str::<Vec<(String, String)>>(state).map_err(damaged)? {
                    self.member(k, v)?;
                }
            } else {
                self.items.extend(serde_json::from_str::<Vec<String>>(state).map_err(damaged)?);
            }
        }
        Ok(())
    }
}

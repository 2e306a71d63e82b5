//! Flink's functions about a value itself:
//!
//! - `TYPEOF(x [, force_serializable])`: the type of `x` by Flink's name (`INT`, `STRING`,
//!   `TIMESTAMP(3)`, `ARRAY<BIGINT>`), with ` NOT NULL` when the value can never be NULL. Weir's
//!   literal types are DataFusion's (an integer literal is a `BIGINT`, where Flink's is `INT`).
//! - `ELEMENT(array)`: the one element of an array; NULL for an empty or NULL array. An array
//!   of more than one element fails the job, as in Flink.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, UInt64Builder};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{exec_err, plan_err, ScalarValue};
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TypeOf {
    signature: Signature,
}

impl Default for TypeOf {
    fn default() -> Self {
        Self { signature: Signature::variadic_any(Volatility::Immutable) }
    }
}

impl ScalarUDFImpl for TypeOf {
    fn name(&self) -> &str {
        "typeof"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args.len() {
            1 | 2 => Ok(DataType::Utf8),
            n => plan_err!("TYPEOF takes a value and optionally force_serializable, not {n} arguments"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let field = &args.arg_fields[0];
        let mut name = weir_core::sql_type_name(field.data_type());
        if !field.is_nullable() {
            name.push_str(" NOT NULL");
        }
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(name))))
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Element {
    signature: Signature,
}

impl Default for Element {
    fn default() -> Self {
        Self { signature: Signature::any(1, Volatility::Immutable) }
    }
}

impl ScalarUDFImpl for Element {
    fn name(&self) -> &str {
        "element"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        plan_err!("ELEMENT's type comes from its argument's field")
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        match args.arg_fields[0].data_type() {
            DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
                Ok(Arc::new(Field::new(self.name(), f.data_type().clone(), true)))
            }
            t => plan_err!("ELEMENT takes an array, not {}", weir_core::sql_type_name(t)),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let input = args.args[0].to_array(rows)?;
        // Per row, the index of its one element among the values, or NULL.
        let (values, ranges): (Arc<dyn Array>, Vec<Option<(usize, usize)>>) = match input.data_type() {
            DataType::List(_) => {
                let l = input.as_list::<i32>();
                let o = l.offsets();
                let ranges = (0..rows).map(|i| (!l.is_null(i)).then(|| (o[i] as usize, o[i + 1] as usize))).collect();
                (l.values().clone(), ranges)
            }
            DataType::LargeList(_) => {
                let l = input.as_list::<i64>();
                let o = l.offsets();
                let ranges = (0..rows).map(|i| (!l.is_null(i)).then(|| (o[i] as usize, o[i + 1] as usize))).collect();
                (l.values().clone(), ranges)
            }
            DataType::FixedSizeList(_, n) => {
                let l = input.as_fixed_size_list();
                let n = *n as usize;
                let ranges = (0..rows).map(|i| (!l.is_null(i)).then_some((i * n, i * n + n))).collect();
                (l.values().clone(), ranges)
            }
            t => return plan_err!("ELEMENT takes an array, not {}", weir_core::sql_type_name(t)),
        };
        let mut indices = UInt64Builder::with_capacity(rows);
        for range in ranges {
            match range {
                Some((start, end)) if end - start == 1 => indices.append_value(start as u64),
                Some((start, end)) if end - start > 1 => {
                    return exec_err!("ELEMENT: the array has {} elements; it must have at most one", end - start)
                }
                _ => indices.append_null(),
            }
        }
        let out = take(values.as_ref(), &indices.finish(), None)?;
        crate::time_functions::scalar_or_array(&args.args, out)
    }
}

/// `__weir_or_null_element(list)`: the list, or a list of one NULL element when it is NULL or
/// empty; what `LEFT JOIN UNNEST(…) ON TRUE` unnests, so that such a row keeps one row of
/// NULLs ([`crate::unnest`]).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct OrNullElement {
    signature: Signature,
}

impl Default for OrNullElement {
    fn default() -> Self {
        Self { signature: Signature::any(1, Volatility::Immutable) }
    }
}

impl ScalarUDFImpl for OrNullElement {
    fn name(&self) -> &str {
        "__weir_or_null_element"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match &args[0] {
            DataType::List(f) => Ok(DataType::List(Arc::new(f.as_ref().clone().with_nullable(true)))),
            t => plan_err!("UNNEST takes an array or a map, not {}", weir_core::sql_type_name(t)),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        use datafusion::arrow::array::ListArray;
        use datafusion::arrow::buffer::OffsetBuffer;
        let rows = args.number_rows;
        let input = args.args[0].to_array(rows)?;
        let list = input.as_list::<i32>();
        let o = list.offsets();
        // Each row's elements by index into the values, or one NULL.
        let mut indices = UInt64Builder::with_capacity(list.values().len() + rows);
        let mut lengths = Vec::with_capacity(rows);
        for i in 0..rows {
            let (start, end) = (o[i] as usize, o[i + 1] as usize);
            if list.is_null(i) || start == end {
                indices.append_null();
                lengths.push(1);
            } else {
                (start..end).for_each(|k| indices.append_value(k as u64));
                lengths.push(end - start);
            }
        }
        let values = take(list.values().as_ref(), &indices.finish(), None)?;
        let DataType::List(field) = self.return_type(&[input.data_type().clone()])? else {
            return plan_err!("__weir_or_null_element: not a list");
        };
        let out = ListArray::try_new(field, OffsetBuffer::from_lengths(lengths), values, None)?;
        crate::time_functions::scalar_or_array(&args.args, Arc::new(out))
    }
}

//! Flink's window table functions as DataFusion table functions.
//!
//! The parser rewrites `TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), size))` into
//! `__weir_tumble('t', 'ts', size)`; DataFusion calls [`WindowFunction`] with those
//! arguments, and it returns a [`WindowTable`]: the table's columns plus `window_start`,
//! `window_end` and `window_time`, which the planner turns into a source, its watermark and
//! a window assignment operator.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::Expr;
use weir_runtime::operators::WindowKind;

/// Table name to schema, shared with the planner's catalog.
pub type TableSchemas = Arc<RwLock<BTreeMap<String, SchemaRef>>>;

pub const WINDOW_COLUMNS: [&str; 3] = ["window_start", "window_end", "window_time"];

/// The input of a window function: which table, which time column, which windows.
#[derive(Debug)]
pub struct WindowTable {
    pub table: String,
    pub time_column: String,
    pub kind: WindowKind,
    /// `SESSION(TABLE t PARTITION BY …)`: sessions are per value of these columns.
    pub partition_keys: Vec<String>,
    pub schema: SchemaRef,
}

/// A table DataFusion plans but never scans (Weir runs the plan): `$ty` with a `schema`
/// field, of `$kind`.
macro_rules! planned_only_table {
    ($ty:ty, $kind:expr) => {
        #[async_trait::async_trait]
        impl datafusion::catalog::TableProvider for $ty {
            fn schema(&self) -> datafusion::arrow::datatypes::SchemaRef {
                self.schema.clone()
            }

            fn table_type(&self) -> datafusion::datasource::TableType {
                $kind
            }

            async fn scan(
                &self,
                _state: &dyn datafusion::catalog::Session,
                _projection: Option<&Vec<usize>>,
                _filters: &[datafusion::logical_expr::Expr],
                _limit: Option<usize>,
            ) -> datafusion::error::Result<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
                Err(datafusion::error::DataFusionError::Internal(format!(
                    "{} is planned by DataFusion and run by Weir, never scanned",
                    stringify!($ty)
                )))
            }
        }
    };
}
pub(crate) use planned_only_table;

planned_only_table!(WindowTable, TableType::View);

#[derive(Debug)]
pub struct WindowFunction {
    pub kind: &'static str,
    pub tables: TableSchemas,
    /// Views, whose windows are over a `PROCTIME()` column (a view has no watermark).
    pub views: TableSchemas,
}

fn plan_err(message: String) -> DataFusionError {
    DataFusionError::Plan(message)
}

fn string_arg(kind: &str, e: &Expr) -> DfResult<String> {
    match e {
        Expr::Literal(ScalarValue::Utf8(Some(s)), _) => Ok(s.clone()),
        other => Err(plan_err(format!("{kind}: expected a name, found {other}"))),
    }
}

/// The optional `offset` argument at `at`: an interval of days or less, zero, or negative.
fn offset_arg(kind: &str, exprs: &[Expr], at: usize) -> DfResult<i64> {
    match exprs.get(at) {
        None => Ok(0),
        Some(e) => interval_millis(kind, "offset", e),
    }
}

/// An interval argument in milliseconds (no months: their length varies), positive.
fn millis_arg(kind: &str, what: &str, e: &Expr) -> DfResult<i64> {
    let ms = interval_millis(kind, what, e)?;
    if ms <= 0 {
        return Err(plan_err(format!("{kind}: the {what} must be positive")));
    }
    Ok(ms)
}

fn interval_millis(kind: &str, what: &str, e: &Expr) -> DfResult<i64> {
    Ok(match e {
        Expr::Negative(inner) => -interval_millis(kind, what, inner)?,
        Expr::Literal(ScalarValue::IntervalMonthDayNano(Some(v)), _) if v.months == 0 => {
            v.days as i64 * 86_400_000 + v.nanoseconds / 1_000_000
        }
        Expr::Literal(ScalarValue::IntervalDayTime(Some(v)), _) => v.days as i64 * 86_400_000 + v.milliseconds as i64,
        other => {
            return Err(plan_err(format!(
                "{kind}: the {what} must be an interval of days or less, like INTERVAL '10' SECOND, not {other}"
            )))
        }
    })
}

impl TableFunctionImpl for WindowFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DfResult<Arc<dyn TableProvider>> {
        let kind = self.kind.to_uppercase();
        let exprs = args.exprs();
        // Then an optional offset, but for SESSION.
        let expected = if self.kind == "session" { 4 } else { 3 + usize::from(self.kind != "tumble") };
        let with_offset = self.kind != "session" && exprs.len() == expected + 1;
        if exprs.len() != expected && !with_offset {
            return Err(plan_err(format!(
                "{kind} takes {} arguments after TABLE and DESCRIPTOR{}",
                expected - 2,
                if self.kind == "session" { "" } else { ", and an optional offset" }
            )));
        }
        let offset = offset_arg(&kind, exprs, expected)?;
        let table = string_arg(&kind, &exprs[0])?;
        let column = string_arg(&kind, &exprs[1])?;
        let find = |schemas: &TableSchemas| -> DfResult<Option<SchemaRef>> {
            let schemas = schemas.read().map_err(|_| DataFusionError::Internal("schemas lock poisoned".into()))?;
            Ok(schemas.get(&table).cloned())
        };
        let schema = match find(&self.tables)? {
            Some(s) => s,
            None => find(&self.views)?.ok_or_else(|| plan_err(format!("table or view '{table}' not found")))?,
        };
        match schema.field_with_name(&column).map(|f| f.data_type()) {
            Ok(DataType::Timestamp(..)) => {}
            Ok(other) => {
                return Err(plan_err(format!("{kind}: DESCRIPTOR column '{column}' must be a timestamp, not {other}")))
            }
            Err(_) => return Err(plan_err(format!("{kind}: table '{table}' has no column '{column}'"))),
        }
        let mut partition_keys = Vec::new();
        let window = match self.kind {
            "tumble" => WindowKind::Tumble { size: millis_arg(&kind, "size", &exprs[2])?, offset },
            "hop" => {
                let slide = millis_arg(&kind, "slide", &exprs[2])?;
                let size = millis_arg(&kind, "size", &exprs[3])?;
                if size % slide != 0 {
                    return Err(plan_err(format!(
                        "HOP: the size ({size} ms) must be a multiple of the slide ({slide} ms)"
                    )));
                }
                WindowKind::Hop { slide, size, offset }
            }
            "cumulate" => {
                let step = millis_arg(&kind, "step", &exprs[2])?;
                let max = millis_arg(&kind, "max size", &exprs[3])?;
                if max % step != 0 {
                    return Err(plan_err(format!(
                        "CUMULATE: the max size ({max} ms) must be a multiple of the step ({step} ms)"
                    )));
                }
                WindowKind::Cumulate { step, max, offset }
            }
            "session" => {
                let keys = string_arg(&kind, &exprs[2])?;
                partition_keys = keys.split(',').filter(|k| !k.is_empty()).map(str::to_string).collect();
                for key in &partition_keys {
                    if schema.field_with_name(key).is_err() {
                        return Err(plan_err(format!("SESSION: table '{table}' has no column '{key}' (PARTITION BY)")));
                    }
                }
                WindowKind::Session { gap: millis_arg(&kind, "gap", &exprs[3])? }
            }
            _ => return Err(DataFusionError::NotImplemented(format!("{kind} windows"))),
        };
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        for name in WINDOW_COLUMNS {
            if schema.field_with_name(name).is_ok() {
                return Err(plan_err(format!("{kind}: table '{table}' already has a column '{name}'")));
            }
            fields.push(Field::new(name, DataType::Timestamp(TimeUnit::Millisecond, None), false));
        }
        Ok(Arc::new(WindowTable {
            table,
            time_column: column,
            kind: window,
            partition_keys,
            schema: Arc::new(Schema::new(fields)),
        }))
    }
}

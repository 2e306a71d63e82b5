//! Temporal tables and processing time.
//!
//! The parser rewrites `t FOR SYSTEM_TIME AS OF s.ts` into `__weir_temporal('t', 's.ts')`;
//! DataFusion calls [`TemporalFunction`] with those, and it returns a [`TemporalTable`]: the
//! table's columns, marked so that the planner makes the join that reads it a lookup join or a
//! versioned join. `PROCTIME()` is the wall clock when a row is processed ([`ProcTime`]).

use std::sync::Arc;

use datafusion::arrow::array::TimestampMillisecondArray;
use datafusion::arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility};

use crate::windows::TableSchemas;

/// A table read `FOR SYSTEM_TIME AS OF time` (the other input's column, as written).
#[derive(Debug)]
pub struct TemporalTable {
    pub table: String,
    pub time: String,
    pub schema: SchemaRef,
}

crate::windows::planned_only_table!(TemporalTable, datafusion::datasource::TableType::View);

#[derive(Debug)]
pub struct TemporalFunction {
    pub tables: TableSchemas,
}

impl TableFunctionImpl for TemporalFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DfResult<Arc<dyn TableProvider>> {
        let text = |e: &Expr| match e {
            Expr::Literal(ScalarValue::Utf8(Some(s)), _) => Ok(s.clone()),
            other => Err(DataFusionError::Internal(format!("FOR SYSTEM_TIME AS OF: unexpected {other}"))),
        };
        let [table, time] = args.exprs() else {
            return Err(DataFusionError::Internal("FOR SYSTEM_TIME AS OF: two arguments expected".into()));
        };
        let (table, time) = (text(table)?, text(time)?);
        let schema = self
            .tables
            .read()
            .map_err(|_| DataFusionError::Internal("table schemas lock poisoned".into()))?
            .get(&table)
            .cloned()
            .ok_or_else(|| {
                DataFusionError::Plan(format!("table '{table}' not found (FOR SYSTEM_TIME AS OF reads a table)"))
            })?;
        Ok(Arc::new(TemporalTable { table, time, schema }))
    }
}

/// `PROCTIME()`: the time a row is processed, in milliseconds. Not deterministic: a replay
/// gives other values (a lookup join reads it only to know that it joins as of now).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ProcTime {
    signature: Signature,
}

impl Default for ProcTime {
    fn default() -> Self {
        Self { signature: Signature::nullary(Volatility::Volatile) }
    }
}

pub const PROCTIME: &str = "proctime";

impl ScalarUDFImpl for ProcTime {
    fn name(&self) -> &str {
        PROCTIME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Timestamp(TimeUnit::Millisecond, None))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or_default();
        Ok(ColumnarValue::Array(Arc::new(TimestampMillisecondArray::from(vec![now; args.number_rows]))))
    }
}

/// `NOW()`, `CURRENT_TIMESTAMP`, `LOCALTIMESTAMP` and `LOCALTIME` as Flink evaluates them in a stream:
/// the wall-clock time of each row as it is computed, not a constant of the query (which is
/// what DataFusion, planning a batch query, folds them into). Volatile, so nothing folds them
/// and the checks of exactly-once see them (`docs/exactly-once.md`).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct WallClock {
    name: &'static str,
    aliases: Vec<String>,
    /// With the session's zone (`TIMESTAMP_LTZ(3)`), or without (`TIMESTAMP(3)`).
    zoned: bool,
    /// Only the time of day (`LOCALTIME`, a `TIME(0)`).
    time_of_day: bool,
    signature: Signature,
}

impl WallClock {
    /// `NOW()` and `CURRENT_TIMESTAMP`: `TIMESTAMP_LTZ(3)`, as Flink's.
    pub fn now() -> Self {
        Self {
            name: "now",
            aliases: vec!["current_timestamp".into()],
            zoned: true,
            time_of_day: false,
            signature: Signature::nullary(Volatility::Volatile),
        }
    }

    /// `LOCALTIMESTAMP`: `TIMESTAMP(3)` in UTC, the session's zone.
    pub fn local() -> Self {
        Self {
            name: "localtimestamp",
            aliases: Vec::new(),
            zoned: false,
            time_of_day: false,
            signature: Signature::nullary(Volatility::Volatile),
        }
    }

    /// `LOCALTIME`: the time of day of `LOCALTIMESTAMP`, a `TIME(0)`.
    pub fn local_time() -> Self {
        Self { name: "localtime", time_of_day: true, ..Self::local() }
    }
}

impl ScalarUDFImpl for WallClock {
    fn name(&self) -> &str {
        self.name
    }

    fn aliases(&self) -> &[String] {
        &self.aliases
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        if self.time_of_day {
            return Ok(DataType::Time32(TimeUnit::Second));
        }
        Ok(DataType::Timestamp(TimeUnit::Millisecond, self.zoned.then(|| "UTC".into())))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or_default();
        if self.time_of_day {
            let seconds = (now.div_euclid(1000) % 86_400) as i32;
            let values = datafusion::arrow::array::Time32SecondArray::from(vec![seconds; args.number_rows]);
            return Ok(ColumnarValue::Array(Arc::new(values)));
        }
        let values = TimestampMillisecondArray::from(vec![now; args.number_rows]);
        Ok(ColumnarValue::Array(Arc::new(match self.zoned {
            true => values.with_timezone("UTC"),
            false => values,
        })))
    }
}

//! `'connector' = 'datagen'`: Flink's generator of random and sequence rows, with Flink's
//! options, made deterministic and rewindable.
//!
//! Flink's datagen draws from a random generator seeded anew in each run and stamps times from
//! the wall clock, so no two runs agree and a restart from a checkpoint gives other rows.
//! Weir's numbers the rows of the table `0, 1, 2, …` and makes row `n`'s values pure functions
//! of (`'seed'`, `n`, column): the same rows at any parallelism, after any restart. Its clock is
//! logical: row `n` is generated at `2023-01-01 00:00:00 UTC + n / rows-per-second`, and a
//! random time is that instant less a random part of `max-past`. `'rows-per-second'` paces the
//! generator by the wall clock only.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, BooleanArray, Float64Array, Int64Array, TimestampMillisecondArray};
use datafusion::arrow::compute::{cast, nullif};
use datafusion::arrow::datatypes::{DataType, Field, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use weir_core::{Result, Source, Split, TableDef, WeirError};

use crate::generator::{mix, strings, Blocks};

/// Rows per generated block (and batch).
const BLOCK: u64 = 1024;
/// The logical clock's start: 2023-01-01 00:00:00 UTC, as the nexmark generator's.
const BASE_MILLIS: i64 = 1_672_531_200_000;

const TABLE_OPTIONS: &[&str] = &["connector", "rows-per-second", "number-of-rows", "seed"];
const FIELD_OPTIONS: &[&str] = &["kind", "min", "max", "max-past", "length", "var-len", "start", "end", "null-rate"];

/// How one column is generated.
#[derive(Debug, Clone)]
enum Column {
    /// `start + n`, up to `end`.
    Sequence { start: i64, end: i64 },
    /// Uniform in `min..=max` (numbers), `length` characters (text), up to `max_past` ms
    /// before the logical clock (times).
    Random { min: f64, max: f64, length: u64, var_len: bool, max_past: i64 },
}

#[derive(Debug, Clone)]
struct Spec {
    column: Column,
    null_rate: f64,
}

/// A number option of column `field`, if given.
fn field_number(table: &TableDef, field: &str, key: &str) -> Result<Option<f64>> {
    let name = format!("fields.{field}.{key}");
    match table.options.get(&name) {
        None => Ok(None),
        Some(v) => v.trim().parse::<f64>().map(Some).map_err(|_| {
            WeirError::user(format!("table '{}': '{name}' must be a number, not '{v}'", table.name))
                .at(table.options.location(&name))
        }),
    }
}

fn table_number(table: &TableDef, key: &str) -> Result<Option<u64>> {
    match table.options.get(key) {
        None => Ok(None),
        Some(v) => v.trim().parse::<u64>().map(Some).map_err(|_| {
            WeirError::user(format!("table '{}': '{key}' must be a whole number, not '{v}'", table.name))
                .at(table.options.location(key))
        }),
    }
}

/// The range of values a type holds, as the default `min` and `max` of a random column.
fn type_range(t: &DataType) -> (f64, f64) {
    match t {
        DataType::Int8 => (i8::MIN as f64, i8::MAX as f64),
        DataType::Int16 => (i16::MIN as f64, i16::MAX as f64),
        DataType::Int32 => (i32::MIN as f64, i32::MAX as f64),
        DataType::Float32 => (f32::MIN as f64, f32::MAX as f64),
        DataType::Float64 => (f64::MIN, f64::MAX),
        DataType::Decimal128(p, s) => {
            let max = 10f64.powi(*p as i32 - *s as i32) - 10f64.powi(-(*s as i32));
            (-max, max)
        }
        _ => (i64::MIN as f64, i64::MAX as f64),
    }
}

fn spec_of(table: &TableDef, field: &Field) -> Result<Spec> {
    let name = field.name();
    let kind_key = format!("fields.{name}.kind");
    let null_rate = field_number(table, name, "null-rate")?.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&null_rate) {
        return Err(WeirError::user(format!(
            "table '{}': 'fields.{name}.null-rate' is between 0 and 1, not {null_rate}",
            table.name
        )));
    }
    let t = field.data_type();
    let column = match table.options.get(&kind_key).unwrap_or("random") {
        "sequence" => {
            if !(t.is_integer() || matches!(t, DataType::Utf8 | DataType::Decimal128(..) | DataType::Float64)) {
                return Err(WeirError::user(format!(
                    "table '{}': column '{name}' is {t}, which datagen cannot fill with a sequence",
                    table.name
                ))
                .at(table.options.location(&kind_key)));
            }
            let bound = |key: &str| -> Result<i64> {
                let v = field_number(table, name, key)?.ok_or_else(|| {
                    WeirError::user(format!("table '{}': a sequence column needs 'fields.{name}.{key}'", table.name))
                        .at(table.options.location(&kind_key))
                })?;
                Ok(v as i64)
            };
            let (start, end) = (bound("start")?, bound("end")?);
            if end < start {
                return Err(WeirError::user(format!(
                    "table '{}': 'fields.{name}.end' ({end}) is before 'fields.{name}.start' ({start})",
                    table.name
                )));
            }
            Column::Sequence { start, end }
        }
        "random" => {
            let (low, high) = type_range(t);
            let min = field_number(table, name, "min")?.unwrap_or(low);
            let max = field_number(table, name, "max")?.unwrap_or(high);
            if max < min {
                return Err(WeirError::user(format!(
                    "table '{}': 'fields.{name}.max' ({max}) is below 'fields.{name}.min' ({min})",
                    table.name
                )));
            }
            let max_past = match table.options.get(&format!("fields.{name}.max-past")) {
                None => 0,
                Some(v) => weir_core::parse_duration(v)
                    .map_err(|e| e.context(format!("table '{}': 'fields.{name}.max-past'", table.name)))?
                    .as_millis() as i64,
            };
            let length = field_number(table, name, "length")?.unwrap_or(100.0) as u64;
            let var_len = table.options.get(&format!("fields.{name}.var-len")) == Some("true");
            Column::Random { min, max, length, var_len, max_past }
        }
        other => {
            return Err(WeirError::user(format!(
                "table '{}': '{kind_key}' is 'random' or 'sequence', not '{other}'",
                table.name
            ))
            .at(table.options.location(&kind_key)))
        }
    };
    let supported = matches!(
        t,
        DataType::Boolean
            | DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::Float32
            | DataType::Float64
            | DataType::Decimal128(..)
            | DataType::Utf8
            | DataType::Binary
            | DataType::Date32
            | DataType::Timestamp(..)
    );
    if !supported {
        return Err(WeirError::not_supported(format!("datagen column '{name}' of table '{}' of type {t}", table.name)));
    }
    Ok(Spec { column, null_rate })
}

/// Check a `datagen` table: known options, each naming a column, with values that make sense.
pub fn validate(table: &TableDef) -> Result<()> {
    for (key, _) in table.options.iter() {
        if TABLE_OPTIONS.contains(&key) || weir_core::table::ENGINE_OPTIONS.contains(&key) {
            continue;
        }
        let field_option = key.strip_prefix("fields.").and_then(|rest| rest.rsplit_once('.'));
        let known = field_option.is_some_and(|(column, option)| {
            table.schema.field_with_name(column).is_ok() && FIELD_OPTIONS.contains(&option)
        });
        if !known {
            return Err(WeirError::user(format!(
                "table '{}': unknown option '{key}'; options here are: {}, and fields.<column>.{{{}}}",
                table.name,
                TABLE_OPTIONS.join(", "),
                FIELD_OPTIONS.join(", ")
            ))
            .at(table.options.location(key)));
        }
    }
    if table_number(table, "rows-per-second")? == Some(0) {
        return Err(WeirError::user(format!("table '{}': 'rows-per-second' must be positive", table.name)));
    }
    table_number(table, "number-of-rows")?;
    table_number(table, "seed")?;
    for field in table.schema.fields() {
        spec_of(table, field)?;
    }
    Ok(())
}

/// Rows in all: `number-of-rows`, and no more than the shortest sequence.
fn total_rows(table: &TableDef) -> Result<Option<u64>> {
    let mut total = table_number(table, "number-of-rows")?;
    for field in table.schema.fields() {
        if let Column::Sequence { start, end } = spec_of(table, field)?.column {
            let len = (end - start) as u64 + 1;
            total = Some(total.map_or(len, |t| t.min(len)));
        }
    }
    Ok(total)
}

/// Whether a `datagen` table ends: with `number-of-rows` or a sequence column.
pub fn bounded(table: &TableDef) -> bool {
    total_rows(table).ok().flatten().is_some()
}

pub struct DatagenSource {
    schema: SchemaRef,
    specs: Vec<Spec>,
    /// The columns' indices in the table: each column's values depend on it, not on the
    /// projection.
    indices: Vec<u64>,
    seed: u64,
    total: Option<u64>,
    /// Milliseconds of the logical clock per row.
    millis_per_row: f64,
    blocks: Blocks,
}

impl DatagenSource {
    pub fn new(table: &TableDef, projection: Option<Vec<usize>>, split: Split) -> Result<Self> {
        let projection = projection.unwrap_or_else(|| (0..table.schema.fields().len()).collect());
        let schema = Arc::new(table.schema.project(&projection)?);
        let specs = schema.fields().iter().map(|f| spec_of(table, f)).collect::<Result<Vec<_>>>()?;
        let rate = table_number(table, "rows-per-second")?.unwrap_or(10_000);
        Ok(Self {
            schema,
            specs,
            indices: projection.iter().map(|i| *i as u64).collect(),
            seed: table_number(table, "seed")?.unwrap_or(0),
            total: total_rows(table)?,
            millis_per_row: 1000.0 / rate as f64,
            blocks: Blocks::new(split, Some(rate)),
        })
    }

    fn rand(&self, n: u64, column: u64) -> u64 {
        mix(self.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ mix(n.wrapping_mul(1024).wrapping_add(column)))
    }

    /// A uniform number in [0, 1) for row `n`, column `column`, draw `draw`.
    fn unit(&self, n: u64, column: u64, draw: u64) -> f64 {
        (self.rand(n, column * 8 + draw) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    fn column(&self, c: usize, ns: &[u64]) -> Result<ArrayRef> {
        let field = self.schema.field(c);
        let index = self.indices[c];
        let spec = &self.specs[c];
        let t = field.data_type();
        let array: ArrayRef = match &spec.column {
            Column::Sequence { start, .. } => {
                let values = Int64Array::from_iter_values(ns.iter().map(|n| start + *n as i64));
                if *t == DataType::Utf8 {
                    cast(&values, t)?
                } else {
                    Arc::new(values)
                }
            }
            Column::Random { min, max, length, var_len, max_past } => match t {
                DataType::Boolean => {
                    Arc::new(BooleanArray::from_iter(ns.iter().map(|n| Some(self.rand(*n, index * 8) & 1 == 1))))
                }
                DataType::Float32 | DataType::Float64 | DataType::Decimal128(..) => {
                    Arc::new(Float64Array::from_iter_values(
                        // Weighted so that the type's whole range does not overflow.
                        ns.iter().map(|n| {
                            let u = self.unit(*n, index, 0);
                            min * (1.0 - u) + max * u
                        }),
                    ))
                }
                DataType::Utf8 | DataType::Binary => {
                    // Hexadecimal digits, as Flink's random strings.
                    let text = strings(ns, |n, out| {
                        let len = if *var_len { 1 + self.rand(n, index * 8 + 1) % length.max(&1) } else { *length };
                        let mut bits = self.rand(n, index * 8 + 2);
                        for i in 0..len {
                            if i > 0 && i % 16 == 0 {
                                bits = mix(bits ^ i);
                            }
                            out.push(b"0123456789abcdef"[(bits >> (4 * (i % 16)) & 15) as usize]);
                        }
                    });
                    if *t == DataType::Utf8 {
                        text
                    } else {
                        cast(&text, t)?
                    }
                }
                DataType::Date32 | DataType::Timestamp(..) => {
                    let at = |n: u64| {
                        let now = BASE_MILLIS + (n as f64 * self.millis_per_row) as i64;
                        now - (self.unit(n, index, 3) * *max_past as f64) as i64
                    };
                    let millis = TimestampMillisecondArray::from_iter_values(ns.iter().map(|n| at(*n)));
                    let millis: ArrayRef = Arc::new(millis);
                    match t {
                        DataType::Date32 => {
                            cast(&cast(&millis, &DataType::Timestamp(TimeUnit::Millisecond, None))?, t)?
                        }
                        _ => millis,
                    }
                }
                _ => {
                    // Integers: uniform over min..=max.
                    let span = (max - min).floor() as u128 + 1;
                    Arc::new(Int64Array::from_iter_values(ns.iter().map(|n| {
                        let pick = (self.rand(*n, index * 8) as u128 * span) >> 64;
                        (*min as i128 + pick as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64
                    })))
                }
            },
        };
        let array = if array.data_type() == t { array } else { cast(&array, t)? };
        if spec.null_rate <= 0.0 {
            return Ok(array);
        }
        let nulls = BooleanArray::from_iter(ns.iter().map(|n| Some(self.unit(*n, index, 5) < spec.null_rate)));
        Ok(nullif(&array, &nulls)?)
    }
}

#[async_trait]
impl Source for DatagenSource {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        let total = self.total;
        let Some(block) = self.blocks.next(move |b| total.is_some_and(|t| b * BLOCK >= t)).await else {
            return Ok(None);
        };
        let end = total.map_or(u64::MAX, |t| t.min((block + 1) * BLOCK));
        let ns: Vec<u64> = (block * BLOCK..end.min((block + 1) * BLOCK)).collect();
        let columns = (0..self.schema.fields().len()).map(|c| self.column(c, &ns)).collect::<Result<Vec<_>>>()?;
        self.blocks.generated(ns.len() as u64);
        let options = RecordBatchOptions::new().with_row_count(Some(ns.len()));
        Ok(Some(RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)?))
    }

    crate::generator::rewind_by_blocks!();
}

//! Chunks written as text, for tests: one line of column types, then one line per row, its
//! op first (Flink's short form). RisingWave's `StreamChunk::from_pretty` is the model.
//!
//! ```text
//!     I  T
//!     +I 1 a
//!     -U 1 a
//!     +U 1 b
//!     -D 2 .
//! ```
//!
//! Types: `I` BIGINT, `i` INT, `F` DOUBLE, `T` STRING, `B` BOOLEAN, `TS` TIMESTAMP(3) (a
//! value in milliseconds); `name:I` names a column (else `c0`, `c1`, …). `.` is NULL.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, StringArray, TimestampMillisecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::ArrayFormatter;

use crate::{Chunk, Op, Result, WeirError};

fn op_of(token: &str) -> Result<Op> {
    Ok(match token {
        "+I" | "+" => Op::Insert,
        "-U" => Op::UpdateBefore,
        "+U" => Op::UpdateAfter,
        "-D" | "-" => Op::Delete,
        other => return Err(WeirError::internal(format!("fixture: '{other}' is not an op"))),
    })
}

fn column(data_type: &DataType, cells: &[Option<&str>]) -> Result<ArrayRef> {
    let bad = |c: &str| WeirError::internal(format!("fixture: '{c}' is not a {data_type}"));
    let int = |c: &&str| c.parse::<i64>().map_err(|_| bad(c));
    Ok(match data_type {
        DataType::Int64 => {
            Arc::new(cells.iter().map(|c| c.as_ref().map(int).transpose()).collect::<Result<Int64Array>>()?)
        }
        DataType::Int32 => Arc::new(
            cells
                .iter()
                .map(|c| c.as_ref().map(|c| c.parse::<i32>().map_err(|_| bad(c))).transpose())
                .collect::<Result<Int32Array>>()?,
        ),
        DataType::Float64 => Arc::new(
            cells
                .iter()
                .map(|c| c.as_ref().map(|c| c.parse::<f64>().map_err(|_| bad(c))).transpose())
                .collect::<Result<Float64Array>>()?,
        ),
        DataType::Boolean => Arc::new(
            cells
                .iter()
                .map(|c| c.as_ref().map(|c| c.parse::<bool>().map_err(|_| bad(c))).transpose())
                .collect::<Result<BooleanArray>>()?,
        ),
        DataType::Timestamp(..) => Arc::new(
            cells.iter().map(|c| c.as_ref().map(int).transpose()).collect::<Result<TimestampMillisecondArray>>()?,
        ),
        _ => Arc::new(cells.iter().copied().collect::<StringArray>()),
    })
}

impl Chunk {
    /// A chunk from its text form (see the module documentation). For tests: a malformed
    /// fixture is an error, never a panic.
    pub fn from_pretty(text: &str) -> Result<Chunk> {
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        let header = lines.next().ok_or_else(|| WeirError::internal("fixture: no header"))?;
        let mut fields = Vec::new();
        for (i, token) in header.split_whitespace().enumerate() {
            let (name, ty) = token.split_once(':').map_or((format!("c{i}"), token), |(n, t)| (n.to_string(), t));
            let data_type = match ty {
                "I" => DataType::Int64,
                "i" => DataType::Int32,
                "F" => DataType::Float64,
                "T" => DataType::Utf8,
                "B" => DataType::Boolean,
                "TS" => DataType::Timestamp(TimeUnit::Millisecond, None),
                other => return Err(WeirError::internal(format!("fixture: unknown type '{other}'"))),
            };
            fields.push(Field::new(name, data_type, true));
        }
        let mut ops = Vec::new();
        let mut cells: Vec<Vec<Option<&str>>> = vec![Vec::new(); fields.len()];
        for line in lines {
            let mut tokens = line.split_whitespace();
            ops.push(op_of(tokens.next().unwrap_or_default())?);
            let row: Vec<&str> = tokens.collect();
            if row.len() != fields.len() {
                return Err(WeirError::internal(format!("fixture: '{line}' has not {} values", fields.len())));
            }
            for (c, v) in cells.iter_mut().zip(row) {
                c.push((v != ".").then_some(v));
            }
        }
        let columns = fields.iter().zip(&cells).map(|(f, c)| column(f.data_type(), c)).collect::<Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
        Ok(Chunk::changes(batch, &ops))
    }

    /// The rows as text, one `op v1 v2 …` line each, NULL as `.`: what tests compare.
    pub fn to_pretty(&self) -> Result<String> {
        let options = crate::display_options().with_null(".");
        let formatters = self
            .batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let mut out = String::new();
        for row in 0..self.num_rows() {
            out.push_str(self.op(row).short());
            for f in &formatters {
                out.push(' ');
                out.push_str(&f.value(row).to_string());
            }
            out.push('\n');
        }
        Ok(out)
    }
}

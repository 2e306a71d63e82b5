//! Records of a repartition topic. A data record is one chunk for one partition, as an Arrow
//! IPC stream (the batch, plus an `Int8` column of ops when the chunk is a changelog): rows
//! cross the cut as columns, with no per-row encoding. A watermark marker is a record with
//! the header [`MARKER`] and, as value, the upstream task's number and its watermark.

use std::sync::Arc;

use datafusion::arrow::array::{Array, Int8Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use weir_core::{Chunk, Op, Result, WeirError};

/// The header that marks a watermark marker (a control record, not rows).
pub const MARKER: &str = "weir-watermark";
const OPS: &str = "__weir_op";

pub fn encode_chunk(chunk: &Chunk) -> Result<Vec<u8>> {
    let batch = match chunk.op_codes() {
        None => chunk.batch.clone(),
        Some(ops) => {
            let mut fields: Vec<Arc<Field>> = chunk.batch.schema().fields().iter().cloned().collect();
            fields.push(Arc::new(Field::new(OPS, DataType::Int8, false)));
            let mut columns = chunk.batch.columns().to_vec();
            columns.push(ops.clone() as Arc<dyn Array>);
            RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?
        }
    };
    let mut out = Vec::new();
    let mut writer = StreamWriter::try_new(&mut out, &batch.schema())?;
    writer.write(&batch)?;
    writer.finish()?;
    drop(writer);
    Ok(out)
}

/// A data record's rows in `schema`, and their ops for a changelog.
pub fn decode_chunk(bytes: &[u8], schema: &SchemaRef) -> Result<(RecordBatch, Option<Vec<Op>>)> {
    let damaged = |why: String| WeirError::internal(format!("a record of a repartition topic is damaged: {why}"));
    let mut reader = StreamReader::try_new(bytes, None).map_err(|e| damaged(e.to_string()))?;
    let batch = match reader.next() {
        Some(b) => b.map_err(|e| damaged(e.to_string()))?,
        None => return Err(damaged("no rows".into())),
    };
    let width = schema.fields().len();
    let ops = match batch.num_columns() {
        n if n == width => None,
        n if n == width + 1 => {
            let codes =
                batch.column(width).as_any().downcast_ref::<Int8Array>().ok_or_else(|| damaged("ops".into()))?;
            let ops = codes.values().iter().map(|c| Op::from_code(*c).ok_or_else(|| damaged("an op".into())));
            Some(ops.collect::<Result<Vec<Op>>>()?)
        }
        n => return Err(damaged(format!("{n} columns where the plan has {width}"))),
    };
    let columns = batch.columns()[..width].to_vec();
    Ok((RecordBatch::try_new(schema.clone(), columns)?, ops))
}

pub fn marker(task: usize, watermark: i64) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&(task as u64).to_be_bytes());
    out[8..].copy_from_slice(&watermark.to_be_bytes());
    out
}

pub fn parse_marker(bytes: &[u8]) -> Option<(usize, i64)> {
    let task = u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
    let watermark = i64::from_be_bytes(bytes.get(8..16)?.try_into().ok()?);
    Some((task as usize, watermark))
}

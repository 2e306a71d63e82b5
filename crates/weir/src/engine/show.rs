//! The tables of `SHOW JOBS`, `SHOW JOB` and `SHOW CHECKPOINTS`.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use weir_core::Result;

pub(super) fn jobs_batch(
    jobs: &[weir_runtime::JobStatus],
    guarantees: &std::collections::HashMap<u64, crate::guarantees::Report>,
) -> Result<RecordBatch> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
        Field::new("state", DataType::Utf8, false),
        Field::new("rows_read", DataType::Int64, false),
        Field::new("rows_written", DataType::Int64, false),
        Field::new("records_skipped", DataType::Int64, true),
        Field::new("error", DataType::Utf8, true),
        Field::new("guarantee", DataType::Utf8, false),
    ]));
    let read = |s: &weir_runtime::JobStatus| s.rows_read() as i64;
    let written = |s: &weir_runtime::JobStatus| s.rows_written() as i64;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(jobs.iter().map(|j| j.id as i64))),
        Arc::new(StringArray::from_iter_values(jobs.iter().map(|j| j.name.as_str()))),
        Arc::new(StringArray::from_iter_values(jobs.iter().map(|j| j.state.name()))),
        Arc::new(Int64Array::from_iter_values(jobs.iter().map(read))),
        Arc::new(Int64Array::from_iter_values(jobs.iter().map(written))),
        Arc::new(Int64Array::from_iter_values(jobs.iter().map(|j| j.records_skipped() as i64))),
        Arc::new(StringArray::from_iter(jobs.iter().map(|j| match &j.state {
            weir_runtime::JobState::Failed(e) => Some(e.to_string()),
            _ => None,
        }))),
        // A query's rows go to its caller, as they come: nothing is replayed.
        Arc::new(StringArray::from_iter_values(
            jobs.iter().map(|j| guarantees.get(&j.id).map_or("none (to the caller)", |r| r.delivered.as_str())),
        )),
    ];
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// One row per operator task of a job.
/// Each operator's metrics, then the job's guarantee as `EXPLAIN INSERT` shows it (one line
/// a row, in the first column).
pub(super) fn operators_batch(status: &weir_runtime::JobStatus, guarantee: &[String]) -> Result<RecordBatch> {
    let ops = &status.operators;
    let schema = Arc::new(Schema::new(vec![
        Field::new("operator", DataType::Utf8, false),
        Field::new("rows_in", DataType::Int64, true),
        Field::new("rows_out", DataType::Int64, true),
        Field::new("batches_in", DataType::Int64, true),
        Field::new("batches_out", DataType::Int64, true),
        Field::new("watermark", DataType::Utf8, true),
        Field::new("backpressure_ms", DataType::Int64, true),
        Field::new("records_skipped", DataType::Int64, true),
        Field::new("late_rows", DataType::Int64, true),
    ]));
    let blank = || std::iter::repeat_n(None, guarantee.len());
    let int = |f: &dyn Fn(&weir_core::metrics::MetricsSnapshot) -> u64| {
        Arc::new(Int64Array::from_iter(ops.iter().map(|o| Some(f(o) as i64)).chain(blank()))) as ArrayRef
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            ops.iter().map(|o| o.name.as_str()).chain(guarantee.iter().map(String::as_str)),
        )),
        int(&|o| o.rows_in),
        int(&|o| o.rows_out),
        int(&|o| o.batches_in),
        int(&|o| o.batches_out),
        Arc::new(StringArray::from_iter(
            ops.iter().map(|o| o.watermark.map(watermark_text)).chain(std::iter::repeat_n(None, guarantee.len())),
        )),
        int(&|o| o.backpressure_ms),
        int(&|o| o.records_skipped),
        int(&|o| o.late_rows),
    ];
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// A watermark for people: its time, or the end of input.
fn watermark_text(millis: i64) -> String {
    if millis == weir_core::Watermark::END_OF_TIME.0 {
        return "end of input".to_string();
    }
    match datafusion::arrow::temporal_conversions::timestamp_ms_to_datetime(millis) {
        Some(t) => t.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
        None => millis.to_string(),
    }
}

/// One row per completed checkpoint of a job.
pub(super) fn checkpoints_batch(status: &weir_runtime::JobStatus) -> Result<RecordBatch> {
    let cps = &status.checkpoints;
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("duration_ms", DataType::Int64, false),
        Field::new("bytes_written", DataType::Int64, false),
        Field::new("bytes_referenced", DataType::Int64, false),
    ]));
    let int = |f: &dyn Fn(&weir_runtime::checkpoint::CheckpointStats) -> u64| {
        Arc::new(Int64Array::from_iter_values(cps.iter().map(|c| f(c) as i64))) as ArrayRef
    };
    let columns =
        vec![int(&|c| c.id), int(&|c| c.duration_ms), int(&|c| c.bytes_written), int(&|c| c.bytes_referenced)];
    Ok(RecordBatch::try_new(schema, columns)?)
}

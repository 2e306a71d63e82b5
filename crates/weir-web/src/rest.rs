//! The REST API in JSON, on Flink's paths where Flink has one: `/overview`, `/jobs`,
//! `/jobs/overview`, `/jobs/{id}` (with its plan and live per-vertex metrics),
//! `/jobs/{id}/checkpoints`, `/jobs/{id}/exceptions`; and Weir's own
//! `/jobs/{id}/guarantee`.

use serde_json::{json, Value};
use weir_runtime::{JobState, JobStatus};

use crate::jobs::{now_ms, Jobs, Watched};
use crate::prometheus::split_name;

fn state(s: &JobState) -> &'static str {
    s.name()
}

/// `/overview`: how many jobs are in each state.
pub(crate) fn overview(jobs: &Jobs) -> Value {
    let statuses: Vec<JobStatus> = jobs.all().iter().map(|j| j.handle.status()).collect();
    let count = |name: &str| statuses.iter().filter(|s| s.state.name() == name).count();
    json!({
        "jobs-running": count("RUNNING"),
        "jobs-finished": count("FINISHED"),
        "jobs-cancelled": count("CANCELLED") + count("STOPPED"),
        "jobs-failed": count("FAILED"),
        "weir-version": env!("CARGO_PKG_VERSION"),
    })
}

/// `/jobs`: ids and states; `/jobs/overview`: a line per job.
pub(crate) fn list(jobs: &Jobs, detailed: bool) -> Value {
    let all: Vec<Value> = jobs
        .all()
        .iter()
        .map(|j| {
            let s = j.handle.status();
            if !detailed {
                return json!({ "id": j.id.to_string(), "status": state(&s.state) });
            }
            let mut line = header(j, &s);
            line["rows-read"] = json!(s.rows_read());
            line["rows-written"] = json!(s.rows_written());
            line["checkpoints"] = json!(s.checkpoint_counts.completed_count);
            line
        })
        .collect();
    json!({ "jobs": all })
}

/// What every view of a job starts with.
fn header(job: &Watched, s: &JobStatus) -> Value {
    json!({
        "jid": job.id.to_string(),
        "name": s.name,
        "state": state(&s.state),
        "start-time": s.started_at_ms,
        "duration": s.elapsed.as_millis() as u64,
        "restarts": s.restarts,
        "guarantee": job.delivered,
        "error": error_of(s),
    })
}

fn error_of(s: &JobStatus) -> Option<String> {
    match &s.state {
        JobState::Failed(e) => Some(e.to_string()),
        _ => None,
    }
}

/// `/jobs/{id}`: the job, its plan, and each vertex with its tasks' live metrics.
pub(crate) fn job(jobs: &Jobs, job: &Watched) -> Value {
    let s = job.handle.status();
    let now = now_ms();
    let vertices: Vec<Value> = s
        .graph
        .vertices
        .iter()
        .map(|v| {
            let ops: Vec<&weir_core::metrics::MetricsSnapshot> =
                s.operators.iter().filter(|o| o.place.vertex == v.id).collect();
            // A vertex's rows in are its first operator's, its rows out its last's.
            let first = ops.iter().map(|o| split_name(&o.name).0).next().unwrap_or_default().to_string();
            let last = ops.iter().map(|o| split_name(&o.name).0).last().unwrap_or_default().to_string();
            let of = |name: &str| -> Vec<&weir_core::metrics::MetricsSnapshot> {
                ops.iter().filter(|o| split_name(&o.name).0 == name).copied().collect()
            };
            let rates = |name: &str| of(name).iter().map(|o| jobs.rate(job.id, &o.name)).collect::<Vec<_>>();
            // A source vertex's rows in are the rows its source read.
            let is_source = first.starts_with("Source: ") || first == "Values";
            let records_in: u64 = of(&first).iter().map(|o| if is_source { o.rows_out } else { o.rows_in }).sum();
            let records_out: u64 = of(&last).iter().map(|o| o.rows_out).sum();
            let in_rate: f64 = rates(&first).iter().map(|r| if is_source { r.records_out } else { r.records_in }).sum();
            let out_rate: f64 = rates(&last).iter().map(|r| r.records_out).sum();
            // Backpressure is counted on each task's first operator; the vertex shows its
            // most backpressured task, as Flink's UI does.
            let backpressured = rates(&first).iter().map(|r| r.backpressured_ms).fold(0.0, f64::max);
            let busy = ops.iter().map(|o| jobs.rate(job.id, &o.name).busy_ms).fold(0.0, f64::max);
            let watermark = of(&first).iter().filter_map(|o| o.watermark).filter(|w| *w > i64::MIN / 2).min();
            let state_bytes: u64 = ops.iter().map(|o| o.state_bytes).sum();
            let partitions: Vec<Value> = ops
                .iter()
                .flat_map(|o| o.partitions.iter().map(move |p| (split_name(&o.name).1, p)))
                .map(|(task, p)| {
                    json!({ "subtask": task, "topic": p.topic, "partition": p.partition,
                            "current-offset": p.position, "end-offset": p.end, "lag": p.lag() })
                })
                .collect();
            let subtasks: Vec<Value> = ops
                .iter()
                .map(|o| {
                    let (name, task) = split_name(&o.name);
                    let r = jobs.rate(job.id, &o.name);
                    json!({
                        "operator": name, "subtask": task, "operator-id": o.place.id,
                        "read-records": o.rows_in, "write-records": o.rows_out,
                        "read-records-per-second": r.records_in, "write-records-per-second": r.records_out,
                        "busy-ms-per-second": r.busy_ms, "backpressured-ms-per-second": r.backpressured_ms,
                        "watermark": o.watermark, "late-records-dropped": o.late_rows,
                        "records-skipped": o.records_skipped, "state-size": o.state_bytes,
                        "commits": o.commits, "last-commit-ms": o.last_commit_nanos as f64 / 1e6,
                        "alignment-ms": o.alignment_nanos as f64 / 1e6,
                    })
                })
                .collect();
            json!({
                "id": v.id.to_string(),
                "name": v.name,
                "parallelism": v.parallelism,
                "operator-ids": v.operators,
                "metrics": {
                    "read-records": records_in,
                    "write-records": records_out,
                    "read-records-per-second": in_rate,
                    "write-records-per-second": out_rate,
                    "backpressured-ms-per-second": backpressured,
                    "busy-ms-per-second": busy,
                    "watermark": watermark,
                    "watermark-lag-ms": watermark.map(|w| (now - w).max(0)),
                    "state-size": state_bytes,
                },
                "kafka-partitions": partitions,
                "subtasks": subtasks,
            })
        })
        .collect();
    let nodes: Vec<Value> = s
        .graph
        .vertices
        .iter()
        .map(|v| {
            let inputs: Vec<Value> = s
                .graph
                .edges
                .iter()
                .filter(|e| e.target == v.id)
                .enumerate()
                .map(|(num, e)| json!({ "num": num, "id": e.source.to_string(), "ship_strategy": e.ship_strategy }))
                .collect();
            json!({ "id": v.id.to_string(), "parallelism": v.parallelism, "description": v.name, "inputs": inputs })
        })
        .collect();
    let mut out = header(job, &s);
    out["now"] = json!(now);
    out["vertices"] = json!(vertices);
    out["plan"] = json!({ "jid": job.id.to_string(), "name": s.name, "nodes": nodes });
    out
}

/// `/jobs/{id}/checkpoints`: counts, the latest, and the history (the last 100).
pub(crate) fn checkpoints(job: &Watched) -> Value {
    let s = job.handle.status();
    let c = &s.checkpoint_counts;
    let entry = |k: &weir_runtime::checkpoint::CheckpointStats| {
        json!({
            "id": k.id,
            "status": "COMPLETED",
            "latest_ack_timestamp": k.completed_at_ms,
            "end_to_end_duration": k.duration_ms,
            "checkpointed_size": k.bytes_written,
            "state_size": k.bytes_written + k.bytes_referenced,
        })
    };
    let history: Vec<Value> = s.checkpoints.iter().rev().map(entry).collect();
    let durations: Vec<u64> = s.checkpoints.iter().map(|k| k.duration_ms).collect();
    let summary = |v: &[u64]| match (v.iter().min(), v.iter().max()) {
        (Some(min), Some(max)) => json!({ "min": min, "max": max, "avg": v.iter().sum::<u64>() / v.len() as u64 }),
        _ => Value::Null,
    };
    json!({
        "counts": {
            "completed": c.completed_count,
            "failed": c.failed_count,
            "total": c.completed_count + c.failed_count,
        },
        "summary": { "end_to_end_duration": summary(&durations) },
        "latest": {
            "completed": s.checkpoints.last().map(entry),
            "failed": c.last_failure.as_ref().map(|(id, why)| json!({ "id": id, "failure_message": why })),
        },
        "history": history,
    })
}

/// `/jobs/{id}/exceptions`: the attempts' failures, newest first.
pub(crate) fn exceptions(job: &Watched) -> Value {
    let s = job.handle.status();
    let entries: Vec<Value> = s
        .exceptions
        .iter()
        .rev()
        .map(|e| {
            json!({
                "exceptionName": e.error.kind.name(),
                "message": e.error.to_string(),
                "timestamp": e.at_ms,
                "restarted": e.restarted,
            })
        })
        .collect();
    let root = s.exceptions.last();
    json!({
        "root-exception": root.map(|e| e.error.to_string()),
        "timestamp": root.map(|e| e.at_ms),
        "exceptionHistory": { "entries": entries, "truncated": false },
    })
}

/// `/jobs/{id}/guarantee`: what `EXPLAIN INSERT` says about the job's delivery.
pub(crate) fn guarantee(job: &Watched) -> Value {
    json!({ "delivered": job.delivered, "report": job.guarantee })
}

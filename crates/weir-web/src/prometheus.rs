//! `/metrics`: every watched job's counters in Prometheus' text format (OpenMetrics), through
//! one collector that reads them at each scrape.
//!
//! Names follow Flink's metrics where Flink has one (`numRecordsIn`, `currentInputWatermark`,
//! `busyTimeMsPerSecond`, `numberOfCompletedCheckpoints`…), after a `weir_<scope>_` prefix as
//! Flink's Prometheus reporter puts `flink_taskmanager_job_task_operator_`. As Flink's
//! reporter does, counts are gauges, so that its names stay as they are.

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::jobs::{now_ms, Jobs};

type Labels = Vec<(String, String)>;

/// One metric: its name, help, and a value per label set.
struct Family {
    name: &'static str,
    help: &'static str,
    samples: Vec<(Labels, f64)>,
}

#[derive(Debug)]
pub(crate) struct Collector {
    pub(crate) jobs: Jobs,
}

impl prometheus_client::collector::Collector for Collector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for family in families(&self.jobs) {
            if family.samples.is_empty() {
                continue;
            }
            let mut metric = encoder.encode_descriptor(family.name, family.help, None, MetricType::Gauge)?;
            for (labels, value) in &family.samples {
                ConstGauge::new(*value).encode(metric.encode_family(labels)?)?;
            }
        }
        Ok(())
    }
}

/// The text of `/metrics`.
pub(crate) fn render(jobs: &Jobs) -> Result<String, std::fmt::Error> {
    let mut registry = prometheus_client::registry::Registry::with_prefix("weir");
    registry.register_collector(Box::new(Collector { jobs: jobs.clone() }));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    Ok(text)
}

fn families(jobs: &Jobs) -> Vec<Family> {
    let mut out: Vec<Family> = Vec::new();
    let mut add = |name: &'static str, help: &'static str, labels: &Labels, value: f64| match out
        .iter_mut()
        .find(|f| f.name == name)
    {
        Some(f) => f.samples.push((labels.clone(), value)),
        None => out.push(Family { name, help, samples: vec![(labels.clone(), value)] }),
    };
    let now = now_ms();
    for job in jobs.all() {
        let s = job.handle.status();
        let job_labels: Labels = vec![("job_id".into(), job.id.to_string()), ("job_name".into(), s.name.clone())];
        let running = matches!(s.state, weir_runtime::JobState::Running);
        add("job_running", "1 while the job runs, else 0.", &job_labels, f64::from(u8::from(running)));
        add(
            "job_uptime",
            "Milliseconds since the job started (Flink: uptime).",
            &job_labels,
            s.elapsed.as_millis() as f64,
        );
        add("job_numRestarts", "Restarts after failures (Flink: numRestarts).", &job_labels, f64::from(s.restarts));
        if let Some(last) = s.exceptions.last() {
            let mut labels = job_labels.clone();
            labels.push(("kind".into(), last.error.kind.name().into()));
            add("job_lastFailure", "1, labelled with the kind of the job's last failure.", &labels, 1.0);
        }
        let c = &s.checkpoint_counts;
        add("job_numberOfCompletedCheckpoints", "Checkpoints completed.", &job_labels, c.completed_count as f64);
        add("job_numberOfFailedCheckpoints", "Checkpoints failed or timed out.", &job_labels, c.failed_count as f64);
        if let Some(last) = s.checkpoints.last() {
            add(
                "job_lastCheckpointDuration",
                "Milliseconds from the last completed checkpoint's barrier to its manifest.",
                &job_labels,
                last.duration_ms as f64,
            );
            add(
                "job_lastCheckpointSize",
                "Bytes the last completed checkpoint wrote (its incremental size).",
                &job_labels,
                last.bytes_written as f64,
            );
            add(
                "job_lastCheckpointFullSize",
                "Bytes of state the last completed checkpoint stands for (written and shared).",
                &job_labels,
                (last.bytes_written + last.bytes_referenced) as f64,
            );
            add("job_lastCompletedCheckpointId", "The last completed checkpoint's id.", &job_labels, last.id as f64);
        }
        for op in &s.operators {
            let (name, task) = split_name(&op.name);
            let mut labels = job_labels.clone();
            labels.push(("vertex_id".into(), op.place.vertex.to_string()));
            labels.push(("operator_id".into(), op.place.id.clone()));
            labels.push(("operator_name".into(), name.to_string()));
            labels.push(("subtask_index".into(), task.to_string()));
            let rate = jobs.rate(job.id, &op.name);
            let is_source = name.starts_with("Source: ") || name == "Values";
            if !is_source {
                add("operator_numRecordsIn", "Rows the operator task received.", &labels, op.rows_in as f64);
                add("operator_numRecordsInPerSecond", "Rows received per second.", &labels, rate.records_in);
            }
            if !name.starts_with("Sink: ") {
                add("operator_numRecordsOut", "Rows the operator task emitted.", &labels, op.rows_out as f64);
                add("operator_numRecordsOutPerSecond", "Rows emitted per second.", &labels, rate.records_out);
            }
            add("operator_busyTimeMsPerSecond", "Milliseconds per second spent on rows.", &labels, rate.busy_ms);
            add(
                "operator_backPressuredTimeMsPerSecond",
                "Milliseconds per second the task waited for room downstream.",
                &labels,
                rate.backpressured_ms,
            );
            if let Some(w) = op.watermark.filter(|w| *w > i64::MIN / 2 && *w < i64::MAX / 2) {
                add(
                    "operator_currentInputWatermark",
                    "The last watermark the task received, in ms.",
                    &labels,
                    w as f64,
                );
                add(
                    "operator_watermarkLag",
                    "Milliseconds the watermark is behind the wall clock.",
                    &labels,
                    (now - w).max(0) as f64,
                );
            }
            if op.alignment_nanos > 0 {
                add(
                    "operator_checkpointAlignmentTime",
                    "Milliseconds the task's last checkpoint barrier waited for its other inputs (Flink's name).",
                    &labels,
                    op.alignment_nanos as f64 / 1e6,
                );
            }
            add("operator_numLateRecordsDropped", "Rows dropped as late.", &labels, op.late_rows as f64);
            if is_source {
                add(
                    "operator_numRecordsInErrors",
                    "Malformed records skipped (format.ignore-parse-errors).",
                    &labels,
                    op.records_skipped as f64,
                );
            }
            if !op.place.id.is_empty() && !is_source && !name.starts_with("Sink: ") {
                add(
                    "operator_stateSize",
                    "Bytes of the operator's state in the last checkpoint.",
                    &labels,
                    op.state_bytes as f64,
                );
            }
            if name.starts_with("Sink: ") {
                add(
                    "operator_numCommits",
                    "Checkpoints whose output the sink task published.",
                    &labels,
                    op.commits as f64,
                );
                add(
                    "operator_lastCommitDurationMs",
                    "Milliseconds the sink task's last commit took.",
                    &labels,
                    op.last_commit_nanos as f64 / 1e6,
                );
            }
            if !op.partitions.is_empty() {
                let pending: i64 = op.partitions.iter().map(|p| p.lag()).sum();
                add(
                    "operator_pendingRecords",
                    "Records not yet read from the source's partitions.",
                    &labels,
                    pending as f64,
                );
            }
            for p in &op.partitions {
                let mut labels = labels.clone();
                labels.push(("topic".into(), p.topic.clone()));
                labels.push(("partition".into(), p.partition.to_string()));
                add("kafka_partition_lag", "Log end offset minus the task's position.", &labels, p.lag() as f64);
                add("kafka_partition_currentOffset", "The next offset the task reads.", &labels, p.position as f64);
                add(
                    "kafka_partition_endOffset",
                    "The partition's log end offset, as last seen.",
                    &labels,
                    p.end as f64,
                );
            }
        }
    }
    out
}

/// `Name [3]` → (`Name`, 3): metrics carry the task index in their name.
pub(crate) fn split_name(name: &str) -> (&str, usize) {
    if let Some(open) = name.rfind(" [") {
        if let Some(index) = name[open + 2..].strip_suffix(']').and_then(|i| i.parse().ok()) {
            return (&name[..open], index);
        }
    }
    (name, 0)
}

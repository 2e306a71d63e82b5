//! Counters one operator task keeps, readable while the job runs.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

#[derive(Debug)]
pub struct OperatorMetrics {
    pub name: String,
    pub rows_in: AtomicU64,
    pub rows_out: AtomicU64,
    pub batches_in: AtomicU64,
    pub batches_out: AtomicU64,
    /// Malformed input records skipped under `'format.ignore-parse-errors' = 'true'`.
    pub records_skipped: AtomicU64,
    /// Rows that arrived after their window had fired, dropped.
    pub late_rows: AtomicU64,
    /// Latest watermark seen, `i64::MIN` if none yet.
    pub watermark: AtomicI64,
    /// Nanoseconds spent waiting for room in the output channel: how much downstream slowed
    /// this task down.
    pub backpressure_nanos: AtomicU64,
}

impl OperatorMetrics {
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            rows_in: AtomicU64::new(0),
            rows_out: AtomicU64::new(0),
            batches_in: AtomicU64::new(0),
            batches_out: AtomicU64::new(0),
            records_skipped: AtomicU64::new(0),
            late_rows: AtomicU64::new(0),
            watermark: AtomicI64::new(i64::MIN),
            backpressure_nanos: AtomicU64::new(0),
        }
    }

    pub fn record_in(&self, rows: usize) {
        self.rows_in.fetch_add(rows as u64, Relaxed);
        self.batches_in.fetch_add(1, Relaxed);
    }

    pub fn record_out(&self, rows: usize) {
        self.rows_out.fetch_add(rows as u64, Relaxed);
        self.batches_out.fetch_add(1, Relaxed);
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            name: self.name.clone(),
            rows_in: self.rows_in.load(Relaxed),
            rows_out: self.rows_out.load(Relaxed),
            batches_in: self.batches_in.load(Relaxed),
            batches_out: self.batches_out.load(Relaxed),
            records_skipped: self.records_skipped.load(Relaxed),
            late_rows: self.late_rows.load(Relaxed),
            watermark: Some(self.watermark.load(Relaxed)).filter(|w| *w != i64::MIN),
            backpressure_ms: self.backpressure_nanos.load(Relaxed) / 1_000_000,
        }
    }
}

/// A copy of [`OperatorMetrics`] at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsSnapshot {
    pub name: String,
    pub rows_in: u64,
    pub rows_out: u64,
    pub batches_in: u64,
    pub batches_out: u64,
    pub records_skipped: u64,
    pub late_rows: u64,
    pub watermark: Option<i64>,
    pub backpressure_ms: u64,
}

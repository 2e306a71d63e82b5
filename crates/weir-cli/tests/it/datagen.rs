//! The datagen connector rewinds: a checkpointed job over it, killed with SIGKILL in every
//! phase of its file sink's two-phase commit and restarted each time, publishes exactly the
//! rows of an uninterrupted run at another parallelism (datagen's rows depend on neither).

use std::path::Path;

use crate::kills::{assert_same_rows, file_job_under_kills, published};

/// 40,000 generated rows, paced to 2,000 a second so that the kills land before the end; the
/// rows with `score < 50` into CSV files.
fn job(dir: &Path, out: &str, parallelism: u32) -> String {
    format!(
        "SET 'parallelism' = '{parallelism}';
SET 'checkpoint.interval' = '100ms';
SET 'checkpoint.dir' = '{ck}';
SET 'restart.attempts' = '0';
CREATE TABLE gen (id BIGINT, score INT, name STRING, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
  WITH ('connector' = 'datagen', 'rows-per-second' = '2000', 'number-of-rows' = '40000', 'seed' = '7',
        'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '1000000',
        'fields.score.min' = '0', 'fields.score.max' = '99', 'fields.name.length' = '6', 'fields.ts.max-past' = '500ms');
CREATE TABLE {out} (id BIGINT, score INT, name STRING, ts TIMESTAMP(3))
  WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'csv');
INSERT INTO {out} SELECT id, score, name, ts FROM gen WHERE score < 50;
",
        ck = dir.join(format!("{out}-checkpoints")).display(),
        path = dir.join(out).display(),
    )
}

#[test]
fn a_datagen_job_killed_in_every_phase_publishes_the_rows_of_an_uninterrupted_run() {
    let dir = crate::slt::tempdir();
    let (reference, out) = file_job_under_kills(&dir, job);
    let want = published(&reference);
    assert!(want.len() > 15_000 && want.len() < 25_000, "reference has {} rows", want.len());
    assert_same_rows(&published(&out), &want);
}

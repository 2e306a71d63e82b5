//! A statement set is checkpointed and restarted as one job: two INSERTs over one datagen
//! scan, each into an exactly-once file sink (one stateless, one a window aggregate), killed
//! with SIGKILL in every phase of the sinks' two-phase commit and restarted each time at
//! parallelism 2, publish exactly the rows of an uninterrupted run at parallelism 1.

use std::path::Path;

use crate::kills::{assert_same_rows, file_job_under_kills, published};

/// 40,000 generated rows, paced to 2,000 a second so that the kills land before the end:
/// those with `score < 50` into one table, counts per second and `score % 4` (a computed
/// column) into another.
fn job(dir: &Path, name: &str, parallelism: u32) -> String {
    format!(
        "SET 'parallelism' = '{parallelism}';
SET 'checkpoint.interval' = '100ms';
SET 'checkpoint.dir' = '{ck}';
SET 'restart.attempts' = '0';
CREATE TABLE gen (id BIGINT, score INT, name STRING, ts TIMESTAMP(3), bucket AS score % 4, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
  WITH ('connector' = 'datagen', 'rows-per-second' = '2000', 'number-of-rows' = '40000', 'seed' = '11',
        'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '1000000',
        'fields.score.min' = '0', 'fields.score.max' = '99', 'fields.name.length' = '6', 'fields.ts.max-past' = '500ms');
CREATE TABLE low (id BIGINT, score INT, name STRING)
  WITH ('connector' = 'filesystem', 'path' = '{low}', 'format' = 'csv');
CREATE TABLE counts (window_start TIMESTAMP(3), bucket INT, n BIGINT, top INT)
  WITH ('connector' = 'filesystem', 'path' = '{counts}', 'format' = 'csv');
EXECUTE STATEMENT SET BEGIN
INSERT INTO low SELECT id, score, name FROM gen WHERE score < 50;
INSERT INTO counts SELECT window_start, bucket, COUNT(*), MAX(score)
  FROM TABLE(TUMBLE(TABLE gen, DESCRIPTOR(ts), INTERVAL '1' SECOND)) GROUP BY window_start, window_end, bucket;
END;
",
        ck = dir.join(format!("{name}-checkpoints")).display(),
        low = dir.join(name).join("low").display(),
        counts = dir.join(name).join("counts").display(),
    )
}

#[test]
fn a_statement_set_killed_in_every_phase_publishes_both_tables_of_an_uninterrupted_run() {
    let dir = crate::slt::tempdir();
    let (reference, out) = file_job_under_kills(&dir, job);
    let want_low = published(&reference.join("low"));
    let want_counts = published(&reference.join("counts"));
    assert!(want_low.len() > 15_000 && want_low.len() < 25_000, "reference has {} low rows", want_low.len());
    // 20 seconds of event time, 4 buckets each.
    assert!(want_counts.len() >= 80 && want_counts.len() <= 88, "reference has {} counts", want_counts.len());
    assert_same_rows(&published(&out.join("low")), &want_low);
    assert_same_rows(&published(&out.join("counts")), &want_counts);
}

CREATE TABLE nexmark_q (user_id STRING, ms BIGINT, secs STRING) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT user_id, event_ms, CAST(TO_TIMESTAMP_LTZ(event_ms / 1000, 0) AS STRING) FROM clicks WHERE url_len > 5;

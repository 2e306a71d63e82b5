CREATE TABLE nexmark_q (window_start TIMESTAMP(3), window_end TIMESTAMP(3), user_id STRING, n BIGINT, total INT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT window_start, window_end, user_id, COUNT(*), SUM(url_len) FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start, window_end, user_id;

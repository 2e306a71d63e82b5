CREATE TABLE nexmark_q (user_id STRING, ts STRING, url_len INT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT user_id, CAST(ts AS STRING), url_len FROM clicks;

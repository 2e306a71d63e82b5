CREATE TABLE nexmark_q (s STRING, lastPrice INT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT * FROM ticks MATCH_RECOGNIZE (PARTITION BY sym ORDER BY ts MEASURES C.price AS lastPrice ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW PATTERN (A B*? C) DEFINE A AS A.price > 10, B AS B.price < 15, C AS C.price > 12) AS T;

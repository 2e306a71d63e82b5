CREATE TABLE nexmark_q (s STRING, a INT, b INT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT * FROM ticks MATCH_RECOGNIZE (PARTITION BY sym ORDER BY ts MEASURES A.id AS a, LAST(B.id) AS b PATTERN (A B+? C) DEFINE B AS B.price >= A.price, C AS C.price < A.price) AS T;

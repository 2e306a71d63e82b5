CREATE TABLE nexmark_q (s STRING, a INT, c INT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT * FROM ticks MATCH_RECOGNIZE (PARTITION BY sym ORDER BY ts MEASURES FIRST(A.id) AS a, C.id AS c ONE ROW PER MATCH AFTER MATCH SKIP TO FIRST C PATTERN (A B+ C) DEFINE B AS B.price > A.price, C AS C.price < LAST(B.price)) AS T;

CREATE TABLE nexmark_q (s STRING, a INT, s2 INT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT * FROM ticks MATCH_RECOGNIZE (PARTITION BY sym ORDER BY ts MEASURES A.id AS a, SUM(DISTINCT B.price) AS s2 ONE ROW PER MATCH PATTERN (A B+? C) DEFINE B AS B.price < A.price) AS T;

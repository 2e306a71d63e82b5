CREATE TABLE nexmark_q (s STRING, a INT, b INT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT * FROM ticks MATCH_RECOGNIZE (PARTITION BY sym ORDER BY ts MEASURES A.id AS a, B.id AS b ONE ROW PER MATCH PATTERN (A B?) DEFINE B AS B.price > A.price) AS T;

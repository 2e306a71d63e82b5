CREATE TABLE nexmark_q (s STRING, a INT, b INT, c INT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT * FROM ticks MATCH_RECOGNIZE (PARTITION BY sym ORDER BY ts MEASURES A.id AS a, B.id AS b, C.id AS c ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW PATTERN (A? B C) DEFINE A AS A.price > 10, B AS B.price > 5, C AS C.price > B.price) AS T;

CREATE TABLE nexmark_q (s STRING, sumPrice INT, startTime TIMESTAMP(3), endTime TIMESTAMP(3)) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT * FROM ticks MATCH_RECOGNIZE (PARTITION BY sym ORDER BY ts MEASURES SUM(A.price) AS sumPrice, FIRST(ts) AS startTime, LAST(ts) AS endTime ONE ROW PER MATCH AFTER MATCH SKIP TO NEXT ROW PATTERN (A+ C) DEFINE A AS SUM(A.price) < 30) AS T;

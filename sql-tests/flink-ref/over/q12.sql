CREATE TABLE nexmark_q (id INT, k STRING, s INT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT id, k, s FROM (SELECT id, k, SUM(v) OVER (PARTITION BY k ORDER BY ts) AS s FROM ev) WHERE s > 10;

CREATE TABLE nexmark_q (id INT, l1 INT, l2 INT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT id, LAG(v) OVER (PARTITION BY k ORDER BY ts), LAG(v, 2, -1) OVER (PARTITION BY k ORDER BY ts) FROM ev;

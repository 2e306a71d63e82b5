CREATE TABLE nexmark_q (id INT, l INT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT id, LEAD(v) OVER (PARTITION BY k ORDER BY ts) FROM ev;

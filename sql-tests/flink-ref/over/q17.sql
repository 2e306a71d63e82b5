CREATE TABLE nexmark_q (id INT, c BIGINT, s INT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT id, COUNT(DISTINCT v) OVER w, SUM(v) OVER w FROM ev WINDOW w AS (PARTITION BY MOD(id, 2) ORDER BY ts);

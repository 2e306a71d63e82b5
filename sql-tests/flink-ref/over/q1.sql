CREATE TABLE nexmark_q (id INT, s INT, c BIGINT, cv BIGINT, mn INT, mx INT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT id, SUM(v) OVER w, COUNT(*) OVER w, COUNT(v) OVER w, MIN(v) OVER w, MAX(v) OVER w FROM ev WINDOW w AS (PARTITION BY k ORDER BY ts);

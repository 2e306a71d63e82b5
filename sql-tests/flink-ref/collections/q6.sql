CREATE TABLE nexmark_q (id INT, ver INT, tag STRING) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT id, ver, tag FROM orders LEFT JOIN UNNEST(tags) AS t (tag) ON TRUE;

CREATE TABLE nexmark_q (id INT, k STRING, v STRING) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT id, k, v FROM orders LEFT JOIN UNNEST(attrs) AS t (k, v) ON TRUE;

CREATE TABLE nexmark_q (id INT, k STRING, v STRING) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT id, k, v FROM orders CROSS JOIN UNNEST(attrs) AS a (k, v) WHERE ver = 1;

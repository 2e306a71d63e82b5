CREATE TABLE nexmark_q (order_id STRING, tag STRING) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT order_id, tag
FROM OrdersTags CROSS JOIN UNNEST(tags) AS t (tag);

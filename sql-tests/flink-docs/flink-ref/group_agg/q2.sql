CREATE TABLE nexmark_q (c BIGINT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT COUNT(*)
FROM Orders
GROUP BY order_id;

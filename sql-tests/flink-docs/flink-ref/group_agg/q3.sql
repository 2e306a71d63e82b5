CREATE TABLE nexmark_q (c BIGINT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT COUNT(DISTINCT order_id) FROM Orders;

CREATE TABLE nexmark_q (order_id STRING, amount INT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT order_id, amount FROM Orders WHERE amount > 20;

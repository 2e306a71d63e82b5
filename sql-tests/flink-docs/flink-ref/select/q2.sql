CREATE TABLE nexmark_q (order_id STRING, total DECIMAL(11, 2)) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT order_id, price + tax FROM Orders;

CREATE TABLE nexmark_q (id INT, order_id STRING, price DECIMAL(10, 2), tax DECIMAL(10, 2), order_time TIMESTAMP(3)) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT *
FROM Orders
ORDER BY order_time, order_id;

CREATE TABLE nexmark_q (order_id INT, price DECIMAL(2, 1)) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT order_id, price FROM (VALUES (1, 2.0), (2, 3.1))  AS t (order_id, price);

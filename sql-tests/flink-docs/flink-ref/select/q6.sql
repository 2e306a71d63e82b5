CREATE TABLE nexmark_q (order_id STRING, total DECIMAL(38, 2)) WITH ('connector'='blackhole');
INSERT INTO nexmark_q WITH orders_with_total AS (
    SELECT order_id, price + tax AS total
    FROM Orders
)
SELECT order_id, SUM(total)
FROM orders_with_total
GROUP BY order_id;

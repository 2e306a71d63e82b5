CREATE TABLE nexmark_q (id STRING, users STRING, product_id STRING, num BIGINT, amount INT, order_time TIMESTAMP(3), pid STRING, category STRING) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT *
FROM Orders
LEFT JOIN Product
ON Orders.product_id = Product.id;

CREATE TABLE nexmark_q (id STRING, users STRING, product_id STRING, num BIGINT, amount INT, order_time TIMESTAMP(3), sid STRING, order_id STRING, ship_time TIMESTAMP(3)) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT *
FROM Orders o, Shipments s
WHERE o.id = s.order_id
AND o.order_time BETWEEN s.ship_time - INTERVAL '4' HOUR AND s.ship_time;

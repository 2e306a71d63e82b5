CREATE TABLE nexmark_q (order_id STRING, price DECIMAL(32, 2), currency STRING, conversion_rate DECIMAL(32, 2), order_time TIMESTAMP(3)) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT 
     order_id,
     price,
     orders.currency,
     conversion_rate,
     order_time
FROM orders
LEFT JOIN currency_rates FOR SYSTEM_TIME AS OF orders.order_time
ON orders.currency = currency_rates.currency;

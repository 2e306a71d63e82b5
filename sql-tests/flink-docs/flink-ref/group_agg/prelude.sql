CREATE TABLE Orders (order_id STRING, users STRING, product STRING, num BIGINT, amount INT, order_time TIMESTAMP(3))
WITH ('connector' = 'filesystem', 'path' = '../../data/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');

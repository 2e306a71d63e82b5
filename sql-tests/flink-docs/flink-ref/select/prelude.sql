CREATE TABLE Orders (id INT, order_id STRING, price DECIMAL(10, 2), tax DECIMAL(10, 2), order_time TIMESTAMP(3),
  WATERMARK FOR order_time AS order_time - INTERVAL '5' SECOND)
WITH ('connector' = 'filesystem', 'path' = '../../data/orders_tax.csv', 'format' = 'csv', 'csv.null-literal' = '');

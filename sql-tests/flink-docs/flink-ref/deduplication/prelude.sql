CREATE TABLE Orders (
  order_id  STRING,
  `user`    STRING,
  product   STRING,
  num       BIGINT,
  amount    INT,
  order_time TIMESTAMP(3),
  proctime AS PROCTIME(),
  WATERMARK FOR order_time AS order_time - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '../../data/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');

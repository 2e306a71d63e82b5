CREATE TABLE Orders (id STRING, users STRING, product_id STRING, num BIGINT, amount INT, order_time TIMESTAMP(3),
  WATERMARK FOR order_time AS order_time - INTERVAL '5' SECOND)
WITH ('connector' = 'filesystem', 'path' = '../../data/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE Product (id STRING, category STRING)
WITH ('connector' = 'filesystem', 'path' = '../../data/products.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE Shipments (id STRING, order_id STRING, ship_time TIMESTAMP(3),
  WATERMARK FOR ship_time AS ship_time - INTERVAL '5' SECOND)
WITH ('connector' = 'filesystem', 'path' = '../../data/shipments.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE orders (order_id STRING, price DECIMAL(32, 2), currency STRING, order_time TIMESTAMP(3),
  WATERMARK FOR order_time AS order_time - INTERVAL '15' SECOND)
WITH ('connector' = 'filesystem', 'path' = '../../data/orders_fx.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE currency_rates (currency STRING, conversion_rate DECIMAL(32, 2), update_time TIMESTAMP(3),
  WATERMARK FOR update_time AS update_time - INTERVAL '15' SECOND, PRIMARY KEY (currency) NOT ENFORCED)
WITH ('connector' = 'filesystem', 'path' = '../../data/currency_rates.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE OrdersTags (order_id STRING, tags ARRAY<STRING>)
WITH ('connector' = 'filesystem', 'path' = '../../data/orders_tags.json', 'format' = 'json');

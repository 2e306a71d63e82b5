CREATE VIEW t1(s) AS VALUES ('c'), ('a'), ('b'), ('b'), ('c');
CREATE VIEW t2(s) AS VALUES ('d'), ('e'), ('a'), ('b'), ('b');
CREATE TABLE Orders (order_id STRING, `user` STRING, product STRING, num BIGINT, amount INT, order_time TIMESTAMP(3))
WITH ('connector' = 'filesystem', 'path' = '../../data/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE NewProducts (product STRING)
WITH ('connector' = 'filesystem', 'path' = '../../data/new_products.csv', 'format' = 'csv', 'csv.null-literal' = '');

CREATE TABLE Orders (order_id STRING, `user` STRING, product STRING, num BIGINT, amount INT, order_time TIMESTAMP(3)) WITH ('connector' = 'filesystem', 'path' = '../../data/orders.csv', 'format' = 'csv');
CREATE TABLE page_view (`user` STRING, cnt BIGINT, `date` STRING, country STRING) PARTITIONED BY (`date`, country) WITH ('connector' = 'filesystem', 'path' = '${OUT}/page_view', 'format' = 'csv');
INSERT INTO page_view PARTITION (`date`='2019-8-30', country='China') SELECT `user`, num FROM Orders;
INSERT INTO page_view PARTITION (`date`='2019-8-31') SELECT `user`, amount, product FROM Orders WHERE amount > 40;
SELECT * FROM page_view;

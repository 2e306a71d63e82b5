CREATE TABLE Orders_in_file (`user` BIGINT, product STRING, order_time_string STRING, order_time AS to_timestamp(order_time_string))
WITH ('connector' = 'filesystem', 'path' = '../../data/orders_in_file.csv', 'format' = 'csv');

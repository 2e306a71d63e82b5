CREATE TABLE nexmark_q (u BIGINT, product STRING, order_time TIMESTAMP(3)) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT `user`, product, order_time FROM Orders_in_file;

CREATE TABLE nexmark_q (id INT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT DISTINCT id FROM Orders;

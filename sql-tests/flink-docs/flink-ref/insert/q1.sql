CREATE TABLE nexmark_q (product STRING, amount INT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT product, amount FROM Orders WHERE product LIKE '%Rubber%';

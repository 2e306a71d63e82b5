CREATE TABLE nexmark_q (total DECIMAL(11, 2)) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT price + tax FROM Orders WHERE id = 10;

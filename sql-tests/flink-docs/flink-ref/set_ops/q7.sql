CREATE TABLE nexmark_q (u STRING, amount INT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT `user`, amount
FROM Orders
WHERE product IN (
    SELECT product FROM NewProducts
);

CREATE TABLE nexmark_q (u STRING, amount INT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT `user`, amount
FROM Orders
WHERE EXISTS (
    SELECT product FROM NewProducts WHERE NewProducts.product = Orders.product
);

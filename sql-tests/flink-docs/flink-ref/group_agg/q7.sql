CREATE TABLE nexmark_q (s INT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT SUM(amount)
FROM Orders
GROUP BY users
HAVING SUM(amount) > 50;

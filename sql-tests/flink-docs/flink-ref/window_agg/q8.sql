CREATE TABLE nexmark_q (item STRING, sStart TIMESTAMP(3), sEnd TIMESTAMP(3), price DECIMAL(38, 2)) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT
  item,
  SESSION_START(bidtime, INTERVAL '3' MINUTE) AS sStart,
  SESSION_ROWTIME(bidtime, INTERVAL '3' MINUTE) AS sEnd,
  SUM(price)
FROM Bid
GROUP BY
  SESSION(bidtime, INTERVAL '3' MINUTE),
  item;

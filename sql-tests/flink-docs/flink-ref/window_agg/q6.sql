CREATE TABLE nexmark_q (supplier_id STRING, wStart TIMESTAMP(3), price DECIMAL(38, 2)) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT
  supplier_id,
  TUMBLE_START(bidtime, INTERVAL '10' MINUTE) AS wStart,
  SUM(price)
FROM Bid
GROUP BY
  TUMBLE(bidtime, INTERVAL '10' MINUTE),
  supplier_id;

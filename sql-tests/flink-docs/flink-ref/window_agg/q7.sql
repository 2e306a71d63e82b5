CREATE TABLE nexmark_q (supplier_id STRING, wStart TIMESTAMP(3), wEnd TIMESTAMP(3), cnt BIGINT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT
  supplier_id,
  HOP_START(bidtime, INTERVAL '5' MINUTE, INTERVAL '10' MINUTE) AS wStart,
  HOP_END(bidtime, INTERVAL '5' MINUTE, INTERVAL '10' MINUTE) AS wEnd,
  COUNT(*)
FROM Bid
GROUP BY
  HOP(bidtime, INTERVAL '5' MINUTE, INTERVAL '10' MINUTE),
  supplier_id;

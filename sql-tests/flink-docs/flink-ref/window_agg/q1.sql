CREATE TABLE nexmark_q (window_start TIMESTAMP(3), window_end TIMESTAMP(3), supplier_id STRING, price DECIMAL(38, 2)) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT window_start, window_end, supplier_id, SUM(price) as price
  FROM TABLE(
    TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
  GROUP BY window_start, window_end, GROUPING SETS ((supplier_id), ());

CREATE TABLE nexmark_q (window_start TIMESTAMP(3), window_end TIMESTAMP(3), price DECIMAL(38, 2)) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT window_start, window_end, SUM(price)
  FROM TABLE(
    HOP(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '5' MINUTES, INTERVAL '10' MINUTES, INTERVAL '2' MINUTES))
  GROUP BY window_start, window_end;

CREATE TABLE nexmark_q (window_start TIMESTAMP(3), window_end TIMESTAMP(3), price DECIMAL(38, 2)) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT window_start, window_end, SUM(price)
  FROM TABLE(
    CUMULATE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '2' MINUTES, INTERVAL '10' MINUTES, INTERVAL '-3' MINUTES))
  GROUP BY window_start, window_end;

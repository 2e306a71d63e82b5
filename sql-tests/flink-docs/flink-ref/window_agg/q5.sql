CREATE TABLE nexmark_q (window_start TIMESTAMP(3), window_end TIMESTAMP(3), total_price DECIMAL(38, 2)) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT window_start, window_end, SUM(partial_price) as total_price
  FROM TABLE(
      TUMBLE(TABLE window1, DESCRIPTOR(rowtime), INTERVAL '10' MINUTES))
  GROUP BY window_start, window_end;

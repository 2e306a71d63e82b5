CREATE TABLE nexmark_q (window_start TIMESTAMP(3), window_end TIMESTAMP(3), supplier_id STRING, price DECIMAL(38, 2), cnt BIGINT, rownum BIGINT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT *
  FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY price DESC) as rownum
    FROM (
      SELECT window_start, window_end, supplier_id, SUM(price) as price, COUNT(*) as cnt
      FROM TABLE(
        TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
      GROUP BY window_start, window_end, supplier_id
    )
  ) WHERE rownum <= 3;

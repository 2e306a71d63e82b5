CREATE TABLE nexmark_q (bidtime TIMESTAMP(3), price DECIMAL(10, 2), item STRING, supplier_id STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3), window_time TIMESTAMP(3), rownum BIGINT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT *
  FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY price DESC) as rownum
    FROM TABLE(
               TUMBLE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '10' MINUTES))
  ) WHERE rownum <= 3;

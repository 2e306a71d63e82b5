CREATE TABLE nexmark_q (order_id STRING, u STRING, product STRING, num BIGINT, order_time TIMESTAMP(3)) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT order_id, `user`, product, num, order_time
FROM (
  SELECT *,
    ROW_NUMBER() OVER (PARTITION BY order_id ORDER BY order_time ASC) AS row_num
  FROM Orders)
WHERE row_num = 1;

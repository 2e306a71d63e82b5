CREATE TABLE nexmark_q (product_id STRING, category STRING, product_name STRING, sales BIGINT, row_num BIGINT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT *
FROM (
  SELECT *,
    ROW_NUMBER() OVER (PARTITION BY category ORDER BY sales DESC) AS row_num
  FROM ShopSales)
WHERE row_num <= 5;

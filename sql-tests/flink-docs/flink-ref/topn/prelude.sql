CREATE TABLE ShopSales (
  product_id   STRING,
  category     STRING,
  product_name STRING,
  sales        BIGINT
) WITH ('connector' = 'filesystem', 'path' = '../../data/shop_sales.csv', 'format' = 'csv', 'csv.null-literal' = '');

CREATE TABLE nexmark_q (supplier_id STRING, rating INT, total BIGINT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT supplier_id, rating, COUNT(*)
FROM (VALUES
    ('supplier1', 'product1', 4),
    ('supplier1', 'product2', 3),
    ('supplier2', 'product3', 3),
    ('supplier2', 'product4', 4))
AS Products(supplier_id, product_id, rating)
GROUP BY ROLLUP (supplier_id, rating);

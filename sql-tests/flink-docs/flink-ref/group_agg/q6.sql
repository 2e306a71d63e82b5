CREATE TABLE nexmark_q (supplier_id STRING, rating INT, product_id STRING, total BIGINT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT supplier_id, rating, product_id, COUNT(*)
FROM (VALUES
    ('supplier1', 'product1', 4),
    ('supplier1', 'product2', 3),
    ('supplier2', 'product3', 3),
    ('supplier2', 'product4', 4))
AS Products(supplier_id, product_id, rating)
GROUP BY CUBE (supplier_id, rating, product_id);

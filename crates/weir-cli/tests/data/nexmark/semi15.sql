-- Weir's semi and anti join test (semi15); Flink's rows in semi15.flink.csv.

CREATE TABLE nexmark_semi15 (
  auction BIGINT,
  n BIGINT
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_semi15
SELECT T.auction, T.n FROM (SELECT auction, count(*) AS n FROM bid GROUP BY auction) T WHERE NOT EXISTS (SELECT 1 FROM (SELECT auction, max(price) AS m FROM bid GROUP BY auction HAVING count(*) % 3 = 0) M WHERE M.auction = T.auction AND M.m > T.n * 1000);

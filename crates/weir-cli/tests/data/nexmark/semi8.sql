-- Weir's semi and anti join test (semi8); Flink's rows in semi8.flink.csv.

CREATE TABLE nexmark_semi8 (
  id BIGINT
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_semi8
SELECT A.id FROM auction A WHERE NOT EXISTS (SELECT 1 FROM (SELECT auction, count(*) AS c FROM bid GROUP BY auction) C WHERE C.auction = A.id AND C.c > 10);

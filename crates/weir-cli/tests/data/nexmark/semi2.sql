-- Weir's semi and anti join test (semi2); Flink's rows in semi2.flink.csv.

CREATE TABLE nexmark_semi2 (
  auction BIGINT,
  price BIGINT
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_semi2
SELECT B.auction, B.price FROM bid B WHERE EXISTS (SELECT 1 FROM auction A WHERE A.id = B.auction AND A.reserve < B.price);

-- Weir's semi and anti join test (semi9); Flink's rows in semi9.flink.csv.

CREATE TABLE nexmark_semi9 (
  auction BIGINT,
  n BIGINT
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_semi9
SELECT T.auction, T.n FROM (SELECT auction, count(*) AS n FROM bid GROUP BY auction) T WHERE T.auction IN (SELECT id FROM auction WHERE category = 11);

-- Weir's semi and anti join test (semi10); Flink's rows in semi10.flink.csv.

CREATE TABLE nexmark_semi10 (
  bidder BIGINT,
  n BIGINT
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_semi10
SELECT T.bidder, T.n FROM (SELECT bidder, count(*) AS n FROM bid GROUP BY bidder) T WHERE T.bidder NOT IN (SELECT seller FROM (SELECT seller, count(*) AS c FROM auction GROUP BY seller) S WHERE S.c >= 3);

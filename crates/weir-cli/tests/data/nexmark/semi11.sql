-- Weir's semi and anti join test (semi11); Flink's rows in semi11.flink.csv.

CREATE TABLE nexmark_semi11 (
  seller BIGINT
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_semi11
SELECT seller FROM auction INTERSECT SELECT bidder FROM bid;

-- Weir's semi and anti join test (semi12); Flink's rows in semi12.flink.csv.

CREATE TABLE nexmark_semi12 (
  bidder BIGINT
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_semi12
SELECT bidder FROM bid EXCEPT SELECT seller FROM auction;

-- Weir's semi and anti join test (semi1); Flink's rows in semi1.flink.csv.

CREATE TABLE nexmark_semi1 (
  auction BIGINT,
  bidder BIGINT,
  price BIGINT
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_semi1
SELECT B.auction, B.bidder, B.price FROM bid B WHERE B.auction IN (SELECT id FROM auction WHERE category = 10);

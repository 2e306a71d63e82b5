-- Weir's semi and anti join test (semi13); Flink's rows in semi13.flink.csv.

CREATE TABLE nexmark_semi13 (
  auction BIGINT,
  bidder BIGINT,
  price BIGINT
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_semi13
SELECT B.auction, B.bidder, B.price FROM bid B WHERE EXISTS (SELECT 1 FROM bid B2 WHERE B2.auction = B.auction AND B2.bidder = B.bidder AND B2.price > B.price);

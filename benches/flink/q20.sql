-- Nexmark q20 (nexmark-flink's text, these tables' column names): bids joined with their auction.
-- AUCTIONS_PATH is put in by benches/compare_flink_joins.sh.
CREATE TABLE auction (
  id BIGINT, item_name STRING, description STRING, initial_bid BIGINT, reserve BIGINT, date_time TIMESTAMP(3),
  expires TIMESTAMP(3), seller BIGINT, category BIGINT, extra STRING,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH ('connector' = 'filesystem', 'path' = 'AUCTIONS_PATH', 'format' = 'csv');
CREATE TABLE q20_sink (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, bid_dateTime TIMESTAMP(3),
  bid_extra VARCHAR, itemName VARCHAR, description VARCHAR, initialBid BIGINT, reserve BIGINT,
  auction_dateTime TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, category BIGINT, auction_extra VARCHAR
) WITH (${SINK});
INSERT INTO q20_sink
SELECT
    auction, bidder, price, channel, url, B.date_time, B.extra,
    item_name, description, initial_bid, reserve, A.date_time, expires, seller, category, A.extra
FROM
    bid AS B INNER JOIN auction AS A on B.auction = A.id
WHERE A.category = 10;

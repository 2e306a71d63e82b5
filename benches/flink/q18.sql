-- Nexmark q18 (nexmark-flink's text, this bid table's column names): each bidder's last bid per auction.
CREATE TABLE q18_sink (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, date_time TIMESTAMP(3), extra VARCHAR
) WITH (${SINK});
INSERT INTO q18_sink
SELECT auction, bidder, price, channel, url, date_time, extra
 FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC) AS rank_number
       FROM bid)
 WHERE rank_number <= 1;

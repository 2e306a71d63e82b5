-- Nexmark q19 (nexmark-flink's text): ten bids per auction by price.
CREATE TABLE q19_sink (
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, date_time TIMESTAMP(3), extra VARCHAR,
  rank_number BIGINT
) WITH (${SINK});
INSERT INTO q19_sink
SELECT * FROM
(SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number FROM bid)
WHERE rank_number <= 10;

-- A moving average per auction over its last 10 bids (an OVER aggregate, ROWS frame).
CREATE TABLE over_avg_sink (auction BIGINT, price BIGINT, avg_price BIGINT) WITH (${SINK});
INSERT INTO over_avg_sink
SELECT auction, price,
       AVG(price) OVER (PARTITION BY auction ORDER BY date_time ROWS BETWEEN 9 PRECEDING AND CURRENT ROW) AS avg_price
FROM bid;

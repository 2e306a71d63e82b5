-- Each bidder's previous bid price (LAG over an unbounded OVER window).
CREATE TABLE over_lag_sink (bidder BIGINT, price BIGINT, prev_price BIGINT) WITH (${SINK});
INSERT INTO over_lag_sink
SELECT bidder, price, LAG(price) OVER (PARTITION BY bidder ORDER BY date_time) AS prev_price
FROM bid;

-- Weir quickstart: a shipped sample of Nexmark bids, through a continuous query, to the console.
-- Run it with:  weir run examples/quickstart.sql
-- Relative paths are relative to this file.

CREATE TABLE bids (
    auction   BIGINT,
    bidder    BIGINT,
    price     BIGINT,
    channel   STRING,
    url       STRING,
    date_time TIMESTAMP(3),
    extra     STRING,
    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (
    'connector' = 'filesystem',
    'path' = 'data/bids.csv',
    'format' = 'csv'
);

CREATE TABLE console (
    auction   BIGINT,
    bidder    BIGINT,
    price_eur DECIMAL(10, 2),
    channel   STRING,
    bid_time  TIMESTAMP(3)
) WITH ('connector' = 'print');

-- Nexmark q1 (currency conversion) plus a q2-style filter on the expensive bids.
INSERT INTO console
SELECT auction,
       bidder,
       CAST(price * 0.908 AS DECIMAL(10, 2)) AS price_eur,
       CASE WHEN channel IN ('Google', 'Facebook', 'Baidu', 'Apple') THEN lower(channel) ELSE 'other' END AS channel,
       date_time AS bid_time
FROM bids
WHERE price >= 10000;

-- Nexmark q12 (nexmark-flink's text): bids per bidder in processing-time windows.
CREATE TABLE q12_sink (bidder BIGINT, bid_count BIGINT, starttime TIMESTAMP(3), endtime TIMESTAMP(3)) WITH (${SINK});
CREATE TEMPORARY VIEW IF NOT EXISTS B AS SELECT *, PROCTIME() as p_time FROM bid;
INSERT INTO q12_sink
SELECT
    bidder,
    count(*) as bid_count,
    window_start AS starttime,
    window_end AS endtime
FROM TABLE(
        TUMBLE(TABLE B, DESCRIPTOR(p_time), INTERVAL '10' SECOND))
GROUP BY bidder, window_start, window_end;

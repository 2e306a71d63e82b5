-- Three rising prices in a row per auction within 10 seconds (MATCH_RECOGNIZE).
CREATE TABLE match_sink (auction BIGINT, first_price BIGINT, last_price BIGINT, last_time TIMESTAMP(3)) WITH (${SINK});
INSERT INTO match_sink
SELECT * FROM bid MATCH_RECOGNIZE (PARTITION BY auction ORDER BY date_time
  MEASURES A.price AS first_price, C.price AS last_price, MATCH_ROWTIME() AS last_time
  AFTER MATCH SKIP PAST LAST ROW PATTERN (A B C) WITHIN INTERVAL '10' SECOND
  DEFINE B AS B.price > A.price, C AS C.price > B.price) AS T;

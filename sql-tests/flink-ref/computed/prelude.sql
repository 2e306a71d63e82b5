CREATE TABLE clicks (
  user_id STRING,
  url STRING,
  event_ms BIGINT,
  ts AS TO_TIMESTAMP_LTZ(event_ms, 3),
  url_len AS CHAR_LENGTH(url),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH ('connector' = 'filesystem', 'path' = '../../data/clicks_ms.csv', 'format' = 'csv');

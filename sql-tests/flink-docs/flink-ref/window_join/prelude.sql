CREATE TABLE LeftTable (row_time TIMESTAMP(3), num INT, id STRING,
  WATERMARK FOR row_time AS row_time - INTERVAL '1' SECOND)
WITH ('connector' = 'filesystem', 'path' = '../../data/left.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE RightTable (row_time TIMESTAMP(3), num INT, id STRING,
  WATERMARK FOR row_time AS row_time - INTERVAL '1' SECOND)
WITH ('connector' = 'filesystem', 'path' = '../../data/right.csv', 'format' = 'csv', 'csv.null-literal' = '');

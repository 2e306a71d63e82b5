CREATE TABLE ticks (id INT, sym STRING, price INT, tax INT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
WITH ('connector' = 'filesystem', 'path' = 'data/ticks.csv', 'format' = 'csv', 'csv.null-literal' = '');

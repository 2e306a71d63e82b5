CREATE TABLE orders (
  id INT,
  ver INT,
  tags ARRAY<STRING>,
  attrs MAP<STRING, STRING>,
  buyer ROW<name STRING, age INT>
) WITH ('connector' = 'filesystem', 'path' = '../../data/nested.json', 'format' = 'json');

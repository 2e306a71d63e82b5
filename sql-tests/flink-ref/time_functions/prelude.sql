CREATE TABLE pairs (id INT, a TIMESTAMP(3), b TIMESTAMP(3), s STRING)
WITH ('connector' = 'filesystem', 'path' = '../../data/time_pairs.csv', 'format' = 'csv');

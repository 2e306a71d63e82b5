CREATE TABLE people (id INT, name STRING, age INT, joined TIMESTAMP(3), active BOOLEAN)
WITH ('connector' = 'filesystem', 'path' = '../../data/people.csv', 'format' = 'csv', 'csv.null-literal' = '');

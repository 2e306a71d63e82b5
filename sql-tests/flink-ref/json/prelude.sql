CREATE TABLE docs (id INT, doc STRING)
WITH ('connector' = 'filesystem', 'path' = '../../data/json_docs.csv', 'format' = 'csv', 'csv.field-delimiter' = '|', 'csv.quote-character' = '~');

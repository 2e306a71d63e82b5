CREATE TABLE ev (id INT, k STRING, v INT, s STRING, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) WITH ('connector' = 'filesystem', 'path' = 'data/agg_updates.json', 'format' = 'json');
CREATE VIEW latest AS SELECT id, k, v, s, ts FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY id ORDER BY ts DESC) AS rn FROM ev) WHERE rn = 1;

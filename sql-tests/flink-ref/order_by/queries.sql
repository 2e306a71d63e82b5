CREATE TABLE events (id INT, `user` STRING, amount INT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
WITH ('connector' = 'filesystem', 'path' = '../../data/sort_events.csv', 'format' = 'csv', 'csv.null-literal' = '');
SELECT id, `user`, amount, ts FROM events ORDER BY ts, amount;
SELECT id, amount, ts FROM events ORDER BY ts, amount DESC, id;
SELECT `user`, amount FROM events WHERE amount > 4 ORDER BY ts, `user` DESC;
SELECT id, amount FROM events ORDER BY ts, amount DESC;
SELECT id FROM events ORDER BY ts LIMIT 3;
SELECT id FROM events ORDER BY ts DESC;
SELECT id, amount FROM events ORDER BY amount DESC LIMIT 2 OFFSET 1;
SELECT id FROM events ORDER BY ts OFFSET 2;
SELECT id FROM events ORDER BY ts;

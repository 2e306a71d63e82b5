CREATE TABLE nexmark_q (row_time TIMESTAMP(3), num INT, id STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3), window_time TIMESTAMP(3)) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT *
           FROM (
               SELECT * FROM TABLE(TUMBLE(TABLE LeftTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))
           ) L WHERE EXISTS (
             SELECT * FROM (
               SELECT * FROM TABLE(TUMBLE(TABLE RightTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))
             ) R WHERE L.num = R.num AND L.window_start = R.window_start AND L.window_end = R.window_end);

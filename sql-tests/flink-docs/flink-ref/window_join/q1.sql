CREATE TABLE nexmark_q (L_Num INT, L_Id STRING, R_Num INT, R_Id STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3)) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT L.num as L_Num, L.id as L_Id, R.num as R_Num, R.id as R_Id, L.window_start, L.window_end
           FROM (
               SELECT * FROM TABLE(TUMBLE(TABLE LeftTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))
           ) L
           FULL JOIN (
               SELECT * FROM TABLE(TUMBLE(TABLE RightTable, DESCRIPTOR(row_time), INTERVAL '5' MINUTES))
           ) R
           ON L.num = R.num AND L.window_start = R.window_start AND L.window_end = R.window_end;

CREATE TABLE nexmark_q (k STRING, ws TIMESTAMP(3), sp INT, vs INT, ssd DOUBLE) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT k, window_start, STDDEV_POP(v), VAR_SAMP(v), STDDEV_SAMP(CAST(v AS DOUBLE)) FROM TABLE(HOP(TABLE ev, DESCRIPTOR(ts), INTERVAL '4' SECOND, INTERVAL '8' SECOND)) GROUP BY k, window_start, window_end;

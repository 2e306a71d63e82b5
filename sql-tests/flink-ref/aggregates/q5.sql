CREATE TABLE nexmark_q (k STRING, fs STRING, ls STRING, la STRING, la2 STRING, fv INT, lv INT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT k, FIRST_VALUE(s), LAST_VALUE(s), LISTAGG(s), LISTAGG(s, ';'), FIRST_VALUE(v), LAST_VALUE(v) FROM latest GROUP BY k;

CREATE TABLE nexmark_q (k STRING, ja STRING, jn STRING) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT k, JSON_ARRAYAGG(s), JSON_ARRAYAGG(v NULL ON NULL) FROM ev GROUP BY k;

CREATE TABLE nexmark_q (s STRING) WITH ('connector'='blackhole');
INSERT INTO nexmark_q (SELECT s FROM t1) INTERSECT ALL (SELECT s FROM t2);

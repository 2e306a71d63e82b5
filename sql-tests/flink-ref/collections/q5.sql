CREATE TABLE nexmark_q (id INT, ver INT, t1 STRING, t5 STRING, color STRING, age INT, c INT) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT id, ver, tags[1], tags[5], attrs['color'], buyer.age, CARDINALITY(tags) FROM orders;

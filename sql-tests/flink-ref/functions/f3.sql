CREATE TABLE nexmark_q (id INT, fm TIMESTAMP(3), cs TIMESTAMP(3), fd TIMESTAMP(3), ch TIMESTAMP(3), cmo TIMESTAMP(3)) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT id, FLOOR(joined TO MINUTE), CEIL(joined TO SECOND), FLOOR(joined TO DAY), CEIL(joined TO HOUR), CEIL(joined TO MONTH) FROM people;

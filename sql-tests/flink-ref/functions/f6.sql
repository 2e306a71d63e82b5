CREATE TABLE nexmark_q (id INT, p1 STRING, t1 BIGINT, t2 BIGINT, b1 BOOLEAN, b2 BOOLEAN, s1 STRING) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT id, PARSE_URL('not a url', 'HOST'), UNIX_TIMESTAMP('yesterday'), UNIX_TIMESTAMP('2023-01-01 10:00:0' || CAST(id AS STRING)),
  CAST(age AS STRING) BETWEEN ASYMMETRIC '20' AND '40', id BETWEEN SYMMETRIC age AND 3, PARSE_URL('http://a.com/x?k=1&k=2&kk=3', 'QUERY', 'k')
FROM people;

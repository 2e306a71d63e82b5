CREATE TABLE nexmark_q (id INT, a STRING, b STRING, c STRING, d STRING, e STRING, f STRING, g STRING, h STRING, i STRING, j STRING) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT id, COALESCE(REGEXP_EXTRACT(name, '(a)(l)?', 0), 'N'), COALESCE(REGEXP_EXTRACT(name, 'a(l)?', 1), 'N'), COALESCE(REGEXP_EXTRACT(name, '([a-z])([a-z])'), 'N'),
  COALESCE(REGEXP_EXTRACT(name, '(e)', 3), 'N'), COALESCE(REGEXP_EXTRACT(name, 'x(y)', 1), 'N'), CONCAT('[', REGEXP_EXTRACT(name, 'z*', 0), ']'),
  COALESCE(REGEXP_EXTRACT(name, '([a-z])([a-z])', MOD(id, 3)), 'N'), COALESCE(REGEXP_EXTRACT(name, '(a)', -1), 'N'),
  COALESCE(REGEXP_EXTRACT(name, CONCAT(SUBSTRING(name, 1, 1), '(.)'), 1), 'N'), COALESCE(REGEXP_EXTRACT(CAST(age AS STRING), '([0-9])$', 1), 'N') FROM people;

CREATE TABLE nexmark_q (id INT, b1 STRING, b2 STRING, s1 STRING, u1 STRING, u2 STRING, u3 STRING, u4 STRING, u5 STRING, u6 STRING, u7 STRING, m1 STRING, m2 INT, m3 STRING, ts1 BIGINT, ts2 BIGINT, ty1 STRING, ty2 STRING, ty3 STRING, e1 INT, bs1 BOOLEAN, bs2 BOOLEAN, dc STRING) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT id, BIN(age), BIN(-id), SHA1(name),
  PARSE_URL('http://facebook.com/path' || CAST(id AS STRING) || '/p.php?k1=' || name || '&k2=v2#Ref1', 'HOST'),
  PARSE_URL('http://facebook.com/path' || CAST(id AS STRING) || '/p.php?k1=' || name || '&k2=v2#Ref1', 'QUERY', 'k1'),
  PARSE_URL('http://facebook.com/path' || CAST(id AS STRING) || '/p.php?k1=' || name || '&k2=v2#Ref1', 'PATH'),
  PARSE_URL('http://user:pw@facebook.com:8080/path' || CAST(id AS STRING) || '/p.php?k1=' || name || '&k2=v2#Ref1', 'FILE'),
  PARSE_URL('http://user:pw@facebook.com:8080/p.php?k1=' || name || '#Ref1', 'AUTHORITY'),
  PARSE_URL('https://user:pw@facebook.com/p?k1=' || name, 'USERINFO'),
  PARSE_URL('https://facebook.com/p?k1=' || name || '#r' || CAST(id AS STRING), 'REF') || PARSE_URL('ftp://x/y', 'PROTOCOL'),
  STR_TO_MAP('a=' || name || ',b=2')['a'],
  CARDINALITY(STR_TO_MAP('k1:v1;k2:v2;k1:v' || CAST(id AS STRING), ';', ':')),
  STR_TO_MAP('k1:v1;k2:v2;k1:v' || CAST(id AS STRING), ';', ':')['k1'],
  UNIX_TIMESTAMP(CAST(joined AS STRING)),
  UNIX_TIMESTAMP('2023/01/0' || CAST(id AS STRING), 'yyyy/MM/dd'),
  TYPEOF(age), TYPEOF(name), TYPEOF(joined),
  ELEMENT(ARRAY[age]),
  age BETWEEN SYMMETRIC 40 AND 30, age NOT BETWEEN SYMMETRIC 40 AND 20,
  DECODE(ENCODE(name, 'UTF-16BE'), 'UTF-16BE')
FROM people;

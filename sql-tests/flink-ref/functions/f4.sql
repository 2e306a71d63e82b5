CREATE TABLE nexmark_q (id INT, o1 STRING, o2 STRING, o3 STRING, a1 STRING, a2 STRING, a3 STRING, j1 BOOLEAN, j2 BOOLEAN, j3 BOOLEAN, j4 BOOLEAN, j5 BOOLEAN, j6 BOOLEAN) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT id,
  JSON_OBJECT('name' VALUE name, 'age' VALUE age),
  JSON_OBJECT(KEY 'n' VALUE name, KEY 'a' VALUE age ABSENT ON NULL),
  JSON_OBJECT('p' VALUE JSON_OBJECT('x' VALUE id), 'arr' VALUE JSON_ARRAY(age, name), 's' VALUE '{"a":1}', 'b' VALUE active, 'd' VALUE age / 4.0, 'q' VALUE 'say "hi"'),
  JSON_ARRAY(id, name, age),
  JSON_ARRAY(age NULL ON NULL),
  JSON_ARRAY(JSON_ARRAY(id), JSON_OBJECT('k' VALUE id), JSON_ARRAY()),
  name IS JSON,
  '{"a":' || CAST(id AS STRING) || '}' IS JSON OBJECT,
  CAST(age AS STRING) IS JSON SCALAR,
  CAST(age AS STRING) IS NOT JSON ARRAY,
  '[' || name || ']' IS JSON VALUE,
  '[' || CAST(id AS STRING) || ']' IS JSON ARRAY
FROM people;

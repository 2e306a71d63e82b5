CREATE TABLE nexmark_q (id INT, y BIGINT, q BIGINT, mo BIGINT, w BIGINT, doy BIGINT, dom BIGINT, dow BIGINT, i STRING, alpha BOOLEAN, digit BOOLEAN, dec BOOLEAN, sg DOUBLE, tr DOUBLE, ce DOUBLE, b64 STRING, unb64 STRING, loc INT, rx BOOLEAN, sha STRING, bn STRING, hx STRING, db STRING) WITH ('connector'='blackhole');
INSERT INTO nexmark_q SELECT id, YEAR(joined), QUARTER(joined), MONTH(joined), WEEK(joined), DAYOFYEAR(joined), DAYOFMONTH(joined), DAYOFWEEK(joined),
  IF(age > 30, name, 'young'), IS_ALPHA(name), IS_DIGIT(CAST(age AS STRING)), IS_DECIMAL(CAST(age / 2.0 AS STRING)),
  SIGN(age - 30.5), TRUNCATE(age / 7.0, 2), CEILING(age / 7.0), TO_BASE64(name), FROM_BASE64(TO_BASE64(name)), LOCATE('a', name), REGEXP(name, 'a.'),
  SHA256(name), BIN(age), HEX(age), CURRENT_DATABASE() FROM people;

-- Weir's semi and anti join test (semi16); Flink's rows in semi16.flink.csv.

CREATE TABLE nexmark_semi16 (
  id BIGINT,
  reserve BIGINT
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_semi16
SELECT A.id, A.reserve FROM auction A WHERE A.reserve % 10 NOT IN (SELECT CASE WHEN B.price % 97 = 0 THEN CAST(NULL AS BIGINT) ELSE B.price % 10 END FROM bid B WHERE B.auction = A.id);

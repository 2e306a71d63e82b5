-- Weir's semi and anti join test (semi3); Flink's rows in semi3.flink.csv.

CREATE TABLE nexmark_semi3 (
  id BIGINT,
  name VARCHAR
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_semi3
SELECT P.id, P.name FROM person P WHERE NOT EXISTS (SELECT * FROM auction A WHERE A.seller = P.id);

-- Weir's semi and anti join test (semi5); Flink's rows in semi5.flink.csv.

CREATE TABLE nexmark_semi5 (
  id BIGINT
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_semi5
SELECT id FROM auction WHERE id NOT IN (SELECT CASE WHEN price > 9000000 THEN CAST(NULL AS BIGINT) ELSE auction END FROM bid);

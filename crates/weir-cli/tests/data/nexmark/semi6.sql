-- Weir's semi and anti join test (semi6); Flink's rows in semi6.flink.csv.

CREATE TABLE nexmark_semi6 (
  x BIGINT
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_semi6
SELECT x FROM (SELECT CASE WHEN id % 5 = 0 THEN CAST(NULL AS BIGINT) ELSE id END AS x FROM auction) WHERE x NOT IN (SELECT auction FROM bid WHERE price > 1000000);

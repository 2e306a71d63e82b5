-- Weir's semi and anti join test (semi4); Flink's rows in semi4.flink.csv.

CREATE TABLE nexmark_semi4 (
  id BIGINT,
  category BIGINT
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_semi4
SELECT A.id, A.category FROM auction A WHERE A.id NOT IN (SELECT auction FROM bid WHERE price > 1000000);
